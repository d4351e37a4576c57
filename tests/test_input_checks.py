"""Reliability round 3 (issue 24): inputs that used to run unbounded, be ignored, or overwrite results are
refused with one line naming the flag, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import ConfigError

runner = CliRunner()


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    path = tmp_path_factory.mktemp("onnx") / "m.onnx"
    torch.onnx.export(
        torch.nn.Linear(8, 4), (torch.zeros(2, 8),), str(path), input_names=["x"], output_names=["y"],
        dynamic_axes={"x": {0: "n"}}, dynamo=False,
    )  # fmt: skip
    return path


def test_an_onnx_input_that_cannot_fit_is_refused_before_any_work(onnx_model: Path, tmp_path: Path) -> None:
    res = runner.invoke(
        app,
        [
            "compile",
            str(onnx_model),
            "--input",
            "x:100000000000,8",
            "-o",
            str(tmp_path / "a"),
            "--budget-ms",
            "10",
        ],
    )
    assert res.exit_code == 2 and "--input x:100000000000,8" in res.output and "GiB" in res.output
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    "flag,value", [("--steps", "4"), ("--views", "2"), ("--buckets", "4"), ("--mixed-plan", "plan.json")]
)
def test_policy_options_on_an_onnx_target_are_refused(
    onnx_model: Path, tmp_path: Path, flag: str, value: str
) -> None:
    res = runner.invoke(
        app,
        [
            "compile",
            str(onnx_model),
            "--input",
            "x:2,8",
            "-o",
            str(tmp_path / "a"),
            "--budget-ms",
            "10",
            flag,
            value,
        ],
    )
    assert res.exit_code == 2 and flag in res.output and "ONNX" in res.output


def test_compile_threads_zero_is_refused(tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["compile", "toy:mlp", "-o", str(tmp_path / "a"), "--budget-ms", "10", "--threads", "0"]
    )
    assert res.exit_code == 2 and "--threads must be >= 1" in res.output


def test_engine_load_arguments_are_checked() -> None:
    from hotloop.runtime.engine import Engine

    with pytest.raises(ConfigError, match="path is empty"):
        Engine.load("")
    with pytest.raises(ConfigError, match="threads must be an integer >= 1"):
        Engine.load("x", threads=0)
    with pytest.raises(ConfigError, match=r"CPU\(s\) \[99\] are not usable"):
        Engine.load("x", pin=(99,))


def test_an_empty_latency_sweep_is_refused_not_run_as_measured(tmp_path: Path) -> None:
    res = runner.invoke(app, ["eval", "toy:mlp", "--task", "reach", "--sweep-latency", ""])
    assert res.exit_code == 2 and "--sweep-latency" in res.output


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "toy:mlp", "--iters", "1", "--warmup", "0", "--json", "{d}/r.json", "--plot", "{d}/r.json"],
        ["bench", "toy:mlp", "--iters", "1", "--warmup", "0", "--plot", "{d}/r.json"],
        [
            "eval",
            "toy:mlp",
            "--task",
            "reach",
            "--episodes",
            "1",
            "--json",
            "{d}/e.json",
            "--plot",
            "{d}/e.json",
        ],
    ],
)
def test_a_plot_never_overwrites_another_output(tmp_path: Path, args: list[str]) -> None:
    res = runner.invoke(app, [a.format(d=tmp_path) for a in args])
    assert res.exit_code == 2 and "--plot" in res.output
    assert not list(tmp_path.iterdir())
