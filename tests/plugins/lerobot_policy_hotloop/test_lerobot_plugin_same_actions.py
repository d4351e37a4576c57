"""The plugin's actions are LeRobot's own: for ACT, Diffusion Policy and SmolVLA checkpoints made by LeRobot's
code, `select_action` of the plugin's policy of ART (through ART's copy of the processors) against
`select_action` of LeRobot's own policy of the checkpoint, observation by observation, over 2 episodes of
22 steps with `reset()` between them (22: not a multiple of any n_action_steps here, so an episode ends
with actions left in the queue, which reset must drop), at batch 1 and batch 2, within the artifact's
recorded tolerance; Diffusion's and SmolVLA's noise is drawn by each side from the same seed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lerobot_plugin_helpers import run_json

EPISODES, STEPS = 2, 22
# (LeRobot's class, actions per chunk predict_action_chunk returns, action dim) of each checkpoint.
FAMILIES = {
    "act": ("ACTPolicy", 10, 2),
    "diffusion": ("DiffusionPolicy", 6, 2),
    "smolvla": ("SmolVLAPolicy", 10, 6),
}


def same_actions(
    family: str, ckpt: Path, art: Path, home: Path, *settings: str, batches: tuple[int, ...] = (1, 2)
) -> dict:
    args = ["same_actions.py", str(ckpt), str(art), "--episodes", str(EPISODES), "--steps", str(STEPS)]
    args += [f"--batch={b}" for b in batches] + [f"--set={s}" for s in settings]
    return run_json(args, home)  # type: ignore[no-any-return]


def check(report: dict, family: str, batches: tuple[int, ...] = (1, 2)) -> None:
    their_class, chunk, action_dim = FAMILIES[family]
    assert report["classes"] == [their_class, "HotloopPolicy"]
    assert [run["batch"] for run in report["runs"]] == list(batches)
    for run in report["runs"]:
        batch = run["batch"]
        assert len(run["episodes"]) == EPISODES
        for ep in run["episodes"]:
            assert ep["shape"] == [STEPS, batch, action_dim]
            assert ep["violation"] is None, (family, batch, ep["agreement"], report["tolerance"])
            # The actions are not a constant that any plan would match.
            assert ep["action_std"] > 0.05, ep
        assert run["chunk"]["shapes"] == [[batch, chunk, action_dim]] * 2
        assert run["chunk"]["violation"] is None, (family, batch, run["chunk"])
    # Two episodes saw different observations: different actions (reset did not replay the first).
    first = report["runs"][0]["episodes"]
    assert first[0]["first_actions"][0] != first[1]["first_actions"][0]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_plugin_actions_equal_lerobots(
    family: str, checkpoints: dict[str, Path], artifacts: Callable[[str], Path], lerobot_home: Path
) -> None:
    check(same_actions(family, checkpoints[family], artifacts(family), lerobot_home), family)


def test_act_temporal_ensemble_equals_lerobots(
    checkpoints: dict[str, Path], artifacts: Callable[[str], Path], lerobot_home: Path
) -> None:
    """ACT's other queue semantics, set on both sides as `--policy.temporal_ensemble_coeff` would be."""
    report = same_actions(
        "act",
        checkpoints["act"],
        artifacts("act"),
        lerobot_home,
        "temporal_ensemble_coeff=0.01",
        "n_action_steps=1",
    )
    check(report, "act")
