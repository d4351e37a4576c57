"""`hotloop perception-curve`, registered on the app by `add_commands`. Module-level imports stay light
(typer only); torch, ONNX Runtime and MuJoCo load inside the command."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import typer

from hotloop.cli_errors import register
from hotloop.cli_options import JsonOut, Latency, Overwrite, Warmup, Workers, write_json


def perception_curve_cmd(
    detector: Annotated[
        str,
        typer.Argument(
            help="demo:detector (the shipped learned box detector), a folder `hotloop train-demo --variant "
            "detector` wrote, or an ONNX detector file (with --input and --images)"
        ),
    ],
    resolutions: Annotated[str, typer.Option(help="input sizes (px), comma-separated")] = "32,48,64,96,128",
    data: Annotated[
        Path | None,
        typer.Option(
            help="held-out labelled frames: a frames .npz (train-demo --variant detector writes held_out.npz) "
            "or a dataset `hotloop record --task conveyor-pick` wrote; default: render --held-out episodes"
        ),
    ] = None,
    held_out: Annotated[
        int, typer.Option(help="episodes rendered as held-out frames when --data is not given")
    ] = 20,
    budget_ms: Annotated[
        float | None, typer.Option(help="latency budget (ms, p99 of the compiled path): pick within it")
    ] = None,
    episodes: Annotated[
        int | None, typer.Option(help="closed-loop episodes per resolution (--policy behind the chain)")
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            help="closed loop: the conveyor-pick policy behind the chain (a target, artifact or checkpoint; "
            "demo:conveyor-chain is trained for an estimated box state)"
        ),
    ] = "demo:conveyor",
    latency: Latency = "measured",
    metric: Annotated[
        str, typer.Option(help="accuracy to pick by: iou or centre-mm (learned detector)")
    ] = "iou",
    iters: Annotated[int, typer.Option(help="timed calls per resolution and path")] = 200,
    warmup: Warmup = 20,
    onnx_input: Annotated[
        str | None, typer.Option("--input", help="ONNX detector: its image input NAME:1,C,H,W (native size)")
    ] = None,
    images: Annotated[Path | None, typer.Option(help="ONNX detector: a folder of images")] = None,
    threshold: Annotated[
        float, typer.Option(help="ONNX map outputs: the threshold of the masks compared (0 for logits)")
    ] = 0.5,
    int8: Annotated[
        Path | None,
        typer.Option(
            help="learned detector: also quantize to int8 per resolution, writing each plan (model.onnx, "
            "manifest.json) under this folder, gated by --tolerance"
        ),
    ] = None,
    tolerance: Annotated[
        str,
        typer.Option(help="int8 gate against float32: iou:T (mean IoU >= T) or centre-mm:X (p95 <= X mm)"),
    ] = "iou:0.85",
    json_path: JsonOut = None,
    plot: Annotated[Path | None, typer.Option(help="write the accuracy-latency plot (PNG) here")] = None,
    workers: Workers = 2,
    overwrite: Overwrite = False,
) -> None:
    """The resolution-accuracy-latency curve of a detector: accuracy, p50/p99 eager and compiled per input
    resolution (and closed-loop success with --episodes); picks the most accurate point within --budget-ms."""
    from hotloop.errors import ConfigError
    from hotloop.io import check_output_file
    from hotloop.output_dir import check_not_input, claim_output_dir
    from hotloop.perception.curve import METRICS, parse_resolutions

    sizes = parse_resolutions(resolutions)
    if metric not in METRICS:
        raise ConfigError(f"--metric {metric!r}: use {' or '.join(METRICS)}")
    if budget_ms is not None and not budget_ms > 0:
        raise ConfigError(f"--budget-ms must be > 0 (got {budget_ms})")
    if iters < 1 or warmup < 0:
        raise ConfigError(f"--iters must be >= 1 and --warmup >= 0 (got {iters}, {warmup})")
    if episodes is not None and episodes < 1:
        raise ConfigError(f"--episodes must be >= 1 (got {episodes})")
    if held_out < 1:
        raise ConfigError(f"--held-out must be >= 1 (got {held_out})")
    if episodes is not None:
        from hotloop.errors import UnknownNameError
        from hotloop.targets import find_target

        try:
            find_target(policy)
        except (ConfigError, UnknownNameError) as e:
            raise ConfigError(f"--policy {policy}: {e.args[0] if e.args else e}") from None
    inputs = {"DETECTOR": detector, "--data": data, "--images": images, "--policy": policy}
    for path, flag in ((json_path, "--json"), (plot, "--plot")):
        if path is not None:
            check_output_file(path, flag)
            check_not_input(path, flag, inputs)
    claimed = None
    if int8 is not None:
        from hotloop.perception.quantize import parse_tolerance

        claimed = claim_output_dir(int8, "--int8", "perception-curve", overwrite=overwrite, inputs=inputs)
        parse_tolerance(tolerance)
    if detector.endswith(".onnx"):
        if onnx_input is None or images is None:
            raise ConfigError("an ONNX detector needs --input NAME:1,C,H,W and --images DIR")
        if metric != "iou" or episodes is not None or data is not None or int8 is not None:
            raise ConfigError(
                "an ONNX detector is scored by agreement with its own native output: drop --metric, "
                "--episodes, --data and --int8"
            )
        from hotloop.perception.curve_runs import onnx_curve

        result = onnx_curve(
            Path(detector), onnx_input, images, sizes, threshold, budget_ms, iters, warmup, plot
        )
    else:
        if onnx_input is not None or images is not None:
            raise ConfigError("--input and --images are for an ONNX detector (model.onnx); drop them")
        from hotloop.perception.curve_runs import learned_curve

        with claimed.writing() if claimed is not None else contextlib.nullcontext():
            result = learned_curve(
                detector, sizes, data, held_out, metric, budget_ms, iters, warmup, episodes, latency, workers,
                plot, int8, tolerance, policy,
            )  # fmt: skip
    _finish(result, json_path, plot)


def _finish(result: dict[str, Any], json_path: Path | None, plot: Path | None) -> None:
    chosen = result["chosen"]
    if chosen is None:
        typer.echo(f"no resolution fits the budget of {result['budget_ms']:g} ms (p99); none chosen")
    else:
        typer.echo(f"chosen: {chosen['resolution']} px ({result['metric']} {chosen['accuracy']:.3f})")
    if json_path is not None:
        write_json(json_path, result)
    if plot is not None:
        typer.echo(f"wrote {plot}")


def add_commands(app: typer.Typer) -> None:
    register(app, {"perception-curve": perception_curve_cmd})
