"""`hotloop verify CKPT [--reference DIR] [--artifact ART]`, registered on the app by `add_commands`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from hotloop.cli_errors import register
from hotloop.cli_options import JsonOut, write_json

EXIT_OUTSIDE = 1


def verify_cmd(
    checkpoint: Annotated[
        Path, typer.Argument(help="a LeRobot checkpoint folder (config.json + model.safetensors)")
    ],
    reference: Annotated[
        Path | None,
        typer.Option(
            help="the reference run's folder (docs/verify.md); default: the checkpoint folder itself"
        ),
    ] = None,
    artifact: Annotated[
        Path | None,
        typer.Option(
            help="also check this compiled / compressed artifact of CKPT (refused when made from other weights)"
        ),
    ] = None,
    artifact_tolerance: Annotated[
        str,
        typer.Option(
            help="--artifact's final-action agreement, e.g. cos:0.995[,maxabs:0.05] (the one the artifact "
            "records is shown, not trusted)"
        ),
    ] = "cos:0.995",
    tolerance: Annotated[
        float, typer.Option(help="max abs error allowed for the fp32 outputs and stages")
    ] = 1e-5,
    stage_tolerance: Annotated[
        float | None, typer.Option(help="max abs error of the intermediates (default: 3 x --tolerance)")
    ] = None,
    json_path: JsonOut = None,
) -> None:
    """Run a reference run through hotloop's implementation of CKPT: max abs / relative error and cosine per
    output (raw and model space) and per stage; exit 0 within tolerance, 1 outside it."""
    import importlib

    from hotloop.errors import ConfigError
    from hotloop.families import checkpoint_targets, is_checkpoint_dir
    from hotloop.families.reference import ReferenceRun, unread_arrays
    from hotloop.io import check_output_file
    from hotloop.output_dir import check_output_file_not_input

    if not is_checkpoint_dir(checkpoint):
        missing = [f for f in ("config.json", "model.safetensors") if not (checkpoint / f).is_file()]
        raise ConfigError(
            f"CKPT {checkpoint}: not a LeRobot checkpoint folder (missing {', '.join(missing)}); give the "
            "folder LeRobot's save_pretrained wrote (.../checkpoints/last/pretrained_model)"
        )
    if not tolerance > 0 or (stage_tolerance is not None and not stage_tolerance > 0):
        raise ConfigError(
            f"--tolerance and --stage-tolerance must be > 0 (got {tolerance}, {stage_tolerance})"
        )
    if artifact is not None:
        from hotloop.compile.validate import parse_tolerance

        try:
            parse_tolerance(artifact_tolerance)
        except ConfigError as e:
            raise ConfigError(str(e).replace("--tolerance", "--artifact-tolerance", 1)) from None
    check_output_file(json_path, "--json")
    check_output_file_not_input(
        json_path, "--json", {"CKPT": checkpoint, "--reference": reference, "--artifact": artifact}
    )
    run = ReferenceRun(reference if reference is not None else checkpoint)
    module = importlib.import_module(checkpoint_targets(checkpoint))
    report = module.verify(checkpoint, run, tolerance, stage_tolerance or 3 * tolerance)
    result: dict[str, Any] = report.to_dict()
    result["notes"] = [*result.get("notes", []), *unread_arrays(run, report)]
    if artifact is not None:
        from hotloop.verify.artifact import verify_artifact

        result["artifact"] = verify_artifact(artifact, run, artifact_tolerance, checkpoint)
    _print(result)
    if json_path is not None:
        write_json(json_path, result)
    failed = not report.ok or (artifact is not None and result["artifact"]["violation"] is not None)
    if failed:
        raise typer.Exit(EXIT_OUTSIDE)


def _print(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"verify {result['checkpoint']} ({result['family']}) against {result['reference']}")
    for col in ("output", "space", "shape", "max abs", "max rel", "cosine", "tolerance", ""):
        table.add_column(col, overflow="fold")
    for c in result["comparisons"]:
        table.add_row(
            c["name"],
            c["space"],
            "x".join(str(d) for d in c["shape"]),
            f"{c['max_abs']:.3g}",
            f"{c['max_rel']:.3g}",
            f"{c['cosine']:.8f}",
            f"{c['tolerance']:.1g}",
            "ok" if c["ok"] else "OUTSIDE",
        )
    console = Console(width=max(Console().width, 130))
    console.print(table)
    for c in result["comparisons"]:
        if c.get("judged_as"):
            console.print(f"note: {c['name']} is judged as {c['judged_as']} = {c['judged_abs']:.3g}")
    for note in result.get("notes", []):
        console.print(f"note: {note}")
    verdict = "within tolerance" if result["ok"] else "OUTSIDE tolerance"
    console.print(f"{len(result['comparisons'])} comparisons, {verdict}")
    art = result.get("artifact")
    if art is not None:
        w = art["worst"]
        console.print(
            f"artifact {art['artifact']}: worst of {art['samples']} samples cos {w['cosine']:.6f}, max abs "
            f"{w['max_abs']:.3g} against --artifact-tolerance {art['tolerance']} (it records "
            f"{art.get('artifact_tolerance')}): "
            + ("within" if art["violation"] is None else f"OUTSIDE ({art['violation']})")
        )


def add_commands(app: typer.Typer) -> None:
    register(app, {"verify": verify_cmd})
