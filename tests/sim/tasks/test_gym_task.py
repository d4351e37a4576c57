"""`gym:ENV_ID` tasks (hotloop.sim.tasks.gym_task) on the real gymnasium-robotics Fetch and gym-pusht."""

import numpy as np
import pytest

from hotloop.errors import ConfigError, UnknownNameError
from hotloop.sim.tasks import check_task, make_task

pytest.importorskip("gymnasium_robotics", reason="the sims extra is not installed")

REACH = "gym:FetchReach-v4"
PUSHT = "gym:gym_pusht/PushT-v0"


@pytest.fixture(scope="module")
def reach():
    env = make_task(REACH)
    yield env
    env.close()


def test_fetch_builds_on_this_mujoco_and_declares_what_it_provides(reach):
    spec = reach.task_spec
    assert spec.action_names == ("target_x", "target_y", "target_z", "grip")
    assert spec.state_names[:3] == ("grip_x", "grip_y", "grip_z") and spec.state_names[-3:][0] == "goal_x"
    assert [(i.key, i.height, i.width) for i in spec.images] == [("front", 64, 64)]
    assert reach.config.physics_dt == pytest.approx(0.04)  # one tick = one native step
    assert reach.config.time_limit_s == pytest.approx(50 * 0.04)  # the env's own max_episode_steps


def test_seeding_is_explicit_and_repeatable(reach):
    first, _ = reach.reset(seed=3)
    again, _ = reach.reset(seed=3)
    other, _ = reach.reset(seed=4)
    assert np.array_equal(first["state"], again["state"])
    assert np.array_equal(first["images"]["front"], again["images"]["front"])
    assert not np.array_equal(first["state"][-3:], other["state"][-3:])  # another goal
    with pytest.raises(ConfigError, match="explicit seed"):
        reach.reset()


def test_holding_an_absolute_target_keeps_the_gripper_there(reach):
    obs, _ = reach.reset(seed=0)
    start = obs["state"][:3].astype(np.float64)
    target = np.array([*start + [0.08, -0.05, 0.04], 1.0])
    reach.advance(target, 15)  # more than 5 cm: the env's per-step delta is clipped, the target held
    moved = reach.state()[:3]
    assert np.linalg.norm(moved - target[:3]) < 0.01
    reach.advance(reach.hold_action(), 10)  # holding: no drift (a zero *delta* would not be a hold)
    assert np.linalg.norm(reach.state()[:3] - moved) < 0.005


def test_success_comes_from_the_envs_info(reach):
    obs, _ = reach.reset(seed=1)
    goal = obs["state"][-3:]
    success = False
    for _ in range(20):
        success, failed = reach.advance(np.array([*goal, 1.0]), 1)
        if success:
            break
    assert success and reach.info()["is_success"] is True


def test_images_come_from_our_renderer_without_shadows_or_antialiasing(reach):
    import mujoco

    reach.reset(seed=0)
    image = reach.observe()["images"]["front"]
    assert image.shape == (64, 64, 3) and image.dtype == np.uint8 and image.std() > 10  # a scene, not a fill
    views = reach._views
    assert reach.env.unwrapped.model.vis.quality.offsamples == 0
    assert not views._renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW]


def test_task_kwargs_reach_gym_make_and_bad_ones_are_one_line_errors():
    short = make_task(REACH, task_kwargs='{"max_episode_steps": 10}')
    assert short.config.time_limit_s == pytest.approx(10 * 0.04)
    short.close()
    with pytest.raises(ConfigError, match="--task-kwargs .*not JSON"):
        make_task(REACH, task_kwargs="{max_episode_steps: 10}")
    with pytest.raises(ConfigError, match="--task-kwargs must be a JSON object"):
        make_task(REACH, task_kwargs="[10]")
    with pytest.raises(ConfigError, match="were not accepted"):
        make_task(REACH, task_kwargs='{"no_such_option": 1}')
    with pytest.raises(ConfigError, match="--task gym:NoSuchEnv-v0"):
        make_task("gym:NoSuchEnv-v0")
    with pytest.raises(ConfigError, match="needs an environment id"):
        check_task("gym:")
    with pytest.raises(ConfigError, match="no difficulty levels"):
        make_task(REACH, difficulty="hard")
    with pytest.raises(ConfigError, match="takes no --task-kwargs"):
        make_task("reach", task_kwargs='{"x": 1}')
    with pytest.raises(UnknownNameError, match="gym:ENV_ID"):
        check_task("conveyor")


def test_pusht_uses_its_own_renderer_and_absolute_targets():
    env = make_task(PUSHT, task_kwargs='{"max_episode_steps": 20}', image_size=48)
    try:
        obs, _ = env.reset(seed=5)
        again, _ = env.reset(seed=5)
        assert np.array_equal(obs["state"], again["state"]) and np.array_equal(
            obs["images"]["top"], again["images"]["top"]
        )
        assert obs["images"]["top"].shape == (48, 48, 3)
        assert env.config.physics_dt == pytest.approx(0.1)  # one step = one 10 Hz control period
        target = obs["state"][:2] + [30.0, 0.0]
        env.advance(target, 5)
        assert np.linalg.norm(env.state()[:2] - target) < 3.0  # the agent is at its absolute target
        assert env.ee_pos() is not None and env.ee_pos().shape == (2,)
        assert not env.info()["is_success"] and "coverage" in env.info()
    finally:
        env.close()


def test_an_unknown_env_id_is_refused_before_anything_is_built():
    with pytest.raises(ConfigError, match="--task gym:FetchRaech-v4.*FetchReach"):
        check_task("gym:FetchRaech-v4")
