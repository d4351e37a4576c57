"""`hotloop compile`, registered on the app by `add_commands` (one hook in cli.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from hotloop import cli_options as opts
from hotloop.cli_errors import register

EXIT_BUDGET_UNMET = 3


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def compile_cmd(
    target: Annotated[
        str,
        typer.Argument(
            help="pi05:small, pi0:tiny, demo:conveyor, a LeRobot checkpoint folder, or a model.onnx file"
        ),
    ],
    out: opts.ArtifactOut,
    budget_ms: Annotated[
        float | None,
        typer.Option(
            "--budget-ms",
            help="end-to-end p99 budget in ms: exit 3 when the best plan misses it (default: none, the "
            "fastest plan within --tolerance)",
        ),
    ] = None,
    tolerance: opts.ActionTolerance = "cos:0.995",
    json_path: opts.JsonOut = None,
    backends: Annotated[
        list[str] | None, typer.Option(help="backends to try (comma list), default all")
    ] = None,
    precisions: Annotated[
        list[str] | None,
        typer.Option(help="precisions to try: fp32,bf16,int8,int8-dynamic,int8-weight,int4-weight"),
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option(
            "--calibration",
            help="recorded episodes (LeRobot v3 dir), or a folder of raw LeRobot batches (.npz), to calibrate static int8 on",
        ),
    ] = None,
    calibration_frames: Annotated[
        int, typer.Option("--calibration-frames", help="frames sampled from --calibration")
    ] = 256,
    mixed_plan: opts.MixedPlan = None,
    inductor_modes: Annotated[
        str, typer.Option(help="inductor modes to try: default,max-autotune")
    ] = "default",
    variants: Annotated[
        str, typer.Option(help="sub-engine recipes to try (pi targets): plain,fused")
    ] = "plain,fused",
    input_spec: Annotated[
        list[str] | None, typer.Option("--input", help="ONNX input NAME:SHAPE (repeat)")
    ] = None,
    iters: Annotated[
        int, typer.Option("--iters", help="timed iterations per candidate and for the final pair")
    ] = 20,
    warmup: opts.Warmup = 3,
    threads: opts.Threads = None,
    reserve_cores: opts.ReserveCores = None,
    max_load: opts.MaxLoad = 0.5,
    force: opts.ForceJudge = False,
    views: opts.CameraViews = None,
    steps: opts.FlowSteps = None,
    seed: opts.Seed = 0,
    buckets: opts.PromptBuckets = None,
    search: Annotated[
        str,
        typer.Option(
            help="fast: fastest-expected candidates first, skip what this machine's roofline says cannot win, "
            "stop timing the slow, no inductor by default where OpenVINO runs; full: every candidate, fully timed"
        ),
    ] = "fast",
    no_cache: Annotated[
        bool,
        typer.Option(
            "--no-cache",
            help="time every candidate afresh: this machine's cache of candidate timings (which orders the "
            "search and skips what it says cannot win; docs/compile.md) is neither read nor written",
        ),
    ] = False,
    quiet: opts.Quiet = False,
    overwrite: opts.Overwrite = False,
    plan_memory_gb: opts.PlanMemory = None,
) -> None:
    """Choose per sub-engine the fastest backend x precision within tolerance; write a verified artifact."""
    from hotloop.compile.artifact import check_output_dir
    from hotloop.compile.backends import backend_names
    from hotloop.compile.planner import PlanConfig

    # Every bad value fails here, before any model is built or file written.
    from hotloop.compile.search import check_search, fast_default_backends
    from hotloop.compile.sources import compilable_entry, is_onnx_target, onnx_path
    from hotloop.compile.validate import parse_tolerance
    from hotloop.families.buckets import parse_buckets
    from hotloop.io import check_output_file
    from hotloop.measure.contention import check_max_load, check_quiet
    from hotloop.measure.placement import apply_reserve
    from hotloop.output_dir import check_not_input

    check_max_load(max_load)
    check_search(search)
    threads, pin = apply_reserve(reserve_cores, threads, None)
    log = (lambda s: None) if quiet else (lambda s: typer.echo(s, err=True))
    notes: list[str] = []  # said once the input is known to be good (a bad one gets one line)
    chosen_backends = tuple(_split(backends))
    if not chosen_backends:
        chosen_backends = tuple(backend_names())
        if search == "fast" and not is_onnx_target(target):
            chosen_backends = fast_default_backends(chosen_backends, notes.append)
    config = PlanConfig(
        budget_ms=budget_ms,
        tolerance=parse_tolerance(tolerance),
        backends=chosen_backends,
        search=search,
        precisions=tuple(_split(precisions) or ("fp32", "bf16")),
        inductor_modes=tuple(_split([inductor_modes])),
        variants=tuple(_split([variants])),
        warmup=warmup,
        iterations=iters,
        threads=threads,
        pin=pin,
        progress=not quiet,
        buckets=parse_buckets(buckets) if buckets is not None else (),
        overwrite=overwrite,
        plan_memory_gb=plan_memory_gb,
    )
    _check_modes(config.inductor_modes)
    if "int8" in config.precisions and calibration is None and not _has_own_task(target):
        from hotloop.errors import ConfigError

        raise ConfigError(
            "--precisions int8 is static int8 and needs --calibration DIR (recorded episodes, "
            "`hotloop record TASK -o DIR`, or a folder of raw LeRobot batches as .npz, "
            "`benchmarks/lerobot_reference_run.py`); or use int8-dynamic"
        )
    inputs = {"TARGET": target, "--calibration": calibration, "--mixed-plan": mixed_plan}
    check_output_dir(out, "-o", overwrite=overwrite, inputs=inputs)
    if json_path is not None:
        check_output_file(json_path, "--json")
        check_not_input(json_path, "--json", inputs)
    # What to compile is checked before the machine's load: a mistyped target is the first thing to say.
    if is_onnx_target(target):
        onnx_path(target)
    else:
        compilable_entry(target)
    start_load = check_quiet(max_load, force, "hotloop compile")
    if (
        pin is not None
    ):  # before any library starts its worker threads: they keep the affinity they start with
        import os

        os.sched_setaffinity(0, pin)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    # Said once the model is built: input refused on the way stays one line.
    notes.insert(0, f"machine load at the start: {start_load.describe()}")
    if is_onnx_target(target):
        from hotloop.errors import ConfigError

        for flag, value in (
            ("--buckets", buckets),
            ("--mixed-plan", mixed_plan),
            ("--steps", steps),
            ("--views", views),
        ):
            if value is not None:
                raise ConfigError(
                    f"{flag} is for policy targets; an ONNX model has fixed inputs and no such option: drop it"
                )
        from hotloop.compile.onnx_plan import onnx_graph, plan_onnx, write_onnx_artifact

        graph = onnx_graph(onnx_path(target), list(input_spec or []), seed)
        onnx_calib = None
        if calibration is not None:
            from hotloop.compile.onnx_calibration import load_onnx_calibration

            onnx_calib = load_onnx_calibration(
                calibration, graph.input_names, graph.example_inputs, calibration_frames
            )
            log(
                f"calibration: {len(onnx_calib.calibrate)} samples to calibrate, {len(onnx_calib.held_out)} "
                "held out to judge every candidate on"
            )
        for note in notes:
            log(note)
        if not no_cache:
            config = dataclasses.replace(config, timing_cache=_open_timing_cache(threads, pin, max_load))
        candidates, best, result = plan_onnx(graph, config, log, onnx_calib)
        result["machine_load"] = _load_record(start_load)
        art = write_onnx_artifact(graph, best, result, out, config)
    else:
        from hotloop.errors import ConfigError

        if input_spec:
            raise ConfigError("--input is for ONNX files; a policy target has its own fixed inputs")
        from hotloop.compile.plan import plan_policy, write_artifact
        from hotloop.compile.sources import policy_source
        from hotloop.targets import TargetOptions

        compilable_entry(target)
        source = policy_source(target, TargetOptions(views=views, num_steps=steps, seed=seed))
        if calibration is not None or mixed_plan is not None:
            from hotloop.compile.calibration import compression_plan_config, judged_on_held_out

            config = compression_plan_config(
                config, target, source, calibration, calibration_frames, mixed_plan, seed, log
            )
            source = judged_on_held_out(source, config.calibration)
        elif "int8" in config.precisions:  # a target trained on a built-in task: frames from that task
            from hotloop.compile.calibration import task_calibration

            calib = task_calibration(target, source, min(calibration_frames, 64), seed)
            assert calib is not None  # refused above otherwise
            log(f"calibration: {len(calib)} frames recorded from the target's own task ({calib.dataset})")
            config = dataclasses.replace(config, calibration=calib)
        elif _has_own_task(target):
            log(
                "static int8 not tried: add --precisions fp32,int8 and the calibration frames are recorded "
                "from this target's own task"
            )
        else:
            log(
                "static int8 not tried: it needs calibration frames (on pi05:small the calibrated int8 plan "
                "beat every fp32 / bf16 plan: docs/compile.md). Record frames of the task the policy runs "
                "(`hotloop record --task conveyor-pick --episodes 8 -o FRAMES`) and add --calibration FRAMES "
                "--precisions fp32,int8"
            )
        for note in notes:
            log(note)
        if not no_cache:
            config = dataclasses.replace(config, timing_cache=_open_timing_cache(threads, pin, max_load))
        plan = plan_policy(source, config, log)
        result = plan.result
        result["machine_load"] = _load_record(start_load)
        art = write_artifact(source, plan, out, config)
    result["artifact"] = str(art)
    print_result(result)
    if json_path is not None:
        opts.write_json(json_path, result)
    typer.echo(f"wrote {art}")
    if result["budget_met"] is False:
        busy = busy_budget_line(result, max_load, force)
        if busy is not None:
            typer.echo(busy, err=True)
            raise typer.Exit(2)
        typer.echo(
            f"budget not met: plan p99 {result['plan_latency_ms']['p99']:.2f} ms > {budget_ms:g} ms "
            "(the best plan found was written)",
            err=True,
        )
        raise typer.Exit(EXIT_BUDGET_UNMET)


def busy_budget_line(result: dict[str, Any], max_load: float, force: bool) -> str | None:
    """The budget gate judges quiet timings only: a missed --budget-ms while the machine was busy (its
    recorded load, start or end, above --max-load) is "machine busy" (exit 2), not exit 3; --force
    judges anyway. None when the gate may judge."""
    from hotloop.measure.contention import busy_gate_line, recorded_level

    level = recorded_level(result.get("machine_load"))
    if force or level is None or level <= max_load:
        return None
    return busy_gate_line(level, max_load, "the plan was timed")


def _has_own_task(target: str) -> bool:
    """A target trained on a built-in task (the shipped demos) records its own calibration frames."""
    from hotloop.compile.sources import is_onnx_target
    from hotloop.errors import ConfigError
    from hotloop.targets import find_target

    if is_onnx_target(target):
        return False
    try:
        return find_target(target).task_observations is not None
    except ConfigError:
        return False


def _open_timing_cache(threads: int | None, pin: tuple[int, ...] | None, max_load: float) -> Any:
    """This machine's timing cache for the threads the candidates run with; its warnings (an unreadable
    or unwritable file) are said even with --quiet, in one line each."""
    import torch

    from hotloop.compile.timing_cache import TimingCache

    return TimingCache.open(
        threads if threads is not None else torch.get_num_threads(),
        pin,
        max_load,
        lambda s: typer.echo(f"warning: {s}", err=True),
    )


def _load_record(start: Any) -> dict[str, Any]:
    """The machine's load when planning started and ended: a figure timed on a busy machine says so."""
    from hotloop.measure.contention import measure_load

    return {"start": start.to_dict(), "end": measure_load(0.25).to_dict()}


def _check_modes(modes: tuple[str, ...]) -> None:
    from hotloop.compile.backends.inductor import MODES
    from hotloop.errors import ConfigError

    for m in modes:
        if m not in MODES:
            raise ConfigError(f"--inductor-modes: unknown mode {m!r}; use {', '.join(MODES)}")


def print_result(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"compile {result['target']}: candidates")
    for col in (
        "stage",
        "sub-engine",
        "recipe",
        "backend",
        "precision",
        "status",
        "p50 ms",
        "p99 ms",
        "action cos",
        "why",
    ):
        table.add_column(col, overflow="fold")
    plan = result["plan"]
    for c in result["candidates"]:
        lat = c["latency_ms"] or {}
        chosen = any(
            p["sub_engine"] == c["sub_engine"]
            and p["backend"] == c["backend"]
            and p["precision"] == c["precision"]
            and p["options"] == c["options"]
            and p.get("variant") == c.get("variant")
            for p in plan.values()
        )
        status = c["status"] + (" *" if chosen else "")
        table.add_row(
            c["stage"],
            c["sub_engine"],
            c.get("variant", ""),
            c["backend"] + (f" {c['options']}" if c["options"] else ""),
            c["precision"],
            status,
            f"{lat['p50']:.2f}" if lat else "",
            f"{lat['p99']:.2f}" if lat else "",
            f"{c['action']['cosine']:.6f}" if c.get("action") else "",
            c["reason"],
        )
    console = Console(width=max(Console().width, 150))  # the table stays readable in logs and pipes
    console.print(table)
    ref, got = result["reference_latency_ms"], result["plan_latency_ms"]
    budget = (
        "no --budget-ms"
        if result["budget_ms"] is None
        else f"budget {result['budget_ms']:g} ms {'met' if result['budget_met'] else 'NOT met'}"
    )
    if ref is None:  # the fp32 weights of some stages were released to fit: the reference cannot run
        console.print(
            f"plan p50 {got['p50']:.2f} / p99 {got['p99']:.2f} ms ({result['iterations']} rounds); reference "
            f"not timed (fp32 {', '.join(result.get('released_for_memory') or [])} weights released to fit "
            f"in memory: time it with `hotloop bench`); action cos {result['action_cos_min']:.6f}; {budget}"
        )
    else:
        console.print(
            f"reference p50 {ref['p50']:.2f} / p99 {ref['p99']:.2f} ms; plan p50 {got['p50']:.2f} / p99 "
            f"{got['p99']:.2f} ms (interleaved, {result['iterations']} rounds); speedup p50 "
            f"{result['speedup_p50']:.2f}x, p99 {result['speedup_p99']:.2f}x; action cos "
            f"{result['action_cos_min']:.6f}; {budget}"
        )
    final = result.get("final_check") or {}
    if final.get("written") == "reference":
        planned = final["planned"]
        planned = (
            planned
            if isinstance(planned, str)
            else ", ".join(f"{stage}: {p['backend']} {p['precision']}" for stage, p in planned.items())
        )
        console.print(
            f"the planned {planned} ran slower than the reference in the final check (p50 "
            f"{final['planned_latency_ms']['p50']:.2f} against {ref['p50']:.2f} ms): the reference was written",
            soft_wrap=True,
        )
    for b in result.get("buckets") or []:
        console.print(
            f"prompt bucket {b['bucket']}: p50 {b['latency_ms']['p50']:.2f} / p99 {b['latency_ms']['p99']:.2f} ms, "
            f"action cos {b['action_cos']:.6f} (prompt filling the bucket, against the unbucketed fp32 reference)"
        )


def add_commands(app: typer.Typer) -> None:
    register(app, {"compile": compile_cmd})
