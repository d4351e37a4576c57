"""The plugin's actions are LeRobot's own: for ACT, Diffusion Policy and SmolVLA checkpoints made by LeRobot's
code, `select_action` of the plugin's policy of ART (through ART's copy of the processors) against
`select_action` of LeRobot's own policy of the checkpoint, observation by observation, over 2 episodes of
22 steps with `reset()` between them (22: not a multiple of any n_action_steps here, so an episode ends
with actions left in the queue, which reset must drop), at batch 1 and batch 2, within the artifact's
recorded tolerance; Diffusion's and SmolVLA's noise is drawn by each side from the same seed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from lerobot_plugin_helpers import run_json

EPISODES, STEPS, BATCHES = 2, 22, (1, 2)
# (LeRobot's class, actions per chunk predict_action_chunk returns, action dim) of each checkpoint.
FAMILIES = {
    "act": ("ACTPolicy", 10, 2),
    "diffusion": ("DiffusionPolicy", 6, 2),
    "smolvla": ("SmolVLAPolicy", 10, 6),
}
# The cases, all run by one LeRobot process (its imports paid once): each family's own queue semantics, and
# ACT's other one, set on both sides as `--policy.temporal_ensemble_coeff` would be.
CASES = {
    "act": ("act", ()),
    "diffusion": ("diffusion", ()),
    "smolvla": ("smolvla", ()),
    "act-temporal-ensemble": ("act", ("temporal_ensemble_coeff=0.01", "n_action_steps=1")),
}


@pytest.fixture(scope="module")
def reports(checkpoints: dict[str, Path], artifacts: Callable[[str], Path], lerobot_home: Path) -> dict:
    cases = {
        name: {"ckpt": str(checkpoints[family]), "art": str(artifacts(family)), "batches": list(BATCHES), "set": list(settings)}
        for name, (family, settings) in CASES.items()
    }  # fmt: skip
    spec = {"episodes": EPISODES, "steps": STEPS, "cases": cases}
    return run_json(["same_actions.py", json.dumps(spec)], lerobot_home)  # type: ignore[no-any-return]


def check(report: dict, family: str) -> None:
    assert "error" not in report, report.get("error")  # the case crashed (its traceback)
    their_class, chunk, action_dim = FAMILIES[family]
    assert report["classes"] == [their_class, "HotloopPolicy"]
    assert [run["batch"] for run in report["runs"]] == list(BATCHES)
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
def test_plugin_actions_equal_lerobots(family: str, reports: dict) -> None:
    check(reports[family], family)


def test_act_temporal_ensemble_equals_lerobots(reports: dict) -> None:
    """ACT's other queue semantics (`--policy.temporal_ensemble_coeff=0.01 --policy.n_action_steps=1`)."""
    check(reports["act-temporal-ensemble"], "act")


@pytest.mark.slow  # a compress of LeRobot's checkpoint (its DDPM reference row) and a LeRobot process: ~60 s
def test_a_zero_noise_plan_starts_at_zero_in_lerobots_loop(
    checkpoints: dict[str, Path], artifacts: Callable[[str], Path], lerobot_home: Path, tmp_path: Path
) -> None:
    """`hotloop compress CKPT --recipe ddim:4,zero-noise` of LeRobot's Diffusion checkpoint: its manifest says
    the plan starts at x = 0, and the plugin honours it (two torch seeds, the same actions); the compiled
    DDPM plan of the same checkpoint (the control) gives other actions for other seeds."""
    import os
    import subprocess
    import sys

    from lerobot_plugin_helpers import ONE_THREAD, REPO_ROOT

    art = tmp_path / "zero"
    cmd = [sys.executable, "-m", "hotloop", "compress", str(checkpoints["diffusion"]), "--recipe", "ddim:4,zero-noise",
           "-o", str(art), "--backends", "eager", "--threads", "1", "--bench-iters", "2", "--eval-observations",
           "2", "--calibration-frames", "2", "--tolerance", "cos:0.01", "--quiet"]  # fmt: skip
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), **ONE_THREAD},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads((art / "manifest.json").read_text())["policy"]["zero_noise"] is True
    drawn = artifacts("diffusion")
    diffs = run_json(["zero_noise.py", str(art), str(drawn)], lerobot_home)
    assert diffs[str(art)] == 0.0
    assert diffs[str(drawn)] > 1e-3
