"""`hotloop compress TARGET --recipe ...`, registered on the app by `add_commands` (one hook in cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hotloop import cli_options as opts
from hotloop.cli_errors import register


def compress_cmd(
    target: Annotated[str, typer.Argument(help="pi05:tiny, pi05:small, demo:conveyor...")],
    recipe: Annotated[
        str, typer.Option(help="steps in order, e.g. prune:0.25,distill,steps:4,quantize,compile")
    ],
    out: opts.ArtifactOut,
    data: Annotated[
        Path | None, typer.Option(help="recorded episodes (hotloop record) to calibrate and distill on")
    ] = None,
    tolerance: Annotated[
        str | None,
        typer.Option(
            help="the gate against the fp32 reference: a policy's final-action agreement (default cos:0.99); "
            "a detector's iou:T or centre-mm:X against its float32 boxes (default iou:0.85)"
        ),
    ] = None,
    resolution: Annotated[
        int | None,
        typer.Option(help="detector: the input size (px) of its int8 plan (default 64, the camera's own)"),
    ] = None,
    episodes: Annotated[
        int, typer.Option(help="closed-loop episodes per step (targets with a task; 0 skips)")
    ] = 0,
    eval_latency: opts.Latency = "fixed:0",
    eval_strategy: Annotated[
        str,
        typer.Option(
            help="how the closed-loop runs execute the chunks: sync (replan every period), chunk (an ACT or "
            "Diffusion checkpoint's n_action_steps per inference), async..."
        ),
    ] = "sync",
    calibration_frames: Annotated[int, typer.Option(help="observations to calibrate / distill on")] = 32,
    eval_observations: Annotated[int, typer.Option(help="observations the action error is judged on")] = 8,
    distill_steps: Annotated[int, typer.Option(help="optimizer steps per distillation")] = 100,
    distill_batch: Annotated[int, typer.Option(help="observations per distillation step")] = 8,
    distill_episodes: Annotated[
        int,
        typer.Option(
            help="step-distill on a demo target: teacher episodes to learn from, with or without --data "
            "(0: the --data frames, else start frames)"
        ),
    ] = 20,
    buckets: opts.PromptBuckets = None,
    distill_lr: Annotated[float, typer.Option(help="Adam learning rate of distill and step-distill")] = 3e-4,
    onestep_lr: Annotated[
        float | None,
        typer.Option(
            help="Adam learning rate of onestep (default: --distill-lr); a pruned model's recovery "
            "distill wants a small rate, the student's expert a larger one"
        ),
    ] = None,
    onestep_average: Annotated[
        float,
        typer.Option(
            help="onestep: ship the moving average of the student's weights with this decay, e.g. 0.99 "
            "(0: the last step's weights)"
        ),
    ] = 0.0,
    distill_target: Annotated[
        str,
        typer.Option(
            help="distill: pull the student toward the teacher's chunks (teacher) or the recorded actions "
            "of --data (data; only when the teacher was trained on them)"
        ),
    ] = "teacher",
    first_action_weight: Annotated[
        float,
        typer.Option(
            help="step-distill and onestep (flow families): extra loss weight on the chunk's first action "
            "(the one sync executes)"
        ),
    ] = 0.0,
    onestep_rounds: Annotated[
        int,
        typer.Option(
            help="onestep on a pi demo: training rounds; each after the first adds the student's own "
            "closed-loop observations (--distill-episodes a round), labelled by the teacher"
        ),
    ] = 3,
    onestep_rounds_under: Annotated[
        str,
        typer.Option(
            help="onestep on a pi or SmolVLA demo: how the student's rounds execute, STRATEGY@LATENCY in turn "
            "(the conditions it will be judged at); on a Diffusion demo, the first is how its teacher's own "
            "episodes are played (e.g. chunk@fixed:0)"
        ),
    ] = "async@fixed:200,sync@fixed:0",
    onestep_candidates: Annotated[
        int,
        typer.Option(
            help="onestep on a demo (pi, SmolVLA, Diffusion): students to train (seeds --seed, --seed + 1, ...); the one "
            "closest to the teacher on validation episodes under every --onestep-rounds-under execution is kept"
        ),
    ] = 1,
    onestep_select_episodes: Annotated[
        int,
        typer.Option(
            help="--onestep-candidates: validation episodes per execution (seeds 600000.., apart from "
            "training rollouts and eval's seeds)"
        ),
    ] = 200,
    bench_iters: Annotated[
        int | None,
        typer.Option(
            "--bench-iters",
            help="timed inferences per step (default 20; a detector's sub-millisecond calls: 1000 a path)",
        ),
    ] = None,
    backends: Annotated[
        str, typer.Option(help="backends the compile step may choose from")
    ] = "eager,onnxruntime,openvino",
    mixed_plan: opts.MixedPlan = None,
    threads: opts.Threads = None,
    json_path: opts.JsonOut = None,
    plot: Annotated[Path | None, typer.Option(help="write the per-step plot (PNG) here")] = None,
    seed: opts.Seed = 0,
    quiet: opts.Quiet = False,
    overwrite: opts.Overwrite = False,
    plan_memory_gb: opts.PlanMemory = None,
) -> None:
    """Compress TARGET step by step (judged after each step); write the last passing artifact. A learned
    box detector (demo:detector or its folder) takes `--recipe quantize`: an int8 plan gated in its own terms."""
    flags = dict(locals())  # RecipeConfig's fields, by name
    from hotloop.perception.compress_detector import is_detector

    if is_detector(target):
        _compress_detector(
            target, recipe, out, data, tolerance, resolution, episodes, eval_latency, calibration_frames,
            bench_iters, json_path, plot, seed, quiet, overwrite,
        )  # fmt: skip
        return
    if resolution is not None:
        from hotloop.errors import ConfigError

        raise ConfigError(
            f"--resolution is for a detector target (demo:detector or its folder), not {target}"
        )
    tolerance = tolerance if tolerance is not None else "cos:0.99"
    from hotloop.closedloop.latency import parse_latency
    from hotloop.compile.artifact import check_output_dir
    from hotloop.compile.backends import check_backend_names
    from hotloop.compile.validate import parse_tolerance
    from hotloop.compress.recipe import (
        EXIT_TOLERANCE,
        RecipeConfig,
        family_recipe_steps,
        parse_recipe,
        parse_rounds_under,
        plot_recipe,
        run_recipe,
    )
    from hotloop.families.buckets import parse_buckets
    from hotloop.io import check_output_file, check_plot_file
    from hotloop.output_dir import check_output_file_not_input

    steps = parse_recipe(recipe, family_recipe_steps(target))
    parse_latency(eval_latency)
    from hotloop.errors import ConfigError
    from hotloop.realtime.strategies import default_strategies

    if eval_strategy not in default_strategies().names():
        raise ConfigError(
            f"--eval-strategy {eval_strategy!r} is not known; use one of {', '.join(default_strategies().names())}"
        )
    names = tuple(b.strip() for b in backends.split(",") if b.strip())
    check_backend_names(list(names))
    from hotloop.compile.calibration import read_mixed_plan

    fp32_layers = read_mixed_plan(mixed_plan) if mixed_plan is not None else {}
    config = opts.config_from_flags(
        RecipeConfig,
        flags,
        recipe=steps,
        tolerance=parse_tolerance(tolerance),
        buckets=parse_buckets(buckets) if buckets is not None else (),
        step_distill_first_action=first_action_weight,
        onestep_rounds_under=parse_rounds_under(onestep_rounds_under),
        bench_iters=bench_iters if bench_iters is not None else 20,
        backends=names,
        fp32_layers=fp32_layers,
        progress=not quiet,
    )
    inputs = {"TARGET": target, "--data": data, "--mixed-plan": mixed_plan}
    check_output_dir(out, "-o", command="compress", overwrite=overwrite, inputs=inputs)
    check_output_file(json_path, "--json")
    check_plot_file(plot, "--plot", {"--json": json_path, "-o": out})
    for path, flag in ((json_path, "--json"), (plot, "--plot")):
        check_output_file_not_input(path, flag, inputs)
    if data is not None:
        from hotloop.compile.calibration import open_dataset

        open_dataset(data)  # empty / unreadable: refused before any model is built
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    log = (lambda s: None) if quiet else (lambda s: typer.echo(s, err=True))
    report = run_recipe(config, log)
    if json_path is not None:
        opts.write_json(json_path, report)
    if plot is not None:
        plot_recipe(report, plot)
        typer.echo(f"wrote {plot}")
    _print(report)
    if report["artifact"]:
        typer.echo(f"wrote {report['artifact']} (kept step: {report['kept_step']})")
    if report["stopped"]:
        typer.echo(f"stopped: {report['stopped']}; the best passing result was kept", err=True)
        raise typer.Exit(EXIT_TOLERANCE)


def _compress_detector(
    target: str,
    recipe: str,
    out: Path,
    data: Path | None,
    tolerance: str | None,
    resolution: int | None,
    episodes: int,
    eval_latency: str,
    calibration_frames: int,
    bench_iters: int | None,
    json_path: Path | None,
    plot: Path | None,
    seed: int,
    quiet: bool,
    overwrite: bool = False,
) -> None:
    from hotloop.compile.artifact import check_output_dir
    from hotloop.compress.recipe import EXIT_TOLERANCE
    from hotloop.errors import ConfigError
    from hotloop.io import check_output_file
    from hotloop.output_dir import OutputDir, check_output_file_not_input
    from hotloop.perception.compress_detector import (
        DEFAULT_RESOLUTION,
        DEFAULT_TOLERANCE,
        DETECTOR_BENCH_ITERS,
        DetectorCompressConfig,
        compress_detector,
    )

    if plot is not None:
        raise ConfigError(
            "--plot draws a policy recipe's steps; a detector's int8 plan is drawn beside float32 per "
            "resolution by `hotloop perception-curve DETECTOR --int8 DIR --plot OUT.png`"
        )
    config = DetectorCompressConfig(
        target=target,
        recipe=tuple(s.strip() for s in recipe.split(",") if s.strip()),
        tolerance=tolerance if tolerance is not None else DEFAULT_TOLERANCE,
        out=out,
        resolution=resolution if resolution is not None else DEFAULT_RESOLUTION,
        data=data,
        calibration_frames=calibration_frames,
        episodes=episodes,
        eval_latency=eval_latency,
        bench_iters=bench_iters if bench_iters is not None else DETECTOR_BENCH_ITERS,
        seed=seed,
    )
    inputs = {"TARGET": target, "--data": data}
    check_output_dir(out, "-o", command="compress", overwrite=overwrite, inputs=inputs)
    check_output_file(json_path, "--json")
    check_output_file_not_input(json_path, "--json", inputs)
    if data is not None and not data.exists():
        raise ConfigError(
            f"--data {data} does not exist; give a frames .npz or a dataset `hotloop record` wrote"
        )
    log = (lambda s: None) if quiet else (lambda s: typer.echo(s, err=True))
    with OutputDir(out, "-o", "compress", out.exists()).writing():
        report = compress_detector(config, log)
    if json_path is not None:
        opts.write_json(json_path, report)
    _print_detector(report)
    typer.echo(f"wrote {out} (--pipeline detector:model={out})")
    if report["precision"] != "int8":
        typer.echo(
            f"stopped: no int8 layer kept {report['tolerance']}; the plan is the float32 graph", err=True
        )
        raise typer.Exit(EXIT_TOLERANCE)


def _print_detector(report: dict) -> None:  # type: ignore[type-arg]
    gate, speed, acc = report["gate"], report["speed"], report["accuracy"]
    kind = next(k for k in gate if k not in ("passed", "frames"))
    kept = ", ".join(report["fp32_modules"]) or "none"
    typer.echo(
        f"int8 plan at {report['resolution']} px: gate {kind} {gate[kind]:.3f} on {gate['frames']} held-out "
        f"frames ({'passed' if gate['passed'] else 'failed'} {report['tolerance']}); float32 layers: {kept}"
    )
    centre = "-" if acc["centre_mm_p50"] is None else f"{acc['centre_mm_p50']:.2f} mm"
    typer.echo(
        f"against the labels: IoU {acc['iou']:.3f}, centre p50 {centre}, detected {acc['detection_rate']:.1%}"
    )
    typer.echo(
        f"latency (onnxruntime, 1 thread, interleaved): int8 p50/p99 {speed['int8_ms']['p50']:.3f}/"
        f"{speed['int8_ms']['p99']:.3f} ms, fp32 {speed['fp32_ms']['p50']:.3f}/{speed['fp32_ms']['p99']:.3f} ms; "
        f"fp32/int8 {speed['ratio_p50']:.2f}x at p50, {speed['ratio_p99']:.2f}x at p99"
    )
    loop = report.get("closed_loop")
    if loop:
        d = loop["paired"]["difference"]
        typer.echo(
            f"closed loop ({loop['policy']}, {loop['latency']}, seeds {loop['seeds'][0]}..{loop['seeds'][1]}): "
            f"fp32 {loop['fp32']['successes']}/{loop['fp32']['completed']}, int8 {loop['int8']['successes']}/"
            f"{loop['int8']['completed']}; paired change {d['estimate']:+.1%} ({d['low']:+.1%} to {d['high']:+.1%}) (McNemar p {loop['paired']['mcnemar_p']:.2f})"
        )


def _print(report: dict) -> None:  # type: ignore[type-arg]
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"compress {report['target']} (tolerance {report['tolerance']})")
    for col in (
        "step",
        "steps",
        "params",
        "p50 ms",
        "p99 ms",
        "action cos",
        "max/std",
        "smooth",
        "success",
        "plan",
    ):
        table.add_column(col, overflow="fold")
    for r in report["rows"]:
        s = r.get("success")
        table.add_row(
            r["step"],
            str(r["num_steps"]),
            f"{r['parameters']:,}",
            f"{r['latency_ms']['p50']:.2f}",
            f"{r['latency_ms']['p99']:.2f}",
            f"{r['action']['cosine']:.5f}",
            f"{r['action']['max_abs_normalized']:.3g}",
            f"{r['smoothness']:.3g}",
            f"{s['success_rate']:.2f} [{s['success_ci95'][0]:.2f}, {s['success_ci95'][1]:.2f}] n={s['episodes']}"
            if s
            else "",
            ", ".join(f"{k}:{v['backend']} {v['precision']}" for k, v in r["precision_plan"].items()),
        )
    Console(width=max(Console().width, 150)).print(table)


def add_commands(app: typer.Typer) -> None:
    register(app, {"compress": compress_cmd})
