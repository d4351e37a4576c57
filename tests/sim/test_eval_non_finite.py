"""`hotloop eval` and `hotloop bench` stop on a policy's non-finite output in one line (exit 2) instead of
holding the robot for the rest of every episode (eval crawled) or timing a broken model (bench exited 0)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.closedloop.pool import run_episodes
from hotloop.closedloop.workers import EpisodeJob
from hotloop.errors import ConfigError, NonFiniteOutputError
from hotloop.measure.bench import BenchConfig, run_bench
from hotloop.measure.case import BenchCase

ASSETS = Path(__file__).resolve().parents[2] / "src" / "hotloop" / "assets"


def test_eval_stops_at_the_first_non_finite_chunk_naming_seed_and_time():
    job = EpisodeJob(
        target="demo:conveyor",
        task="reach",
        difficulty=None,
        strategy="sync",
        latency="fixed:0",
        policy_factory="fakes:nan_after_first_chunk",
    )
    t0 = time.perf_counter()
    with pytest.raises(
        NonFiniteOutputError, match=r"fakes:nan_after_first_chunk, episode seed 3: the policy"
    ):
        run_episodes(job, [3, 4], workers=0)
    assert time.perf_counter() - t0 < 30  # stopped at once, not one inference per control period till the end


def test_eval_in_a_worker_process_stops_with_the_same_line():
    job = EpisodeJob(
        target="demo:conveyor",
        task="reach",
        difficulty=None,
        strategy="sync",
        latency="fixed:0",
        policy_factory="fakes:nan_after_first_chunk",
    )
    with pytest.raises(ConfigError, match=r"episode seed 0: the policy answered non-finite actions"):
        run_episodes(job, [0], workers=1)


def test_bench_stops_on_the_first_output_before_timing_it():
    calls: list[int] = []

    def run(timer):
        calls.append(1)
        return {"actions": np.full((2, 3), np.nan)}

    with pytest.raises(NonFiniteOutputError, match=r"nan-case answered non-finite values .*actions: 6 of 6"):
        run_bench(BenchCase("nan-case", run), BenchConfig(warmup=0, iterations=50, progress=False))
    assert len(calls) == 1


@pytest.fixture(scope="module")
def overflowing_act(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped ACT checkpoint with a finite action head of 3e38s: every output overflows to inf."""
    folder = Path(shutil.copytree(ASSETS / "demo_conveyor_act", tmp_path_factory.mktemp("act") / "act"))
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.action_head.weight"].fill_(3e38)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "{ck}", "--task", "conveyor-pick", "--episodes", "2", "--workers", "0"],
        ["bench", "{ck}", "--iters", "5", "--warmup", "0", "--quiet"],
    ],
    ids=["eval", "bench"],
)
def test_a_checkpoint_whose_output_overflows_is_one_line_exit_2(overflowing_act: Path, args: list[str]):
    res = CliRunner().invoke(app, [a.format(ck=overflowing_act) for a in args])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "non-finite" in lines[0], res.output
