"""`hotloop bench` / `record` refuse options they cannot honour, with one line and exit 2 (defect 7)."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import ConfigError
from hotloop.targets import TargetOptions, default_targets

runner = CliRunner()


def _error_line(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (
            ["demo:conveyor", "--dtype", "float16"],
            "target 'demo:conveyor' does not take --dtype float16: its dtype is fixed",
        ),
        (
            ["demo:conveyor", "--batch", "4"],
            "target 'demo:conveyor' does not take --batch 4: its batch is fixed",
        ),
        (["pi05:tiny", "--dtype", "float16"], "pi0/pi0.5 produce NaN in float16"),
        (
            ["toy:mlp", "--horizon", "100000000"],
            "--horizon must be an integer from 1 to 1000 (got 100000000)",
        ),
        (["toy:mlp", "--batch", "10000000"], "--batch must be an integer from 1 to 1024"),
        (["toy:mlp", "--steps", "3"], "target 'toy:mlp' does not take --steps"),
        (["toy:mlp", "--seed", "-1"], "--seed must be an integer from 0 to 4294967295 (got -1)"),
        (["toy:mlp", "--pin", "0-100000000000"], "CPU 100000000000 does not exist; this machine has CPUs 0-"),
        (["toy:mlp", "--threads", "5000"], "--threads must be from 1 to 1024"),
        (["pi05:full", "--batch", "1024"], "pi05:full at --batch 1024 needs about"),
    ],
)
def test_bench_refuses_with_one_line(args: list[str], match: str) -> None:
    assert match in _error_line(["bench", *args, "--quiet"])


def test_threads_above_the_cpu_count_warn_but_run(tmp_path) -> None:
    cpus = len(os.sched_getaffinity(0))
    out = tmp_path / "b.json"
    res = runner.invoke(
        app,
        [
            "bench",
            "toy:mlp",
            "--warmup",
            "0",
            "--iters",
            "2",
            "--quiet",
            "--threads",
            str(cpus + 1),
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert f"warning: --threads {cpus + 1} is more than the {cpus} CPUs" in res.output
    assert json.loads(out.read_text())["env"]["threads"] == cpus + 1


def test_bfloat16_bench_runs_the_model_in_bfloat16(tmp_path) -> None:
    """The label comes from the parameters' dtype, and the numbers differ from a float32 run."""
    import torch

    from hotloop.measure.stages import StageTimer

    entry = default_targets().get("toy:mlp")
    bf16 = entry.build_bench("toy:mlp", TargetOptions(dtype="bfloat16", horizon=4))
    fp32 = entry.build_bench("toy:mlp", TargetOptions(horizon=4))
    a, b = bf16.run(StageTimer()), fp32.run(StageTimer())
    assert a.dtype == torch.bfloat16 and b.dtype == torch.float32
    assert bf16.info["dtype"] == "bfloat16"
    diff = (a.float() - b).abs().max().item()
    assert 0 < diff < 0.05 * b.abs().max().item()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--seed", "-1"], "--seed must be an integer from 0 to 4294967295 (got -1)"),
        (["--action-noise", "nan"], "--action-noise is a std in metres, a finite number >= 0 (got nan)"),
        (["--action-noise", "inf"], "a finite number >= 0 (got inf)"),
    ],
)
def test_record_refuses_bad_numbers_before_writing(tmp_path, args: list[str], match: str) -> None:
    out = tmp_path / "ds"
    assert match in _error_line(["record", "--task", "reach", "--episodes", "1", "-o", str(out), *args])
    assert not (out / "meta" / "info.json").exists()


def test_target_options_limits() -> None:
    with pytest.raises(ConfigError, match=r"--views must be an integer from 1 to 16 \(got True\)"):
        TargetOptions(views=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"--seed must be an integer from 0"):
        TargetOptions(seed=2**40)
