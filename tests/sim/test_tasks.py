import numpy as np
import pytest

from hotloop.errors import ConfigError, UnknownNameError
from hotloop.sim.experts import ConveyorExpert
from hotloop.sim.tasks import default_tasks, make_expert, make_task
from hotloop.sim.tasks.conveyor import DIFFICULTY_SPEEDS


def _rollout(env, seed, steps=8):
    obs, _ = env.reset(seed=seed)
    expert = ConveyorExpert(env)
    states, images = [obs["state"]], [obs["images"]["top"]]
    for _ in range(steps):
        obs, *_ = env.step(expert.act(obs))
        states.append(obs["state"])
        images.append(obs["images"]["top"])
    return np.stack(states), np.stack(images)


def _expert_episode(env, expert, seed, options=None):
    """Run the expert for one episode without rendering; True on success."""
    env.reset(seed=seed, options=options)
    expert.reset()
    while not env.timed_out:
        success, failed = env.advance(expert.act(), env.config.ticks_per_control)
        if success or failed:
            return success
    return False


def test_conveyor_is_deterministic_for_a_seed():
    a, b = make_task("conveyor-pick"), make_task("conveyor-pick")
    sa, ia = _rollout(a, seed=7)
    sb, ib = _rollout(b, seed=7)
    np.testing.assert_array_equal(sa, sb)
    np.testing.assert_array_equal(ia, ib)
    sc, _ = _rollout(a, seed=8)
    assert not np.allclose(sa[0], sc[0])  # another seed is another episode


def test_observation_layout_and_belt_speed_range():
    env = make_task("conveyor-pick", difficulty="hard")
    obs, info = env.reset(seed=3)
    assert obs["images"]["top"].shape == (64, 64, 3) and obs["images"]["top"].dtype == np.uint8
    assert obs["state"].shape == (10,)
    lo, hi = DIFFICULTY_SPEEDS["hard"]
    assert lo <= info["belt_speed"] <= hi
    env.advance(env.hold_action(), 100)  # the box rides the belt while the robot holds
    assert env.box_vel()[0] == pytest.approx(info["belt_speed"], rel=0.05)


def test_unknown_names_and_bad_actions():
    with pytest.raises(UnknownNameError, match="conveyor-pick"):
        make_task("conveyer-pick")
    with pytest.raises(ConfigError, match="difficulty"):
        make_task("conveyor-pick", difficulty="brutal")
    env = make_task("reach")
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="shape"):
        env.step(np.zeros(3))
    assert default_tasks().names() == ["conveyor-pick", "reach"]


@pytest.mark.parametrize(
    ("task", "difficulty", "seeds"),
    [
        ("conveyor-pick", "medium", range(6)),
        ("conveyor-pick", "hard", range(3)),
        ("reach", None, range(4)),
    ],
)
def test_expert_solves_the_task(task, difficulty, seeds):
    env = make_task(task, difficulty=difficulty)
    expert = make_expert(task, env)
    for seed in seeds:
        assert _expert_episode(env, expert, seed), f"{task} expert failed on seed {seed}"


def test_reset_options_place_the_gripper_and_the_box():
    env = make_task("conveyor-pick")
    obs, _ = env.reset(seed=2, options={"home": [-0.3, 0.05, 0.2], "box_x": 0.1})
    np.testing.assert_allclose(env.ee_pos(), [-0.3, 0.05, 0.2], atol=1e-6)
    assert env.box_pos()[0] == pytest.approx(0.1)
    default, _ = make_task("conveyor-pick").reset(seed=2)
    # Only the named values change: belt speed and the box's y come from the seed as before.
    assert env.box_pos()[1] == pytest.approx(default["state"][5])
    assert obs["state"][7] == pytest.approx(default["state"][7])
    with pytest.raises(ConfigError, match="box_x"):
        env.reset(seed=2, options={"box_x": 0.5})


def test_expert_recovers_from_recovery_starts():
    from hotloop.datasets.recorder import recovery_start

    env = make_task("conveyor-pick")
    expert = make_expert("conveyor-pick", env)
    passed = 0
    for seed in range(6):
        options = recovery_start(env, np.random.default_rng(seed))
        assert options is not None
        # The box has slipped past the gripper, or the gripper starts beside it: the expert must chase.
        passed += int(_expert_episode(env, expert, seed, options))
    assert passed >= 5
    assert recovery_start(make_task("reach"), np.random.default_rng(0)) is None


def test_a_box_thrown_into_the_air_is_not_a_pick():
    # A gripper that strikes the box can throw it above the lift height; only a box held between both
    # fingers counts (before this check a random policy "succeeded" by batting the box).
    from hotloop.sim.tasks.conveyor import BOX_HALF
    from hotloop.sim.tasks.gantry import BELT_TOP

    env = make_task("conveyor-pick")
    env.reset(seed=0, options={"home": [0.3, 0.1, 0.25]})  # the gripper far from the box
    env.data.qvel[env._box_dof + 2] = 1.6  # straight up: an apex about 13 cm above the belt
    hold, top = env.hold_action(), 0.0
    for _ in range(30):
        success, _ = env.advance(hold, 1)
        top = max(top, env.box_pos()[2] - BOX_HALF - BELT_TOP)
        assert not success
    assert top > env.task_config.lift_height  # it did fly higher than a lift would need
