"""The one command-line app: `hotloop bench | doctor | demo | targets | record | eval | train-demo | serve`."""

from __future__ import annotations

from hotloop.interrupts import INTERRUPTED, exit_while_starting

_restore_sigint = exit_while_starting()  # first: Ctrl-C during the imports below is one line, exit 130

import dataclasses  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Annotated, Any  # noqa: E402

import typer  # noqa: E402

from hotloop import cli_options as opts  # noqa: E402
from hotloop.cli_errors import user_errors  # noqa: E402
from hotloop.errors import UnknownNameError  # noqa: E402

app = typer.Typer(
    name="hotloop",
    help="Make robot policies meet their deadline: measure, compress, compile, run on a deadline, prove in closed loop.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        import hotloop

        typer.echo(f"hotloop {hotloop.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="print the version and exit"),
    ] = False,
) -> None:
    """Make robot policies meet their deadline: measure, compress, compile, run on a deadline, prove in closed loop."""


@app.command()
@user_errors
def bench(
    target: Annotated[
        str, typer.Argument(help="a registered target, e.g. toy:mlp or pi05:small (see `hotloop targets`)")
    ],
    warmup: opts.Warmup = 20,
    iters: Annotated[int, typer.Option("--iters", help="timed iterations")] = 200,
    threads: opts.Threads = None,
    pin: Annotated[str | None, typer.Option(help="CPU affinity list, e.g. 0-1 or 0,2")] = None,
    gc: Annotated[
        bool, typer.Option("--gc/--no-gc", help="leave garbage collection on while timing")
    ] = False,
    json_path: opts.JsonOut = None,
    plot: Annotated[Path | None, typer.Option(help="write a histogram + CDF PNG here")] = None,
    compare: Annotated[
        str | None, typer.Option(help="a second target, measured interleaved in the same run")
    ] = None,
    settle_ms: Annotated[
        float,
        typer.Option(
            help="with --compare: untimed pause before each call, so the other library's spinning "
            "worker threads are idle (e.g. 100 for an OpenVINO artifact against eager torch)"
        ),
    ] = 0.0,
    views: opts.CameraViews = None,
    steps: opts.FlowSteps = None,
    horizon: Annotated[int | None, typer.Option(help="action chunk length")] = None,
    action_dim: Annotated[int | None, typer.Option(help="action dimension")] = None,
    dtype: Annotated[
        str, typer.Option(help="float32 or bfloat16 (pi targets); float16 too for toy:mlp")
    ] = "float32",
    prompt_tokens: Annotated[
        int | None, typer.Option(help="real prompt tokens among the prompt slots (VLA targets)")
    ] = None,
    buckets: opts.PromptBuckets = None,
    device: opts.Device = "cpu",
    batch: Annotated[int, typer.Option(help="batch size")] = 1,
    seed: opts.Seed = 0,
    memory_cap_mb: opts.MemoryCap = None,
    quiet: opts.Quiet = False,
    cold_load: Annotated[
        bool,
        typer.Option(
            "--cold-load",
            help="an artifact: drop its files from the page cache before loading, as after a reboot "
            "(info.load_s, info.load_cache in the JSON)",
        ),
    ] = False,
    contend: Annotated[
        int,
        typer.Option(
            help="also time TARGET beside N busy processes (blocks alternating with quiet ones): p50/p99 "
            "inflation, as a robot computer's drivers would cause"
        ),
    ] = 0,
    reserve_cores: opts.ReserveCores = None,
    roofline_cache: opts.RooflineCache = None,
    baseline: opts.Baseline = None,
    threshold: opts.Threshold = None,
    fail_on_regression: opts.FailOnRegression = False,
    history: opts.History = None,
    max_load: opts.MaxLoad = 0.5,
    force: opts.ForceJudge = False,
) -> None:
    """Time TARGET: warm-up, timed iterations, p50/p90/p95/p99/max, per-stage breakdown."""
    flags = dict(locals())  # BenchConfig's and TargetOptions' fields, by name
    from rich.console import Console

    from hotloop.io import atomic_write_json, check_output_file, check_plot_file
    from hotloop.measure.bench import BenchConfig, machine_settings, parse_cpu_list
    from hotloop.measure.placement import apply_reserve
    from hotloop.measure.report import bench_table, plot_latency, roofline_table, summary_lines
    from hotloop.targets import TargetOptions, check_cap, check_device, find_target

    check_cap(memory_cap_mb)  # the flag's own bounds first, whatever the target
    threads, pin_cpus = apply_reserve(
        reserve_cores, threads, parse_cpu_list(pin) if pin is not None else None
    )
    config = opts.config_from_flags(
        BenchConfig, flags, iterations=iters, threads=threads, pin=pin_cpus, gc_enabled=gc, progress=not quiet
    )
    entry = find_target(target)
    other_entry = find_target(compare) if compare is not None else None
    options = opts.config_from_flags(
        TargetOptions, flags, num_steps=steps, buckets=_parse_buckets(buckets), threads=threads
    )
    check_device(device)
    _warn_oversubscription(threads)
    check_output_file(json_path, "--json")
    check_plot_file(plot, "--plot", {"--json": json_path})
    from hotloop.measure.baseline import BaselineRequest

    against = BaselineRequest.check(
        target, baseline, threshold, fail_on_regression, history, max_load=max_load, force=force
    )
    cold = _drop_pages(target, entry) if cold_load else None
    with machine_settings(config):  # before building: threads a library starts keep their affinity
        case = entry.build_bench(target, options)
        if cold is not None:
            case.info["load_cache"] = cold
        other = (  # the memory cap is TARGET's (an artifact), not the reference's
            other_entry.build_bench(compare, dataclasses.replace(options, memory_cap_mb=None))
            if other_entry is not None and compare
            else None
        )
        result = _run_bench_keeping_samples(case, config, other, json_path)
    console = Console()
    console.print(bench_table(result))
    if result.roofline:
        console.print(roofline_table(result))
    for line in summary_lines(result):
        console.print(line)
    data = result.to_dict()
    against.note_load(data)
    cmp = against.compare(data, console)
    if cmp is not None:
        data["baseline_comparison"] = cmp.to_dict()
    if json_path is not None:
        console.print(f"wrote {atomic_write_json(json_path, data)}")
    if plot is not None:
        console.print(f"wrote {plot_latency(result, plot)}")
    against.finish(data, cmp, console)


def _run_bench_keeping_samples(case: Any, config: Any, other: Any, json_path: Path | None) -> Any:
    """`run_bench`; on Ctrl-C during the timed iterations the samples measured so far go to --json
    (marked "interrupted": true, with their count) before exit code 130, instead of being lost."""
    from hotloop.interrupts import first_interrupt_only
    from hotloop.io import atomic_write_json
    from hotloop.measure.bench import BenchInterrupted, run_bench

    with first_interrupt_only():  # a second Ctrl-C cannot cut the save short
        try:
            return run_bench(case, config, other)
        except BenchInterrupted as stop:
            done = stop.partial["completed_iterations"]
            where = ""
            if json_path is not None:
                where = f"; wrote them to {atomic_write_json(json_path, stop.partial)}"
            typer.echo(f"interrupted after {done} of {config.iterations} timed iterations{where}", err=True)
            raise typer.Exit(130) from None


def _parse_buckets(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    from hotloop.families.buckets import parse_buckets

    return parse_buckets(text)


def _warn_oversubscription(threads: int | None) -> None:
    import os

    cpus = len(os.sched_getaffinity(0))
    if threads is not None and threads > cpus:
        typer.echo(
            f"warning: --threads {threads} is more than the {cpus} CPUs this process may use; the threads "
            f"will take turns and the timings will suffer (use --threads {cpus} or fewer)",
            err=True,
        )


@app.command()
@user_errors
def targets() -> None:
    """List the registered targets."""
    from hotloop.targets import default_targets

    for name, entry in default_targets().items():
        typer.echo(f"{name:16s} {entry.description}")


@app.command()
@user_errors
def doctor(
    json_path: opts.JsonOut = None,
    roofline_cache: opts.RooflineCache = None,
) -> None:
    """Which backends are usable here and why not; thread settings; matmul peaks; advice."""
    from rich.console import Console
    from rich.table import Table

    from hotloop.doctor import checks_to_dict, run_checks
    from hotloop.io import check_output_file

    check_output_file(json_path, "--json")
    checks = run_checks(roofline_cache)
    table = Table(title="hotloop doctor")
    for col in ("check", "usable", "detail", "advice"):
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(c.name, "[green]yes[/green]" if c.ok else "[red]no[/red]", c.detail, c.advice)
    Console().print(table)
    if json_path is not None:
        opts.write_json(json_path, checks_to_dict(checks))


@app.command()
@user_errors
def demo(
    out: Annotated[Path, typer.Option(help="report folder")] = Path("hotloop-report"),
    full: Annotated[bool, typer.Option("--full", help="more iterations and episodes (slower)")] = False,
    quiet: opts.Quiet = False,
    rung: Annotated[
        list[str] | None,
        typer.Option(
            help="run only these rungs (harness, vla, compile, closed-loop, compression, families, robustness)"
        ),
    ] = None,
    history: Annotated[
        Path | None,
        typer.Option(
            envvar="HOTLOOP_HISTORY", help="append the report to a history; show the previous run's figures"
        ),
    ] = None,
    overwrite: opts.Overwrite = False,
) -> None:
    """The showcase: bench the harness, the reference VLA, and the closed-loop demo policy; write a report."""
    from hotloop.demo.report import DemoConfig, read_headline, run_demo

    config = DemoConfig(
        out_dir=out,
        full=full,
        progress=not quiet,
        only=tuple(rung or ()),
        history=history,
        overwrite=overwrite,
    )
    rungs = run_demo(config, log=lambda s: typer.echo(s, err=True))
    typer.echo(f"wrote {out / 'report.json'} and {out / 'report.html'}")
    typer.echo("\n".join(["", *read_headline(out)]))  # the figures last, where the eye lands
    failed = [r.title for r in rungs if r.error]
    if failed:
        typer.echo(f"error: {len(failed)} rung(s) failed: {', '.join(failed)} (see the report)", err=True)
        raise typer.Exit(1)


# Each package registers its own commands (`add_commands(app)`), in this order in `--help`; none imports
# back into this module.
COMMAND_MODULES = (
    "hotloop.datasets.commands",  # record
    "hotloop.closedloop.commands",  # eval
    "hotloop.train.commands",  # train-demo
    "hotloop.perception.commands",  # perception-curve
    "hotloop.serve.commands",  # serve
    "hotloop.compile.commands",  # compile
    "hotloop.runtime.commands",  # profile
    "hotloop.compress.commands",  # sensitivity
    "hotloop.compress.recipe_commands",  # compress
    "hotloop.verify.commands",  # verify
    "hotloop.baselines.commands",  # history, compare
)
for _module in COMMAND_MODULES:
    importlib.import_module(_module).add_commands(app)
_restore_sigint()  # from here a command's own Ctrl-C handling applies (see `main`, `user_errors`)


def _usage_line(exc: Exception) -> str:
    """One line for a usage error; a value that failed to convert is named with its flag."""
    command = getattr(getattr(exc, "ctx", None), "command_path", None) or "hotloop"
    text = exc.format_message().strip()  # type: ignore[attr-defined]
    param = getattr(exc, "param", None)
    errors = getattr(exc.__cause__, "errors", None)  # typer converts values with pydantic
    if param is not None and callable(errors):
        details = errors()
        if details and "input" in details[0]:
            reason = str(details[0].get("msg", "")).strip()
            reason = reason[:1].lower() + reason[1:]
            text = f"{param.get_error_hint()} got {str(details[0]['input'])!r}: {reason}"
    return f"{text} (see `{command} --help`)"


def _drop_pages(target: str, entry: object) -> str:
    """`--cold-load`: TARGET's files out of the page cache (`hotloop.runtime.page_cache`)."""
    from hotloop.errors import ConfigError
    from hotloop.runtime.page_cache import drop_artifact_pages
    from hotloop.targets import ARTIFACT_ENTRY

    if entry is not ARTIFACT_ENTRY:
        raise ConfigError(
            f"--cold-load times an artifact's load; {target!r} is not an artifact folder: drop it"
        )
    return drop_artifact_pages(Path(target))


def main(argv: list[str] | None = None) -> None:
    """The `hotloop` entry point: every usage error (a malformed number, an unknown option) is one
    `error:` line naming the value, exit code 2, instead of the framework's multi-line box."""
    try:
        from typer import TyperException as UsageProblem  # typer vendors click and re-exports its base
    except ImportError:  # pragma: no cover - older typer on top of click
        from click import ClickException as UsageProblem  # type: ignore[assignment,no-redef]
    try:
        code = app(args=argv, prog_name="hotloop", standalone_mode=False)
    except UsageProblem as exc:
        message = exc.format_message()
        if "\n" in message.strip():  # the help text itself (no command given): show it as it is
            typer.echo(message, err=True)
        else:
            typer.echo(f"error: {_usage_line(exc)}", err=True)
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    except typer.Abort:
        typer.echo("aborted", err=True)
        raise SystemExit(130) from None
    except KeyboardInterrupt:  # while the commands are assembled, before any of them runs
        print(INTERRUPTED, file=sys.stderr)
        raise SystemExit(130) from None
    except UnknownNameError as exc:  # raised outside a command (should not happen), still one line
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(code if isinstance(code, int) else 0)
