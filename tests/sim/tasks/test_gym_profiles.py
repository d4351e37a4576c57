"""What hotloop knows about Fetch and PushT (hotloop.sim.tasks.gym_profiles)."""

import numpy as np
import pytest

from hotloop.sim.tasks import make_task
from hotloop.sim.tasks.gym_profiles import (
    FETCH_DELTA_SCALE,
    FetchProfile,
    GymProfile,
    PushTProfile,
    profile_for,
)

pytest.importorskip("gymnasium_robotics", reason="the sims extra is not installed")


def test_profiles_are_chosen_by_env_id():
    assert isinstance(profile_for("FetchPickAndPlace-v4"), FetchProfile)
    assert isinstance(profile_for("gym_pusht/PushT-v0"), PushTProfile)
    assert type(profile_for("CartPole-v1")) is GymProfile


def test_the_enum_safe_joint_helpers_read_and_write_the_right_slices():
    from hotloop.sim.tasks.gym_profiles import _enum_safe_mujoco_utils

    env = make_task("gym:FetchPickAndPlace-v4")
    try:
        env.reset(seed=0)
        base = env.env.unwrapped
        utils = _enum_safe_mujoco_utils()
        model, data = base.model, base.data
        free = model.joint("object0:joint")
        pose = utils.get_joint_qpos(model, data, "object0:joint")
        assert pose.shape == (7,) and np.array_equal(pose, data.qpos[free.qposadr[0] : free.qposadr[0] + 7])
        utils.set_joint_qpos(model, data, "object0:joint", pose + [0.01, 0, 0, 0, 0, 0, 0])
        assert data.qpos[free.qposadr[0]] == pytest.approx(pose[0] + 0.01)
        assert utils.get_joint_qvel(model, data, "object0:joint").shape == (6,)
        hinge = utils.get_joint_qpos(model, data, "robot0:shoulder_pan_joint")
        assert hinge.shape == (1,)
        qpos, qvel = utils.robot_get_obs(model, data, base._model_names.joint_names)
        assert qpos.shape == qvel.shape and qpos.size > 5
    finally:
        env.close()


def test_fetch_turns_a_held_target_into_a_clipped_delta():
    profile = FetchProfile()
    obs = {"observation": np.array([1.3, 0.7, 0.5] + [0.0] * 7)}
    native = profile.native_action(np.array([1.31, 0.7, 0.9, -1.0]), obs, None)
    assert native[0] == pytest.approx(0.01 / FETCH_DELTA_SCALE) and native[1] == 0
    assert native[2] == 1.0 and native[3] == -1.0  # 40 cm away: one full step; the grip passes through
