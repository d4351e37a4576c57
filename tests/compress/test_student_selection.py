"""`--onestep-candidates N`: several one-step students, the one closest to the teacher in closed loop kept
(hotloop.compress.student_selection): the rule, the validation episodes being eval's own, the recipe end to
end on demo:conveyor, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.compress.student_selection import (
    VALIDATION_SEED_BASE,
    Verdict,
    best_candidate,
    closed_loop_successes,
)

runner = CliRunner()


def test_the_smallest_worst_gap_to_the_teacher_is_kept() -> None:
    teacher = {"sync@fixed:0": 90, "async@fixed:200": 80}
    a = Verdict(0, {"sync@fixed:0": 95, "async@fixed:200": 70})  # worst gap -10
    b = Verdict(1, {"sync@fixed:0": 88, "async@fixed:200": 79})  # worst gap -2
    c = Verdict(2, {"sync@fixed:0": 86, "async@fixed:200": 84})  # worst gap -4, the most wins
    assert best_candidate([a, b, c], teacher) == 1
    assert b.gaps(teacher) == {"sync@fixed:0": -2, "async@fixed:200": -1}
    d = Verdict(3, {"sync@fixed:0": 90, "async@fixed:200": 78})  # worst gap -2 as b's, one win more
    assert best_candidate([a, b, c, d], teacher) == 3
    assert best_candidate([b, b], teacher) == 0  # a tie in everything: the first


def test_validation_successes_are_evals_own_episodes() -> None:
    """The selection's episodes are `hotloop eval`'s on the validation seeds: the same successes, seed
    by seed; other weights (the action head zeroed) play otherwise."""
    from hotloop.demos.conveyor import build_demo
    from hotloop.targets import TargetOptions

    cli = runner.invoke(
        app,
        ["eval", "demo:conveyor", "--task", "conveyor-pick", "--strategy", "sync", "--latency", "fixed:0",
         "--seed", str(VALIDATION_SEED_BASE), "--episodes", "2", "--steps", "2", "--workers", "1", "--quiet"],
    )  # fmt: skip
    assert cli.exit_code == 0, cli.output
    own = closed_loop_successes("demo:conveyor", "conveyor-pick", 2, 2, None, ("sync", "fixed:0"))
    assert f"{own}/2" in cli.output.replace(" ", ""), cli.output
    weights = build_demo("demo:conveyor", TargetOptions()).pi.model.state_dict()
    weights = {k: torch.zeros_like(v) if k.startswith("action_out_proj") else v for k, v in weights.items()}
    assert own == 2
    assert closed_loop_successes("demo:conveyor", "conveyor-pick", 2, 2, weights, ("sync", "fixed:0")) == 0


@pytest.mark.slow  # two students trained and played in closed loop: ~25 s
def test_compress_keeps_the_candidate_that_played_best(
    recorded: Path, compress_rows, fast_flags: list[str]
) -> None:
    """Two students (seeds 3 and 4) played on the validation episodes under both executions; the
    artifact holds the one the rule picks, and replaying its weights gives the successes recorded."""
    from safetensors.torch import load_file

    from hotloop.compile.artifact import sha256_state_dict

    out, rows = compress_rows(
        "demo:conveyor", "onestep", "--data", str(recorded), "--distill-steps", "4", "--distill-batch", "4",
        "--distill-episodes", "1", "--onestep-rounds", "1", "--onestep-candidates", "2",
        "--onestep-select-episodes", "2", "--seed", "3", "--tolerance", "cos:0.01", *fast_flags,
    )  # fmt: skip
    details = rows[1]["details"]
    sel = details["selection"]
    assert [c["seed"] for c in sel["candidates"]] == [3, 4] and sel["episodes"] == 2
    assert set(sel["teacher"]) == {"async@fixed:200", "sync@fixed:0"}
    verdicts = [Verdict(c["seed"], c["wins"]) for c in sel["candidates"]]
    assert sel["chosen"] == best_candidate(verdicts, sel["teacher"])
    assert details["config"]["seed"] == sel["chosen_seed"]  # the kept training run's own report
    manifest = json.loads((out / "manifest.json").read_text())
    weights = load_file(str(out / manifest["weights"]))
    shas = [c["weights_sha256"] for c in sel["candidates"]]
    assert shas[0] != shas[1] and sha256_state_dict(weights) == shas[sel["chosen"]]
    for label, wins in sel["candidates"][sel["chosen"]]["wins"].items():
        strategy, _, latency = label.partition("@")
        replay = closed_loop_successes("demo:conveyor", "conveyor-pick", 2, 1, weights, (strategy, latency))
        assert replay == wins, label


def test_a_crashed_validation_episode_is_an_error_not_a_failure() -> None:
    """A candidate whose episodes raise (here a model with none of the policy's calls) stops the choice with
    the error and the seed, instead of counting as a student that failed its task."""
    from hotloop.errors import HotloopError

    with pytest.raises(HotloopError, match=f"episode seed {VALIDATION_SEED_BASE} raised"):
        closed_loop_successes(
            "demo:conveyor", "conveyor-pick", 2, 1, torch.nn.Linear(1, 1), ("sync", "fixed:0")
        )


@pytest.mark.parametrize(
    ("target", "recipe", "extra", "message"),
    [
        ("pi05:tiny", "onestep", ["--onestep-candidates", "0"], "--onestep-candidates must be >= 1 (got 0)"),
        ("pi05:tiny", "onestep", ["--onestep-select-episodes", "0"], "--onestep-select-episodes must be >= 1"),
        ("pi05:tiny", "onestep", ["--onestep-candidates", "2"], "students are chosen by playing a demo task"),
        ("demo:conveyor", "steps:2", ["--onestep-candidates", "2"], "the recipe has no onestep step"),
        ("demo:conveyor", "prune:0.5,onestep", ["--onestep-candidates", "2"], "a pruned student's shapes"),
        ("demo:conveyor", "onestep", ["--onestep-candidates", "2", "--distill-episodes", "0"],
         "needs the closed-loop rounds: give --distill-episodes >= 1"),
    ],
)  # fmt: skip
def test_bad_candidate_options_exit_2_before_any_work(
    recorded: Path,
    compress_refuses,
    fast_flags: list[str],
    target: str,
    recipe: str,
    extra: list[str],
    message: str,
) -> None:
    compress_refuses(target, recipe, message, "--data", str(recorded), *extra, *fast_flags)
