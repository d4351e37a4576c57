"""Teacher rollouts for step distillation: every observation the demo policy answered, in order."""

from __future__ import annotations

import pytest
import torch

from hotloop.compress.rollouts import ROLLOUT_SEED_BASE, rollout_observations
from hotloop.errors import ConfigError
from hotloop.families import get_family


def test_rollouts_record_each_inference_of_the_episode() -> None:
    from hotloop.demos.conveyor import load_demo_policy
    from hotloop.sim.tasks import make_task

    demo = load_demo_policy()
    calls = []
    infer = demo.infer
    demo.infer = lambda obs, timer=None: calls.append(1) or infer(obs)  # type: ignore[method-assign]
    got = rollout_observations(demo, "conveyor-pick", 1, 3, get_family("pi"))
    assert got.episodes == 1 and got.seeds == (ROLLOUT_SEED_BASE + 3, ROLLOUT_SEED_BASE + 3)
    assert got.obs.batch == len(calls) > 3  # one observation per inference, several per episode
    # The first is the episode's start observation, built the way the policy builds it.
    env = make_task("conveyor-pick", difficulty=demo.meta.get("difficulty"))
    raw, _ = env.reset(seed=ROLLOUT_SEED_BASE + 3)
    start = demo.pi.observation(demo.model_inputs(raw))
    env.close()
    assert torch.equal(got.obs.images[0], start.images[0])
    assert torch.equal(got.obs.lang_tokens[0], start.lang_tokens[0])
    # Later ones see the scene move (the belt carries the box, the gantry goes after it).
    assert not torch.equal(got.obs.images[0], got.obs.images[-1])
    entry = got.manifest_entry()
    assert entry["observations"] == got.obs.batch and entry["successes"] in (0, 1)


def test_rollouts_need_an_episode() -> None:
    with pytest.raises(ConfigError, match="--distill-episodes"):
        rollout_observations(object(), "conveyor-pick", 0, 0, get_family("pi"))


def test_recipe_step_distill_learns_from_teacher_rollouts_on_demo_targets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from hotloop.compile.validate import parse_tolerance
    from hotloop.compress.recipe import Inputs, RecipeConfig, parse_recipe, step_distill_observations
    from hotloop.families.pi.targets import random_observation, resolve_config
    from hotloop.targets import TargetOptions

    start = random_observation(resolve_config("pi05:tiny", TargetOptions()), 2, "cpu", 0)

    def config(target: str, episodes: int) -> RecipeConfig:
        return RecipeConfig(target, parse_recipe("step-distill:4"), parse_tolerance("cos:0.9"), tmp_path / "a",
                            distill_episodes=episodes)  # fmt: skip

    inputs = Inputs(start, None, None)
    obs, entry = step_distill_observations(inputs, config("demo:conveyor", 1), get_family("pi"))
    assert entry["source"].startswith("teacher rollouts") and entry["episodes"] == 1
    assert obs.batch == entry["observations"] > 3 and obs is inputs.rollouts.obs
    again, _ = step_distill_observations(inputs, config("demo:conveyor", 1), get_family("pi"))
    assert again is obs  # gathered once per recipe
    for target, episodes in (
        ("demo:conveyor", 0),
        ("pi05:tiny", 5),
    ):  # start frames only; no task to roll out
        obs, entry = step_distill_observations(
            Inputs(start, None, None), config(target, episodes), get_family("pi")
        )
        assert obs is start and entry == {"source": "recipe observations", "observations": 2}


def test_with_recorded_data_a_demo_target_still_distills_on_rollouts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """--data calibrates quantization; step-distill on a demo target learns from the teacher's own
    rollouts (the states it visits), and from the recorded frames only with --distill-episodes 0."""
    from hotloop.compile.validate import parse_tolerance
    from hotloop.compress.recipe import Inputs, RecipeConfig, parse_recipe, step_distill_observations
    from hotloop.families.pi.targets import random_observation, resolve_config
    from hotloop.targets import TargetOptions

    recorded = random_observation(resolve_config("pi05:tiny", TargetOptions()), 3, "cpu", 1)
    calibration = {"sha256": "x", "frames": 3}

    def config(episodes: int) -> RecipeConfig:
        return RecipeConfig("demo:conveyor", parse_recipe("step-distill:4"), parse_tolerance("cos:0.9"),
                            tmp_path / "a", data=tmp_path, distill_episodes=episodes)  # fmt: skip

    obs, entry = step_distill_observations(Inputs(recorded, None, calibration), config(1), get_family("pi"))
    assert entry["source"].startswith("teacher rollouts") and obs is not recorded
    obs, entry = step_distill_observations(Inputs(recorded, None, calibration), config(0), get_family("pi"))
    assert obs is recorded and entry["source"] == "recipe observations"
