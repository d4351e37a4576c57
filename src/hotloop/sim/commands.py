"""The sim commands: `hotloop record`, `hotloop eval`, `hotloop train-demo`.

Module-level imports stay light (typer only); MuJoCo and torch load inside the commands.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from hotloop.cli_errors import user_errors


def _parse_sweep(text: str) -> list[float]:
    import math

    from hotloop.errors import ConfigError

    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--sweep-latency {text!r}: write milliseconds separated by commas, e.g. 0,50,100,200"
        ) from None
    if not values or any(not (math.isfinite(v) and v >= 0) for v in values):
        raise ConfigError(f"--sweep-latency {text!r}: need one or more finite, non-negative milliseconds")
    return values


def _parse_triggers(text: str) -> list[int]:
    from hotloop.errors import ConfigError

    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--sweep-trigger {text!r}: write whole numbers of actions separated by commas, e.g. 8,10,12,14"
        ) from None
    if not values or any(v < 0 for v in values):
        raise ConfigError(f"--sweep-trigger {text!r}: need one or more non-negative numbers of actions")
    return list(dict.fromkeys(values))  # each once, in the order given


def _check_difficulty(task: str, difficulty: str | None) -> None:
    """`--difficulty` checked against the task's levels now, not in a worker after start-up."""
    from hotloop.errors import ConfigError
    from hotloop.sim.tasks import default_tasks

    registry = default_tasks()
    if difficulty is None or task not in registry:  # other tasks check their own options when made
        return
    levels = registry.get(task).difficulties
    if not levels:
        raise ConfigError(f"task {task!r} has no difficulty levels; drop --difficulty")
    if difficulty not in levels:
        raise ConfigError(f"--difficulty {difficulty!r} is not a level of {task}; use {', '.join(levels)}")


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


def _check_strategy_options(
    names: list[str],
    execute_steps: int | None,
    trigger_remaining: int | None,
    guidance_weight: float | None = None,
    trigger_flag: str = "--trigger-remaining",
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
    )
    horizon = 2 + max(int(v) for v in (execute_steps, trigger_remaining, 0) if v is not None)
    for flag, field, value, other in options:
        if value is None:
            continue
        users = _option_users(names, field, value, other, horizon)
        if not users:
            readers = {
                "--execute-steps": "chunk",
                trigger_flag: "async, rtc, rtc-prefix or rtc-soft",
            }.get(flag, "rtc")
            raise ConfigError(
                f"{flag} {value:g} does nothing with --strategy {','.join(names)}; it is for {readers}: "
                f"drop it or add that strategy"
            )


def _check_realtime_options(
    blend: str, fallback: str, deadline_ms: float | None, guidance_weight: float | None
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


def check_fallback_target(engine: str, flag: str = "--fallback") -> None:
    """The smaller engine of `--fallback engine:TARGET` must be a known target (checked before any work)."""
    from hotloop.errors import ConfigError, UnknownNameError
    from hotloop.targets import find_target

    try:
        find_target(engine)
    except UnknownNameError as e:
        raise ConfigError(f"{flag} engine:{engine}: {e}") from None


def record_cmd(
    task: Annotated[
        str,
        typer.Option(help="conveyor-pick, reach, gym:ENV_ID (any gymnasium env) or a hotloop.tasks plugin"),
    ],
    task_kwargs: Annotated[
        str | None,
        typer.Option(
            help="JSON keyword arguments for gym:/plugin tasks, e.g. '{\"max_episode_steps\": 100}'"
        ),
    ] = None,
    episodes: Annotated[int, typer.Option(help="number of expert episodes")] = 50,
    out: Annotated[
        Path, typer.Option("-o", "--out", help="new dataset directory (LeRobot v3 layout)")
    ] = Path("data/episodes"),
    difficulty: Annotated[str | None, typer.Option(help="easy, medium or hard (conveyor-pick)")] = None,
    seed: Annotated[int, typer.Option(help="seed of the first episode; episode i uses seed + i")] = 0,
    action_noise: Annotated[
        float, typer.Option(help="std (m) of noise on the executed xyz target; labels stay clean (DART)")
    ] = 0.0,
    recovery_starts: Annotated[
        float, typer.Option(help="fraction of episodes started in a recovery state (box past the gripper)")
    ] = 0.0,
    views: Annotated[
        str | None,
        typer.Option(
            help="camera views of a built-in task, comma-separated, e.g. top,wrist (what "
            "demo:conveyor-vision reads; default: the task's own, top)"
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bar")] = False,
) -> None:
    """Record scripted-expert episodes of a task to DIR (parquet + meta/info.json; see docs/dataset.md)."""
    from hotloop.errors import ConfigError
    from hotloop.interrupts import stop_at_next_boundary
    from hotloop.io import check_output_dir
    from hotloop.progress import Progress
    from hotloop.sim.recorder import check_record_options, record
    from hotloop.sim.tasks import check_task
    from hotloop.sim.tasks.gym_task import parse_task_kwargs

    check_task(task)
    parse_task_kwargs(task_kwargs)
    if episodes < 1:
        raise ConfigError(f"--episodes must be >= 1 (got {episodes})")
    check_record_options(seed=seed, action_noise=action_noise, recovery_starts=recovery_starts)
    _check_difficulty(task, difficulty)
    view_keys = _record_views(task, views)
    check_output_dir(out, "-o", must_be_empty=True)
    wins = 0

    def tick(i: int, ok: bool) -> None:
        nonlocal wins
        wins += int(ok)
        bar.update(1, f"expert success {wins}/{i + 1}")

    # Ctrl-C stops after the episode in progress and writes the finished ones (a dataset is written whole
    # at the end: an exception there would lose every episode).
    with (
        stop_at_next_boundary("episode") as stop,
        Progress(episodes, f"record {task}", "ep", enabled=not quiet) as bar,
    ):
        result = record(
            task,
            episodes,
            out,
            difficulty=difficulty,
            seed=seed,
            action_noise=action_noise,
            recovery_starts=recovery_starts,
            progress=tick,
            stop=stop,
            task_kwargs=task_kwargs,
            views=view_keys,
        )
    typer.echo(
        f"wrote {result['episodes']} episodes ({result['frames']} frames) to {out}; "
        f"expert success {result['successes']}/{result['episodes']}"
    )
    if result["stopped"]:
        typer.echo(f"interrupted: wrote the {result['episodes']} episodes that finished", err=True)
        raise typer.Exit(130)


def _record_views(task: str, views: str | None) -> tuple[str, ...] | None:
    """`--views top,wrist` -> checked view names; only built-in (gantry) tasks render named views."""
    if views is None:
        return None
    from hotloop.errors import ConfigError
    from hotloop.sim.tasks import default_tasks
    from hotloop.sim.tasks.gantry import check_views

    if task not in default_tasks():
        raise ConfigError(
            f"--views is for the built-in tasks ({', '.join(default_tasks())}); {task} renders its own"
        )
    return check_views([v.strip() for v in views.split(",") if v.strip()], flag="--views")


def eval_cmd(
    target: Annotated[
        str, typer.Argument(help="a policy target, e.g. demo:conveyor (see `hotloop targets`)")
    ],
    task: Annotated[
        str,
        typer.Option(help="conveyor-pick, reach, gym:ENV_ID (any gymnasium env) or a hotloop.tasks plugin"),
    ] = "conveyor-pick",
    task_kwargs: Annotated[
        str | None,
        typer.Option(
            help="JSON keyword arguments for gym:/plugin tasks, e.g. '{\"max_episode_steps\": 100}'"
        ),
    ] = None,
    difficulty: Annotated[str | None, typer.Option(help="easy, medium or hard (conveyor-pick)")] = None,
    strategy: Annotated[
        list[str],
        typer.Option(
            help="sync, chunk, async, rtc, rtc-prefix or rtc-soft; repeat or comma-separate for several"
        ),
    ] = ["sync"],  # noqa: B006
    latency: Annotated[
        str | None,
        typer.Option(help="measured (the default), fixed:MS, or a bench JSON (replay:PATH)"),
    ] = None,
    sweep_latency: Annotated[
        str | None, typer.Option(help="fixed latencies in ms to sweep, e.g. 0,50,100,200,300")
    ] = None,
    episodes: Annotated[int, typer.Option(help="episodes per (strategy, latency) point")] = 50,
    seed: Annotated[int, typer.Option(help="episode i uses seed + i")] = 0,
    workers: Annotated[int, typer.Option(help="worker processes (0 = in this process)")] = 2,
    execute_steps: Annotated[int | None, typer.Option(help="chunk: actions executed per inference")] = None,
    trigger_remaining: Annotated[
        int | None,
        typer.Option(
            help="async and rtc modes: start the next inference when this many actions remain "
            "(default: half the chunk; rtc-soft: chunk - 2, a new plan every max(delay, 2) periods)"
        ),
    ] = None,
    sweep_trigger: Annotated[
        str | None,
        typer.Option(
            help="--trigger-remaining values to sweep, e.g. 8,10,12,14 (async and rtc modes; the other "
            "strategies run once)"
        ),
    ] = None,
    steps: Annotated[int | None, typer.Option(help="flow-matching steps (VLA targets)")] = None,
    blend: Annotated[
        str, typer.Option(help="non-RTC chunk blending: latest, average or ensemble")
    ] = "latest",
    fallback: Annotated[
        str,
        typer.Option(
            help="on a missed deadline or failed inference: hold, continue, stop, or engine:TARGET "
            "(a smaller policy, e.g. engine:expert:scripted)"
        ),
    ] = "hold",
    deadline_ms: Annotated[
        float | None, typer.Option(help="inference deadline (default: from the chunk and control rate)")
    ] = None,
    guidance_weight: Annotated[
        float | None, typer.Option(help="rtc: clip (beta) of the guidance weight")
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write results (with per-episode records)")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(help="PNG of success rate against latency per strategy")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bar")] = False,
    pipeline: Annotated[
        str | None,
        typer.Option(
            help="conveyor-pick layered chain: detector or truth[:perception=MS,control=MS,predict=1]"
        ),
    ] = None,
    memory_cap_mb: Annotated[
        float | None,
        typer.Option(help="an artifact engine's resident-memory cap in MiB, checked every inference"),
    ] = None,
) -> None:
    """Closed-loop evaluation: simulated time advances while the policy thinks.

    The table goes to stdout, progress and errors to stderr. Exit code 0 when every episode ran (whatever
    its outcome), 1 when any episode crashed (counted apart from failures), 2 for bad input, 130 when
    interrupted (the finished episodes are written first).
    """
    from hotloop.errors import ConfigError
    from hotloop.interrupts import first_interrupt_only
    from hotloop.io import atomic_write_json, check_output_file
    from hotloop.realtime.strategies import default_strategies
    from hotloop.sim.eval_run import EvalRequest, plot_sweep, print_table, run_eval, run_label
    from hotloop.sim.latency import parse_latency
    from hotloop.sim.tasks import check_task
    from hotloop.sim.tasks.gym_task import parse_task_kwargs
    from hotloop.targets import ARTIFACT_ENTRY, find_target

    names = [s.strip() for item in strategy for s in item.split(",") if s.strip()]
    if not names:
        raise ConfigError(f"--strategy {','.join(strategy)!r} names no strategy; use sync, chunk or async")
    registry = default_strategies()
    for name in names:
        registry.get(name)
    check_task(task)
    parse_task_kwargs(task_kwargs)
    if find_target(target) is not ARTIFACT_ENTRY and memory_cap_mb is not None:
        raise ConfigError(
            f"--memory-cap-mb caps a compiled artifact's engine; {target!r} is not one: drop the flag"
        )
    if sweep_latency is not None and latency is not None:
        raise ConfigError(
            f"--latency {latency} and --sweep-latency {sweep_latency} both given; the sweep sets the "
            "latency of each point: drop one"
        )
    latencies = (
        [f"fixed:{ms:g}" for ms in _parse_sweep(sweep_latency)] if sweep_latency else [latency or "measured"]
    )
    for spec in latencies:
        parse_latency(spec)  # bad specs and files fail before any episode runs
    _check_realtime_options(blend, fallback, deadline_ms, guidance_weight)
    if pipeline is not None:
        from hotloop.sim.perception_pipeline import parse_pipeline

        parse_pipeline(pipeline)
    if sweep_trigger is not None and trigger_remaining is not None:
        raise ConfigError(
            f"--trigger-remaining {trigger_remaining} and --sweep-trigger {sweep_trigger} both given; the "
            "sweep sets the trigger of each point: drop one"
        )
    triggers: list[int | None] = [trigger_remaining]
    if sweep_trigger is not None:
        triggers = list(_parse_triggers(sweep_trigger))
    for k in triggers:
        flag = "--sweep-trigger" if sweep_trigger is not None else "--trigger-remaining"
        _check_strategy_options(names, execute_steps, k, guidance_weight, trigger_flag=flag)
    _check_difficulty(task, difficulty)
    readers = trigger_readers(names)
    requests = [
        EvalRequest(
            target=target,
            task=task,
            task_kwargs=task_kwargs,
            difficulty=difficulty,
            strategy=name,
            latency=spec,
            episodes=episodes,
            seed=seed,
            workers=workers,
            execute_steps=execute_steps,
            trigger_remaining=k if name in readers else None,
            num_steps=steps,
            blend=blend,
            fallback=fallback,
            deadline_ms=deadline_ms,
            guidance_weight=guidance_weight,
            pipeline=pipeline,
            memory_cap_mb=memory_cap_mb,
        )
        for name in names
        for k in (triggers if name in readers else [None])
        for spec in latencies
    ]  # built first: their checks run before any episode
    check_output_file(json_path, "--json")
    check_output_file(plot, "--plot")
    runs: list[dict[str, Any]] = []
    interrupted = False

    single = len(requests) == 1 and not sweep_latency and not sweep_trigger  # the file's shape

    write_failed: list[str] = []

    def write() -> None:
        if json_path is None or not runs:
            return
        try:
            atomic_write_json(json_path, runs[0] if single else {"runs": runs})
        except OSError as e:  # checked writable at the start, lost since: keep evaluating, show the table
            if not write_failed:
                typer.echo(
                    f"error: cannot write --json {json_path} ({e.strerror or e}); the evaluation goes on "
                    "and the table shows its results",
                    err=True,
                )
            write_failed.append(str(e))

    # The first Ctrl-C stops the point in progress; later presses cannot cut short the save below.
    with first_interrupt_only():
        for request in requests:
            result = run_eval(request, progress=not quiet)
            runs.append(result)
            write()  # after every point: Ctrl-C later keeps what finished
            if result["interrupted"]:
                interrupted = True
                break
        print_table(runs)
        if plot is not None and runs:
            plot_sweep(runs, plot)
            typer.echo(f"wrote {plot}")
        if pipeline is not None and runs:
            from hotloop.sim.perception_pipeline import report_budgets

            for path in report_budgets(runs, plot):
                typer.echo(f"wrote {path}")
        if json_path is not None and runs and not write_failed:
            typer.echo(f"wrote {json_path}")
    if interrupted:
        typer.echo("interrupted: wrote the episodes that finished", err=True)
        raise typer.Exit(130)
    if write_failed:
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


def train_demo_cmd(
    out: Annotated[Path, typer.Option("-o", "--out", help="output folder")] = Path("runs/train-demo"),
    steps: Annotated[int | None, typer.Option(help="optimizer steps")] = None,
    episodes: Annotated[int | None, typer.Option(help="expert episodes to record")] = None,
    dataset: Annotated[
        Path | None, typer.Option(help="use this recorded dataset instead of recording")
    ] = None,
    seed: Annotated[int, typer.Option(help="training seed")] = 0,
    threads: Annotated[
        int | None, typer.Option(help="torch threads (1 keeps runs repeatable everywhere)")
    ] = None,
    ship: Annotated[bool, typer.Option("--ship", help="copy the result into the package assets")] = False,
    variant: Annotated[
        str,
        typer.Option(help="state: demo:conveyor (box pose in the state); vision: demo:conveyor-vision"),
    ] = "state",
    action_prefix_prob: Annotated[
        float | None,
        typer.Option(help="state variant: fraction of examples trained to continue a given action prefix"),
    ] = None,
    max_action_prefix: Annotated[
        int | None, typer.Option(help="state variant: the longest given prefix (actions)")
    ] = None,
    views: Annotated[
        str | None,
        typer.Option(help="vision variant: camera views to train on, comma-separated (default top,wrist)"),
    ] = None,
) -> None:
    """Train a conveyor-pick demo policy (demo:conveyor, or demo:conveyor-vision) on expert episodes, on CPU."""
    import dataclasses

    from hotloop.errors import ConfigError
    from hotloop.io import check_output_dir

    if variant not in ("state", "vision"):
        raise ConfigError(f"--variant {variant!r} is not known; use state or vision")
    if views is not None and variant != "vision":
        raise ConfigError("--views is for --variant vision (demo:conveyor reads the top view only)")
    view_keys = None
    if views is not None:
        from hotloop.sim.tasks.gantry import check_views

        view_keys = check_views([v.strip() for v in views.split(",") if v.strip()], flag="--views")
    check_output_dir(out, "-o")
    if variant == "vision":
        if action_prefix_prob is not None or max_action_prefix is not None:
            raise ConfigError("--action-prefix-prob / --max-action-prefix are for --variant state; drop them")
        from hotloop.sim.train_vision_demo import run_from_cli

        run_from_cli(
            out,
            steps=steps,
            episodes=episodes,
            dataset=dataset,
            seed=seed,
            threads=threads,
            ship=ship,
            views=view_keys,
        )
        return
    from hotloop.sim.train_demo import TrainDemoConfig, ship_assets, train_demo

    cfg = TrainDemoConfig(seed=seed)
    updates: dict[str, Any] = {}
    if steps is not None:
        updates["steps"] = steps
    if episodes is not None:
        updates["episodes"] = episodes
    if threads is not None:
        updates["threads"] = threads
    if action_prefix_prob is not None:
        updates["action_prefix_prob"] = action_prefix_prob
    if max_action_prefix is not None:
        updates["max_action_prefix"] = max_action_prefix
    cfg = dataclasses.replace(cfg, **updates)
    summary = train_demo(cfg, out, dataset_dir=dataset)
    tr = summary["training"]
    typer.echo(
        f"trained in {tr['train_s']:.0f} s (recording {tr['record_s']:.0f} s); final loss {tr['final_loss']:.4f}; "
        f"wrote {out} (loss curve {out / 'loss.png'})"
    )
    if ship:
        typer.echo(f"shipped to {ship_assets(out)}")


def add_commands(app: typer.Typer) -> None:
    app.command("record")(user_errors(record_cmd))
    app.command("eval")(user_errors(eval_cmd))
    app.command("train-demo")(user_errors(train_demo_cmd))


if __name__ == "__main__":  # pragma: no cover
    _app = typer.Typer()
    add_commands(_app)
    _app(sys.argv[1:])
