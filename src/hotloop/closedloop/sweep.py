"""One `hotloop eval` run as data: the target, its task, the strategies x triggers x latencies to sweep and
where the results go (`EvalSweep`), checked and expanded into `EvalRequest`s before any episode, then run
point by point (`run_sweep`), the JSON rewritten after every point so Ctrl-C keeps what finished."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from hotloop.sim.tasks import check_difficulty


def _parse_numbers(
    text: str, flag: str, number: Callable[[str], Any], write: str, need: str, valid: Callable[[Any], bool]
) -> list[Any]:
    """`flag`'s comma-separated values, each read by `number`; ConfigError saying what to `write` when one
    does not read, and what they `need` when there are none or one is not `valid`."""
    from hotloop.errors import ConfigError

    try:
        values = [number(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: write {write}") from None
    if not values or not all(valid(v) for v in values):
        raise ConfigError(f"{flag} {text!r}: need one or more {need}")
    return values


def _parse_sweep(text: str) -> list[float]:
    import math

    return _parse_numbers(
        text, "--sweep-latency", float, "milliseconds separated by commas, e.g. 0,50,100,200",
        "finite, non-negative milliseconds", lambda v: math.isfinite(v) and v >= 0,
    )  # fmt: skip


def _parse_triggers(text: str) -> list[int]:
    values = _parse_numbers(
        text, "--sweep-trigger", int, "whole numbers of actions separated by commas, e.g. 8,10,12,14",
        "non-negative numbers of actions", lambda v: v >= 0,
    )  # fmt: skip
    return list(dict.fromkeys(values))  # each once, in the order given


def _option_users(names: list[str], field: str, value: Any, other: Any, horizon: int) -> list[str]:
    """The strategies among `names` that read StrategyConfig `field`: two values of it give two
    different strategies, or the strategy checks it (refuses one of them)."""
    import dataclasses

    from hotloop.errors import ConfigError
    from hotloop.realtime.strategies import StrategyConfig, make_strategy

    users = []
    for name in names:
        base = StrategyConfig(horizon)
        given = make_strategy(name, dataclasses.replace(base, **{field: value})).describe()
        try:
            changed = given != make_strategy(name, dataclasses.replace(base, **{field: other})).describe()
        except ConfigError:
            changed = True  # it checks this option: it reads it
        if changed:
            users.append(name)
    return users


def trigger_readers(names: list[str]) -> set[str]:
    """The strategies among `names` that `--trigger-remaining` acts on (async and the rtc modes)."""
    return set(_option_users(names, "trigger_remaining", 1, 2, horizon=16))


def student_readers(names: list[str]) -> set[str]:
    """The strategies among `names` that `--draft-from` acts on (draft: its drafts become the student's)."""
    from hotloop.realtime.draft import SHIFTED, STUDENT

    return set(_option_users(names, "draft_source", STUDENT, SHIFTED, horizon=16))


def _check_strategy_options(
    names: list[str],
    execute_steps: int | None,
    trigger_remaining: int | None,
    guidance_weight: float | None = None,
    trigger_flag: str = "--trigger-remaining",
    ensemble_coeff: float | None = None,
    draft_tolerance: float | None = None,
) -> None:
    """An option no chosen strategy reads is an error, not silently ignored. A strategy reads an option
    when two values of it give two different strategies (their descriptions differ), or when it checks
    the value (refuses one of them); a value every chosen strategy refuses fails here, before any
    episode. `trigger_flag`: the flag the trigger came from (`--sweep-trigger` gives one per point)."""
    from hotloop.errors import ConfigError

    options = (  # flag, StrategyConfig field, the value given, a second value to compare with
        (
            "--execute-steps",
            "execute_steps",
            execute_steps,
            None if execute_steps is None else execute_steps + 1,
        ),
        (
            trigger_flag,
            "trigger_remaining",
            trigger_remaining,
            None if trigger_remaining is None else trigger_remaining + 1,
        ),
        (
            "--guidance-weight",
            "max_guidance_weight",
            guidance_weight,
            None if guidance_weight is None else 2 * guidance_weight + 1,
        ),
        (
            "--ensemble-coeff",
            "ensemble_coeff",
            ensemble_coeff,
            None if ensemble_coeff is None else ensemble_coeff + 1,
        ),
        (
            "--draft-tolerance",
            "draft_tolerance",
            draft_tolerance,
            None if draft_tolerance is None else draft_tolerance / 2,
        ),
    )
    horizon = 2 + max(int(v) for v in (execute_steps, trigger_remaining, 0) if v is not None)
    for flag, field, value, other in options:
        if value is None:
            continue
        users = _option_users(names, field, value, other, horizon)
        if not users:
            readers = {
                "--execute-steps": "chunk",
                trigger_flag: "async, rtc, rtc-prefix, rtc-soft or lerobot-async",
                "--ensemble-coeff": "ensemble",
                "--draft-tolerance": "draft",
            }.get(flag, "rtc")
            raise ConfigError(
                f"{flag} {value:g} does nothing with --strategy {','.join(names)}; it is for {readers}: "
                f"drop it or add that strategy"
            )


def _check_realtime_options(
    blend: str,
    fallback: str,
    deadline_ms: float | None,
    guidance_weight: float | None,
    names: list[str] | None = None,
    ensemble_coeff: float | None = None,
    draft_tolerance: float | None = None,
) -> None:
    from hotloop.realtime.blending import BlendConfig
    from hotloop.realtime.strategies import StrategyConfig
    from hotloop.realtime.watchdog import WatchdogConfig, parse_fallback

    BlendConfig(blend)
    kind, engine = parse_fallback(fallback)
    WatchdogConfig(kind, deadline_ms)
    if engine is not None:
        check_fallback_target(engine)
    if guidance_weight is not None:
        StrategyConfig(1, max_guidance_weight=guidance_weight)
    if ensemble_coeff is not None:
        StrategyConfig(1, ensemble_coeff=ensemble_coeff)
    if draft_tolerance is not None:
        StrategyConfig(1, draft_tolerance=draft_tolerance)
    if blend != "latest" and "ensemble" in (names or []):
        from hotloop.errors import ConfigError

        raise ConfigError(
            f"--blend {blend} with --strategy ensemble: the ensemble forms every executed action itself "
            "(LeRobot's temporal ensembling); drop --blend, or use --blend ensemble with another strategy"
        )


def check_fallback_target(engine: str, flag: str = "--fallback") -> None:
    """The smaller engine of `--fallback engine:TARGET` must be a known target (checked before any work)."""
    from hotloop.errors import ConfigError, UnknownNameError
    from hotloop.targets import find_target

    try:
        find_target(engine)
    except UnknownNameError as e:
        raise ConfigError(f"{flag} engine:{engine}: {e}") from None


@dataclass(frozen=True)
class EvalSweep:
    """Every `hotloop eval` option, as given (`strategy` holds the repeated / comma-separated values)."""

    target: str
    task: str = "conveyor-pick"
    task_kwargs: str | None = None
    difficulty: str | None = None
    strategy: tuple[str, ...] = ("sync",)
    latency: str | None = None
    sweep_latency: str | None = None
    episodes: int = 50
    seed: int = 0
    workers: int = 2
    execute_steps: int | None = None
    trigger_remaining: int | None = None
    sweep_trigger: str | None = None
    num_steps: int | None = None
    blend: str = "latest"
    fallback: str = "hold"
    deadline_ms: float | None = None
    guidance_weight: float | None = None
    ensemble_coeff: float | None = None
    draft_tolerance: float | None = None
    draft_from: Path | None = None  # --draft-from: a onestep student artifact (draft's drafts)
    json_path: Path | None = None
    plot: Path | None = None
    quiet: bool = False
    pipeline: str | None = None
    memory_cap_mb: float | None = None
    baseline: str | None = None  # an earlier eval JSON or history run (closedloop/baseline.py)
    fail_on_regression: bool = False
    max_load: float = 0.5  # --max-load: the gate at measured latency judges a quiet machine only
    force: bool = False  # --force: judge anyway
    history: Path | None = None
    perturb: str | None = None  # --perturb: applied to every point
    sweep_perturb: str | None = None  # --sweep-perturb: one point per perturbation, beside an unperturbed one
    cluster: str | None = None  # None: the local worker pool; "ray:local", "ray://HOST:PORT", ...
    ray_cpus_per_worker: float = 1.0
    ray_memory_mb: float | None = None
    max_workers: int | None = None
    fit_state: bool = False  # --fit-state

    def exec_options(self) -> Any:
        """The executor for this run, checked (a Ray option without --cluster is an error, not ignored)."""
        return exec_options(
            self.cluster,
            self.workers,
            self.ray_cpus_per_worker,
            self.ray_memory_mb,
            self.max_workers,
            self.quiet,
        )

    @property
    def single(self) -> bool:
        """One point, not a sweep: the JSON holds that run itself instead of {"runs": [...]}."""
        return len(self.requests()) == 1 and not self.sweep_latency and not self.sweep_trigger

    def requests(self) -> list[Any]:
        """The points to run (strategy x trigger x latency), every option checked first: a bad value
        is a ConfigError naming its flag before any episode runs."""
        from hotloop.closedloop.eval_run import EvalRequest, check_chunk_options
        from hotloop.closedloop.latency import parse_latency
        from hotloop.errors import ConfigError
        from hotloop.realtime.strategies import default_strategies
        from hotloop.sim.tasks import check_task
        from hotloop.sim.tasks.gym_task import parse_task_kwargs
        from hotloop.targets import ARTIFACT_ENTRY, check_cap, find_target

        check_cap(self.memory_cap_mb)  # the flag's own bounds first, whatever the target
        names = [s.strip() for item in self.strategy for s in item.split(",") if s.strip()]
        if not names:
            raise ConfigError(
                f"--strategy {','.join(self.strategy)!r} names no strategy; use sync, chunk, async or ensemble"
            )
        registry = default_strategies()
        for name in names:
            registry.get(name)
        check_task(self.task)
        parse_task_kwargs(self.task_kwargs)
        if find_target(self.target) is not ARTIFACT_ENTRY and self.memory_cap_mb is not None:
            raise ConfigError(
                f"--memory-cap-mb caps a compiled artifact's engine; {self.target!r} is not one: drop the flag"
            )
        if self.sweep_latency is not None and self.latency is not None:
            raise ConfigError(
                f"--latency {self.latency} and --sweep-latency {self.sweep_latency} both given; the sweep sets the "
                "latency of each point: drop one"
            )
        latencies = (
            [f"fixed:{ms:g}" for ms in _parse_sweep(self.sweep_latency)]
            if self.sweep_latency is not None
            else [self.latency or "measured"]
        )
        for spec in latencies:
            parse_latency(spec)  # bad specs and files fail before any episode runs
        _check_realtime_options(
            self.blend,
            self.fallback,
            self.deadline_ms,
            self.guidance_weight,
            names,
            self.ensemble_coeff,
            self.draft_tolerance,
        )
        if self.pipeline is not None:
            from hotloop.perception.pipeline import parse_pipeline

            parse_pipeline(self.pipeline)
        if self.sweep_trigger is not None and self.trigger_remaining is not None:
            raise ConfigError(
                f"--trigger-remaining {self.trigger_remaining} and --sweep-trigger {self.sweep_trigger} both given; the "
                "sweep sets the trigger of each point: drop one"
            )
        triggers: list[int | None] = [self.trigger_remaining]
        if self.sweep_trigger is not None:
            triggers = list(_parse_triggers(self.sweep_trigger))
        for k in triggers:
            flag = "--sweep-trigger" if self.sweep_trigger is not None else "--trigger-remaining"
            check_chunk_options(self.target, self.execute_steps, k, flag)  # the policy's own range, first
            _check_strategy_options(
                names,
                self.execute_steps,
                k,
                self.guidance_weight,
                trigger_flag=flag,
                ensemble_coeff=self.ensemble_coeff,
                draft_tolerance=self.draft_tolerance,
            )
        check_difficulty(self.task, self.difficulty)
        readers = trigger_readers(names)
        students = self._student_readers(names)
        perturbs = _perturb_points(self.perturb, self.sweep_perturb)
        requests = [
            EvalRequest(
                target=self.target,
                task=self.task,
                task_kwargs=self.task_kwargs,
                difficulty=self.difficulty,
                strategy=name,
                latency=spec,
                episodes=self.episodes,
                seed=self.seed,
                workers=self.workers,
                execute_steps=self.execute_steps,
                trigger_remaining=k if name in readers else None,
                num_steps=self.num_steps,
                blend=self.blend,
                fallback=self.fallback,
                deadline_ms=self.deadline_ms,
                guidance_weight=self.guidance_weight,
                pipeline=self.pipeline,
                memory_cap_mb=self.memory_cap_mb,
                ensemble_coeff=self.ensemble_coeff,
                draft_tolerance=self.draft_tolerance,
                draft_from=str(self.draft_from) if name in students else None,
                perturb=perturb,
                fit_state=self.fit_state,
            )
            for name in names
            for k in (triggers if name in readers else [None])
            for spec in latencies
            for perturb in perturbs
        ]  # built first: their checks run before any episode
        return requests

    def _student_readers(self, names: list[str]) -> set[str]:
        """The strategies among `names` that `--draft-from` acts on (draft), once the student is checked as far
        as it can be without its teacher (`hotloop.runtime.draft_student.read_student`; the rest when the
        policy loads, still before any episode); empty without --draft-from. A list with no such strategy is
        refused, as any option no chosen strategy reads."""
        if self.draft_from is None:
            return set()
        from hotloop.errors import ConfigError
        from hotloop.runtime.draft_student import read_student

        users = student_readers(names)
        if not users:
            raise ConfigError(
                f"--draft-from {self.draft_from} does nothing with --strategy {','.join(names)}; it is for draft: "
                "drop it or add that strategy"
            )
        read_student(self.draft_from)
        return users


def exec_options(
    cluster: str | None,
    workers: int,
    cpus_per_worker: float,
    memory_mb: float | None,
    max_workers: int | None,
    quiet: bool,
) -> Any:
    """`ExecOptions` from the command's flags, each checked against the others."""
    import math

    from hotloop.closedloop.execution import ExecOptions
    from hotloop.errors import ConfigError

    if cluster is None:
        for flag, value, default in (
            ("--ray-cpus-per-worker", cpus_per_worker, 1.0),
            ("--ray-memory-mb", memory_mb, None),
            ("--max-workers", max_workers, None),
        ):
            if value != default:
                raise ConfigError(
                    f"{flag} {value:g} sizes Ray workers; add --cluster ray:local (or ray://HOST:PORT) or drop it"
                )
    else:
        from hotloop.cluster.ray_executor import parse_cluster

        parse_cluster(cluster)
        if not (math.isfinite(cpus_per_worker) and cpus_per_worker > 0):
            raise ConfigError(
                f"--ray-cpus-per-worker {cpus_per_worker:g}: give a positive number of CPUs, e.g. 1"
            )
        if memory_mb is not None and not (math.isfinite(memory_mb) and memory_mb > 0):
            raise ConfigError(f"--ray-memory-mb {memory_mb:g}: give a positive number of MiB, e.g. 2048")
        if max_workers is not None and max_workers < 1:
            raise ConfigError(f"--max-workers {max_workers}: give at least 1")
    return ExecOptions(
        workers=workers,
        cluster=cluster,
        cpus_per_worker=cpus_per_worker,
        memory_mb=memory_mb,
        max_workers=max_workers,
        progress=not quiet,
    )


def _run_on_cluster(
    requests: list[Any], options: Any
) -> tuple[list[dict[str, Any]], bool, bool, dict[str, Any]]:
    """Every point at once on the cluster; returns (runs in request order, interrupted, some refused, the
    executor's summary)."""
    from hotloop.closedloop.cells import Cell
    from hotloop.closedloop.eval_run import assemble_run
    from hotloop.closedloop.executors import episodes_of, execute

    cells = [Cell.of(r) for r in requests]
    rows: dict[str, list[dict[str, Any]]] = {}
    result = execute(
        cells,
        episodes_of(cells, set(), options),
        lambda row: rows.setdefault(row["cell"], []).append(row),
        options,
    )
    runs = []
    for cell in cells:
        got = sorted(rows.get(cell.key, []), key=lambda r: r["seed"])
        wall = sum(r.get("episode_s") or 0.0 for r in got)
        runs.append(
            assemble_run(
                cell.request, [r["record"] for r in got], len(got) < len(cell.seeds), wall, options.threads()
            )
        )
    return runs, result.interrupted, bool(result.refused), result.summary


def run_sweep(sweep: EvalSweep) -> None:
    """Run every point of `sweep`; exit codes as `hotloop eval` documents them."""
    from hotloop.closedloop.eval_run import plot_sweep, print_table, run_eval, run_label
    from hotloop.closedloop.execution import print_summary
    from hotloop.interrupts import first_interrupt_only
    from hotloop.io import atomic_write_json, check_output_file, check_plot_file

    requests = sweep.requests()
    options = sweep.exec_options()
    check_output_file(sweep.json_path, "--json")
    check_plot_file(sweep.plot, "--plot", {"--json": sweep.json_path})
    from hotloop.closedloop.baseline import EvalBaseline

    against = EvalBaseline.check(sweep, requests)  # before any episode, like every other option
    runs: list[dict[str, Any]] = []
    interrupted = False

    single = len(requests) == 1 and not sweep.sweep_latency and not sweep.sweep_trigger  # the file's shape
    single = single and not sweep.sweep_perturb

    write_failed: list[str] = []

    executor: dict[str, Any] = {}  # the executor's cost summary, once every point ran

    def written() -> dict[str, Any]:
        return runs[0] if single else {"runs": runs, **({"executor": executor} if executor else {})}

    def write() -> None:
        if sweep.json_path is None or not runs:
            return
        try:
            atomic_write_json(sweep.json_path, written())
        except OSError as e:  # checked writable at the start, lost since: keep evaluating, show the table
            if not write_failed:
                typer.echo(
                    f"error: cannot write --json {sweep.json_path} ({e.strerror or e}); the evaluation goes on "
                    "and the table shows its results",
                    err=True,
                )
            write_failed.append(str(e))

    # The first Ctrl-C stops the point in progress; later presses cannot cut short the save below.
    refused = False
    with first_interrupt_only():
        if options.cluster is not None:
            runs, interrupted, refused, summary = _run_on_cluster(requests, options)
        else:
            import socket

            from hotloop.closedloop.execution import ExecStats
            from hotloop.closedloop.pool import WorkerPool

            total = sum(r.episodes for r in requests)
            stats = ExecStats(total, "local", slots=max(1, min(sweep.workers, total)))
            node = socket.gethostname()

            def on_timing(timing: dict[str, Any]) -> None:
                stats.timed({**timing, "node": node}, timing.get("slot"))

            with WorkerPool(sweep.workers) as pool:  # one pool for every point: each worker builds once
                for request in requests:
                    result = run_eval(request, progress=not sweep.quiet, pool=pool, on_timing=on_timing)
                    runs.append(result)
                    write()  # after every point: Ctrl-C later keeps what finished
                    if result["interrupted"]:
                        interrupted = True
                        break
            summary = stats.summary(interrupted)
        if not sweep.quiet:  # --quiet: a clean run writes nothing on stderr (the JSON holds it)
            print_summary(summary)
        executor.update(summary)
        write()
        print_table(runs)
        points = against.compare(runs)
        if points and sweep.json_path is not None and not write_failed:
            atomic_write_json(
                sweep.json_path, {**written(), "baseline_comparison": [p.to_dict() for p in points]}
            )
        if runs and not interrupted:
            against.record(runs[0] if single else {"runs": runs})
        if sweep.plot is not None and runs:
            plot_sweep(runs, sweep.plot)
            typer.echo(f"wrote {sweep.plot}")
        if sweep.pipeline is not None and runs:
            from hotloop.perception.pipeline import report_budgets

            for path in report_budgets(runs, sweep.plot):
                typer.echo(f"wrote {path}")
        if sweep.json_path is not None and runs and not write_failed:
            typer.echo(f"wrote {sweep.json_path}")
    if interrupted:
        typer.echo("interrupted: wrote the episodes that finished", err=True)
        raise typer.Exit(130)
    if write_failed or refused:
        raise typer.Exit(1)
    crashed = [(r, s) for r in runs for s in r["error_seeds"]]
    if crashed:
        first_run, first_seed = crashed[0]
        reason = next(e["error"] for e in first_run["per_episode"] if e["seed"] == first_seed)
        reason = reason.strip().splitlines()[-1] if reason.strip() else "no message"
        if len(runs) == 1:
            where = "seeds " + ", ".join(str(s) for _, s in crashed[:10])
        else:  # name the point too: the same seed runs once per point
            where = ", ".join(f"{run_label(r)} {r['latency']['spec']} seed {s}" for r, s in crashed[:10])
        where += ", ..." if len(crashed) > 10 else ""
        typer.echo(
            f"error: {len(crashed)} episode(s) crashed ({where}); they are errors, not policy "
            f"failures, and left out of the success rate. First: {reason}",
            err=True,
        )
        raise typer.Exit(1)
    against.finish(points)  # exit 3 on a success drop with --fail-on-regression


def _perturb_points(perturb: str | None, sweep: str | None) -> list[str | None]:
    """The perturbation of each point: --perturb's for all, or with --sweep-perturb an unperturbed point
    (or --perturb's) followed by one per swept perturbation (on top of --perturb's)."""
    from hotloop.errors import ConfigError
    from hotloop.sim.perturb import parse_perturb, sweep_points

    if perturb is not None:
        parse_perturb(perturb)
    if sweep is None:
        return [perturb]
    points = sweep_points(sweep)
    if perturb is not None:
        clash = {p.name for p in parse_perturb(perturb)} & {p.split(":")[0] for p in points}
        if clash:
            raise ConfigError(f"--perturb and --sweep-perturb both set {', '.join(sorted(clash))}; drop one")
        points = [f"{perturb},{p}" for p in points]
    return [perturb, *points]
