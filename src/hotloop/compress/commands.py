"""`hotloop sensitivity`, and the compression options of `hotloop compile`; registered by `add_commands`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from hotloop.cli_errors import user_errors


def compression_plan_config(
    config: Any,
    target: str,
    source: Any,
    calibration: Path | None,
    frames: int,
    mixed_plan: Path | None,
    seed: int,
    log: Callable[[str], None],
) -> Any:
    """`config` with calibration observations (from --calibration) and fp32 layers (from --mixed-plan)."""
    from hotloop.compress.adapters import load_target
    from hotloop.compress.calibration import CalibrationSpec, load_calibration, open_dataset

    fp32_layers = read_mixed_plan(mixed_plan) if mixed_plan is not None else {}
    calib = None
    if calibration is not None:
        spec = CalibrationSpec(count=frames, seed=seed)
        dataset = open_dataset(calibration, "--calibration")
        _, adapter = load_target(target, dataset, seed, model=source.model)
        calib = load_calibration(calibration, adapter, spec, "--calibration")
        log(
            f"calibration: {len(calib)} frames from {len(set(e for e, _ in calib.frames))} episodes "
            f"(sha256 {calib.sha256[:12]})"
        )
    return replace(config, calibration=calib, fp32_layers=fp32_layers)


def read_mixed_plan(path: Path) -> dict[str, list[str]]:
    import json

    from hotloop.errors import ConfigError

    try:
        data = json.loads(Path(path).read_text())
        layers = data["mixed_precision"]["fp32_layers"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(
            f"--mixed-plan {path} is not a `hotloop sensitivity --json` result with a mixed-precision plan; "
            "run `hotloop sensitivity TARGET --data DIR --tolerance cos:0.99 --json FILE` first"
        ) from None
    if not isinstance(layers, dict) or not all(isinstance(v, list) for v in layers.values()):
        raise ConfigError(f"--mixed-plan {path}: fp32_layers must map sub-engines to layer lists")
    return {str(k): [str(n) for n in v] for k, v in layers.items()}


def sensitivity_cmd(
    target: Annotated[str, typer.Argument(help="pi05:tiny, pi05:small, demo:conveyor...")],
    data: Annotated[Path, typer.Option("--data", help="recorded episodes (LeRobot v3 directory)")],
    mode: Annotated[str, typer.Option(help="int8, int8-dynamic, int8-weight or int4-weight")] = "int8",
    granularity: Annotated[str, typer.Option(help="layer or block")] = "layer",
    tolerance: Annotated[
        str, typer.Option(help="final-action agreement the mixed plan must meet, e.g. cos:0.99")
    ] = "cos:0.99",
    samples: Annotated[int, typer.Option(help="calibration observations actions are compared on")] = 16,
    calibration_frames: Annotated[
        int, typer.Option("--calibration-frames", help="frames sampled from --data")
    ] = 256,
    steps: Annotated[int | None, typer.Option(help="flow-matching steps")] = None,
    threads: Annotated[int, typer.Option(help="intra-op threads")] = 1,
    seed: Annotated[int, typer.Option(help="seed for weights, sampling and noise")] = 0,
    top: Annotated[int, typer.Option(help="rows of the printed ranking")] = 15,
    json_path: Annotated[Path | None, typer.Option("--json", help="write ranking + mixed plan here")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="write a ranking PNG here")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress lines")] = False,
) -> None:
    """Quantize one layer (or block) at a time, rank by effect on final actions, and find the mixed
    plan that meets --tolerance by returning layers to fp32 (least measured gain per unit error first)."""
    import torch

    from hotloop.compile.validate import parse_tolerance
    from hotloop.compress.adapters import load_target
    from hotloop.compress.calibration import CalibrationSpec, load_calibration, open_dataset
    from hotloop.compress.sensitivity import (
        SensitivityConfig,
        measure_sensitivity,
        mixed_precision,
        plot_sensitivity,
    )
    from hotloop.io import atomic_write_json

    config = SensitivityConfig(
        mode=mode, granularity=granularity, samples=samples, seed=seed, threads=threads
    )
    tol = parse_tolerance(tolerance)
    spec = CalibrationSpec(count=calibration_frames, seed=seed)
    for flag, path in (("--json", json_path), ("--plot", plot)):
        if path is not None:
            _check_writable(path, flag)
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
        atomic_write_json(json_path, result.to_dict())
        typer.echo(f"wrote {json_path}")
    if plot is not None:
        plot_sensitivity(result, plot)
        typer.echo(f"wrote {plot}")


def _check_writable(path: Path, flag: str) -> None:
    import os

    from hotloop.errors import ConfigError

    parent = Path(path).resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise ConfigError(f"{flag} {path}: folder {parent} does not exist or is not writable")


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
    app.command("sensitivity")(user_errors(sensitivity_cmd))
