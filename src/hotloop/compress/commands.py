"""`hotloop sensitivity`, and the compression options of `hotloop compile`; registered by `add_commands`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from hotloop.cli_errors import register
from hotloop.cli_options import ActionTolerance, FlowSteps, JsonOut, Quiet, Seed, write_json


def sensitivity_cmd(
    target: Annotated[str, typer.Argument(help="pi05:tiny, pi05:small, demo:conveyor...")],
    data: Annotated[Path, typer.Option("--data", help="recorded episodes (LeRobot v3 directory)")],
    mode: Annotated[str, typer.Option(help="int8, int8-dynamic, int8-weight or int4-weight")] = "int8",
    granularity: Annotated[str, typer.Option(help="layer or block")] = "layer",
    tolerance: ActionTolerance = "cos:0.99",
    samples: Annotated[int, typer.Option(help="calibration observations actions are compared on")] = 16,
    calibration_frames: Annotated[
        int, typer.Option("--calibration-frames", help="frames sampled from --data")
    ] = 256,
    steps: FlowSteps = None,
    threads: Annotated[int, typer.Option(help="intra-op threads")] = 1,
    seed: Seed = 0,
    top: Annotated[int, typer.Option(help="rows of the printed ranking")] = 15,
    json_path: JsonOut = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="write a ranking PNG here")] = None,
    quiet: Quiet = False,
) -> None:
    """Quantize one layer (or block) at a time, rank by effect on final actions, and find the mixed
    plan that meets --tolerance by returning layers to fp32 (least measured gain per unit error first)."""
    import torch

    from hotloop.compile.calibration import CalibrationSpec, load_calibration, open_dataset
    from hotloop.compile.sources import load_target
    from hotloop.compile.validate import parse_tolerance
    from hotloop.compress.sensitivity import (
        SensitivityConfig,
        measure_sensitivity,
        mixed_precision,
        plot_sensitivity,
    )
    from hotloop.io import check_output_file, check_plot_file

    config = SensitivityConfig(
        mode=mode, granularity=granularity, samples=samples, seed=seed, threads=threads
    )
    tol = parse_tolerance(tolerance)
    spec = CalibrationSpec(count=calibration_frames, seed=seed)
    check_output_file(json_path, "--json")
    check_plot_file(plot, "--plot", {"--json": json_path})
    dataset = open_dataset(data)
    model, adapter = load_target(target, dataset, seed=seed, num_steps=steps)
    torch.set_num_threads(threads)
    calib = load_calibration(data, adapter, spec)
    action_dim = int(dataset.features["action"]["shape"][0])
    log = None if quiet else (lambda s: typer.echo(s, err=True))
    result, probe = measure_sensitivity(target, model, calib, config, action_dim, adapter.gripper_dim, log)
    result.mixed = mixed_precision(result, probe, tol, action_dim, adapter.gripper_dim)
    _print(result, top)
    if json_path is not None:
        write_json(json_path, result.to_dict())
    if plot is not None:
        plot_sensitivity(result, plot)
        typer.echo(f"wrote {plot}")


def _print(result: Any, top: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{result.target}: {result.mode} sensitivity ({result.granularity}), most sensitive first"
    )
    for col in ("unit", "action cos", "worst dim err", "grip flips", "gain ms"):
        table.add_column(col)
    for u in result.units[:top]:
        e = u.error
        table.add_row(
            u.key,
            f"{e.cosine:.6f}",
            f"{e.worst_dim_error:.4f}",
            "" if e.gripper_flip_rate is None else f"{e.gripper_flip_rate:.3f}",
            "" if u.gain_ms is None else f"{u.gain_ms:.3f}",
        )
    console = Console(width=max(Console().width, 120))
    console.print(table)
    m = result.mixed
    console.print(
        f"all quantized: action cos {result.all_quantized.cosine:.6f}; mixed plan ({m['tolerance']}): "
        f"{len(m['fp32_units'])} of {len(result.units)} units returned to fp32 for accuracy, "
        f"{len(m['fp32_no_gain_units'])} kept fp32 for no measured gain; action cos {m['error']['cosine']:.6f}, "
        f"{'met' if m['met'] else 'NOT met'}"
    )


def add_commands(app: typer.Typer) -> None:
    register(app, {"sensitivity": sensitivity_cmd})
