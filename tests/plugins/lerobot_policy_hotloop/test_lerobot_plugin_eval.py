"""LeRobot's own loop end to end: `lerobot-eval --policy.path=ART --env.type=pusht` (LeRobot's `lerobot-eval`
main, gym-pusht's real environment) on hotloop's artifact of an ACT checkpoint with PushT's features and,
run the same way, on the checkpoint: both write eval_info.json and give the same actions step by step
(benchmarks/lerobot_eval_ab.py runs the pair once for the module, and times both); and what an artifact that
cannot run here does to that command (the real console script)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from lerobot_plugin_helpers import LEROBOT_EVAL, PUSHT, REPO_ROOT, run_json, run_lerobot

# Whole LeRobot CLIs (the pyproject `slow` marker's own example): ~130 CPU-s for the module, CI's
# `make test-slow`. `make test` keeps the plugin's discovery and loading (test_lerobot_plugin_package.py)
# and its actions against LeRobot's (test_lerobot_plugin_same_actions.py).
pytestmark = pytest.mark.slow

PREFIX = "lerobot_policy_hotloop: "


def refusal_line(stderr: str) -> str:
    """The plugin's one line (LeRobot's progress bar may still redraw itself after it)."""
    lines = [line for line in stderr.splitlines() if PREFIX in line]
    assert len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith(PREFIX), lines[0]
    return lines[0]


def lerobot_eval(art: Path, out: Path, home: Path, **changes: str) -> subprocess.CompletedProcess[str]:
    """The real `lerobot-eval` console script on PushT (`changes`: flags replaced, e.g. env.observation_height)."""
    flags = dict(arg[2:].split("=", 1) for arg in PUSHT) | {
        k.replace("__", "."): v for k, v in changes.items()
    }
    args = [f"--policy.path={art}", *(f"--{k}={v}" for k, v in flags.items()), f"--output_dir={out}"]
    return run_lerobot(args, home, program=LEROBOT_EVAL)


@pytest.fixture(scope="module")
def ab(
    checkpoints: dict[str, Path],
    artifacts: Callable[[str], Path],
    lerobot_home: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """benchmarks/lerobot_eval_ab.py, once: `lerobot-eval`'s main (the console script's) on the checkpoint
    and on the artifact, each in its own process with one probe that times `select_action` and records its
    actions; its folder (source-0/ and artifact-0/: each run's own output, ab.json)."""
    out = tmp_path_factory.mktemp("lerobot-eval") / "ab"
    script = REPO_ROOT / "benchmarks" / "lerobot_eval_ab.py"
    args = [str(script), "--source", str(checkpoints["act"]), "--artifact", str(artifacts("act")),
            "--out", str(out), "--", *PUSHT]  # fmt: skip
    done = run_lerobot(args, lerobot_home)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_lerobot_eval_runs_the_artifact(ab: Path) -> None:
    for side in ("artifact-0", "source-0"):
        info = json.loads((ab / side / "eval_info.json").read_text())
        assert info["overall"]["n_episodes"] == 2
        assert len(info["per_task"][0]["metrics"]["sum_rewards"]) == 2


def test_source_and_artifact_give_the_same_actions_step_by_step(
    ab: Path, artifacts: Callable[[str], Path]
) -> None:
    """The benchmark's own check: both sides through LeRobot's `lerobot-eval` main, one seed."""
    result = json.loads((ab / "ab.json").read_text())
    assert result["source"]["steps"] == result["artifact"]["steps"] == 20  # 20 steps of a batch of 2 episodes
    tolerance = json.loads((artifacts("act") / "manifest.json").read_text())["tolerance"]
    max_abs = float(tolerance.split("maxabs:")[1])  # normalised by the actions' std (~0.2 here): strict
    assert result["actions_max_abs_diff"] <= max_abs * 0.2, result["per_step_max_abs_diff"]
    assert result["ratio_mean"] > 0 and result["artifact"]["select_action_ms"]["p99"] > 0


def test_refusals_at_make_policy_and_at_the_first_step(
    artifacts: Callable[[str], Path], lerobot_home: Path, tmp_path: Path
) -> None:
    """Every scenario of lerobot_side/refusals.py in one LeRobot process. The console script's own stop (one
    line, no traceback, nothing written) is checked below: on a tampered artifact in every run, on the
    observation mismatch in `make test-slow`."""
    out = run_json(["refusals.py", str(artifacts("act")), str(tmp_path)], lerobot_home)
    assert out["intact"] == {"loaded": "HotloopPolicy", "source": None, "fallback_messages": []}
    expect = {
        "tampered_stats": "normalizer_processor.safetensors: sha256 does not match the manifest",
        "edited_config": "config.json: sha256 does not match the manifest",
        "other_version": "compiled by hotloop 0.0.1",
        "cpu_lacks_feature": "needs CPU feature hotloop_test_absent_feature",
        "env_action_differs": "the environment's action has shape (14,)",
        "fallback_tampered": "normalizer_processor.safetensors: sha256 does not match the manifest",
        "env_observation_differs": "has no 'observation.image'",
    }
    for name, words in expect.items():
        assert "refused" in out[name], (name, out[name])
        assert words in out[name]["refused"], (name, out[name]["refused"])
        assert out[name]["exit_message"] == PREFIX + out[name]["refused"]
        assert "\n" not in out[name]["refused"]
    assert "observation.environment_state" in out["env_observation_differs"]["refused"]  # what the env gives
    fallback = out["fallback_cpu"]
    assert (fallback["loaded"], fallback["source"]) == ("HotloopPolicy", "ACTPolicy"), fallback
    assert (
        len(fallback["fallback_messages"]) == 1
        and "hotloop_test_absent_feature" in fallback["fallback_messages"][0]
    )


def test_lerobot_eval_stops_with_one_line(
    artifacts: Callable[[str], Path], lerobot_home: Path, tmp_path: Path
) -> None:
    """A tampered artifact: the command exits non-zero with the plugin's one line last, no traceback, and
    writes nothing (LeRobot makes its output folder only once the rollouts start)."""
    art = tmp_path / "art"
    shutil.copytree(artifacts("act"), art)
    state = next(art.glob("policy_postprocessor_step_*_unnormalizer_processor.safetensors"))
    state.write_bytes(state.read_bytes()[:-8])
    out = tmp_path / "eval"
    done = lerobot_eval(art, out, lerobot_home)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    last = refusal_line(done.stderr)
    assert state.name in last and "sha256" in last, last
    assert not out.exists()


# The same refusal as refusals.py's env_observation_differs, through the whole console script (~10 CPU-s of
# LeRobot's imports and argument parsing).
def test_lerobot_eval_names_an_observation_the_plan_was_not_compiled_for(
    artifacts: Callable[[str], Path], lerobot_home: Path, tmp_path: Path
) -> None:
    """PushT observed through its state only (no camera) against a plan that sees its view: one line naming
    the missing key; no episode is evaluated, so neither eval_info.json nor a video is written (LeRobot has
    made its empty videos folder by then)."""
    out = tmp_path / "eval"
    done = lerobot_eval(artifacts("act"), out, lerobot_home, env__obs_type="environment_state_agent_pos")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    last = refusal_line(done.stderr)
    assert "has no 'observation.image'" in last, last
    assert "observation.environment_state" in last, last  # what the environment does give
    written = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert written == []
