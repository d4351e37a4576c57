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
    from hotloop.errors import ConfigError

    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--sweep-latency {text!r}: write milliseconds separated by commas, e.g. 0,50,100,200"
        ) from None
    if not values or any(v < 0 for v in values):
        raise ConfigError(f"--sweep-latency {text!r}: need one or more non-negative milliseconds")
    return values


def _check_realtime_options(
    blend: str, fallback: str, deadline_ms: float | None, guidance_weight: float | None
) -> None:
    from hotloop.errors import ConfigError
    from hotloop.realtime.blending import BlendConfig
    from hotloop.realtime.strategies import StrategyConfig
    from hotloop.realtime.watchdog import WatchdogConfig

    BlendConfig(blend)
    WatchdogConfig(fallback, deadline_ms)
    if fallback == "engine":
        raise ConfigError(
            "--fallback engine needs a second policy; `hotloop eval` offers hold, continue or stop"
        )
    if guidance_weight is not None:
        StrategyConfig(1, max_guidance_weight=guidance_weight)


def record_cmd(
    task: Annotated[str, typer.Option(help="task name: conveyor-pick or reach")],
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
) -> None:
    """Record scripted-expert episodes of a task to DIR (parquet + meta/info.json; see docs/dataset.md)."""
    from hotloop.errors import ConfigError
    from hotloop.sim.recorder import check_record_options, record
    from hotloop.sim.tasks import default_tasks

    default_tasks().get(task)
    if episodes < 1:
        raise ConfigError(f"--episodes must be >= 1 (got {episodes})")
    check_record_options(seed=seed, action_noise=action_noise, recovery_starts=recovery_starts)
    from tqdm import tqdm

    bar = tqdm(total=episodes, desc=f"record {task}", unit="ep", dynamic_ncols=True)
    result = record(
        task,
        episodes,
        out,
        difficulty=difficulty,
        seed=seed,
        action_noise=action_noise,
        recovery_starts=recovery_starts,
        progress=lambda i, ok: bar.update(1),
    )
    bar.close()
    typer.echo(
        f"wrote {result['episodes']} episodes ({result['frames']} frames) to {out}; "
        f"expert success {result['successes']}/{result['episodes']}"
    )


def eval_cmd(
    target: Annotated[
        str, typer.Argument(help="a policy target, e.g. demo:conveyor (see `hotloop targets`)")
    ],
    task: Annotated[str, typer.Option(help="task name: conveyor-pick or reach")] = "conveyor-pick",
    difficulty: Annotated[str | None, typer.Option(help="easy, medium or hard (conveyor-pick)")] = None,
    strategy: Annotated[
        list[str], typer.Option(help="sync, chunk, async or rtc; repeat or comma-separate for several")
    ] = ["sync"],  # noqa: B006
    latency: Annotated[
        str, typer.Option(help="measured, fixed:MS, or a bench JSON (replay:PATH)")
    ] = "measured",
    sweep_latency: Annotated[
        str | None, typer.Option(help="fixed latencies in ms to sweep, e.g. 0,50,100,200,300")
    ] = None,
    episodes: Annotated[int, typer.Option(help="episodes per (strategy, latency) point")] = 50,
    seed: Annotated[int, typer.Option(help="episode i uses seed + i")] = 0,
    workers: Annotated[int, typer.Option(help="worker processes (0 = in this process)")] = 2,
    execute_steps: Annotated[int | None, typer.Option(help="chunk: actions executed per inference")] = None,
    trigger_remaining: Annotated[
        int | None, typer.Option(help="async: start the next inference when this many actions remain")
    ] = None,
    steps: Annotated[int | None, typer.Option(help="flow-matching steps (VLA targets)")] = None,
    blend: Annotated[
        str, typer.Option(help="non-RTC chunk blending: latest, average or ensemble")
    ] = "latest",
    fallback: Annotated[
        str, typer.Option(help="on a missed deadline or failed inference: hold, continue or stop")
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
) -> None:
    """Closed-loop evaluation: simulated time advances while the policy thinks."""
    from hotloop.io import atomic_write_json
    from hotloop.realtime.strategies import default_strategies
    from hotloop.sim.eval_run import EvalRequest, plot_sweep, print_table, run_eval
    from hotloop.sim.latency import parse_latency
    from hotloop.sim.tasks import default_tasks
    from hotloop.targets import find_target

    names = [s.strip() for item in strategy for s in item.split(",") if s.strip()]
    registry = default_strategies()
    for name in names:
        registry.get(name)
    default_tasks().get(task)
    find_target(target)
    latencies = [f"fixed:{ms:g}" for ms in _parse_sweep(sweep_latency)] if sweep_latency else [latency]
    for spec in latencies:
        parse_latency(spec)  # bad specs and files fail before any episode runs
    _check_realtime_options(blend, fallback, deadline_ms, guidance_weight)
    if pipeline is not None:
        from hotloop.sim.perception_pipeline import parse_pipeline

        parse_pipeline(pipeline)
    if episodes < 1:
        from hotloop.errors import ConfigError

        raise ConfigError(f"--episodes must be >= 1 (got {episodes})")
    runs: list[dict[str, Any]] = []
    interrupted = False

    single = len(names) == 1 and len(latencies) == 1 and not sweep_latency  # the file's shape: by request

    def write() -> None:
        if json_path is not None and runs:
            atomic_write_json(json_path, runs[0] if single else {"runs": runs})

    for name in names:
        for spec in latencies:
            request = EvalRequest(
                target=target,
                task=task,
                difficulty=difficulty,
                strategy=name,
                latency=spec,
                episodes=episodes,
                seed=seed,
                workers=workers,
                execute_steps=execute_steps,
                trigger_remaining=trigger_remaining,
                num_steps=steps,
                blend=blend,
                fallback=fallback,
                deadline_ms=deadline_ms,
                guidance_weight=guidance_weight,
                pipeline=pipeline,
            )
            result = run_eval(request, progress=not quiet)
            runs.append(result)
            write()  # after every point: Ctrl-C later keeps what finished
            if result["interrupted"]:
                interrupted = True
                break
        if interrupted:
            break
    print_table(runs)
    if plot is not None and runs:
        plot_sweep(runs, plot)
        typer.echo(f"wrote {plot}")
    if pipeline is not None and runs:
        from hotloop.sim.perception_pipeline import report_budgets

        for path in report_budgets(runs, plot):
            typer.echo(f"wrote {path}")
    if json_path is not None:
        typer.echo(f"wrote {json_path}")
    if interrupted:
        typer.echo("interrupted: wrote the episodes that finished", err=True)
        raise typer.Exit(130)


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
) -> None:
    """Train a conveyor-pick demo policy (demo:conveyor, or demo:conveyor-vision) on expert episodes, on CPU."""
    import dataclasses

    from hotloop.errors import ConfigError

    if variant not in ("state", "vision"):
        raise ConfigError(f"--variant {variant!r} is not known; use state or vision")
    if variant == "vision":
        from hotloop.sim.train_vision_demo import run_from_cli

        run_from_cli(
            out, steps=steps, episodes=episodes, dataset=dataset, seed=seed, threads=threads, ship=ship
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
