"""`hotloop eval`: closed loop on the simulated world (registered on the app by `add_commands`).

Module-level imports stay light (typer only); MuJoCo and torch load inside the commands.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from hotloop.cli_errors import user_errors
from hotloop.cli_options import Difficulty, FlowSteps, ForceJudge, History, Overwrite, Quiet, Task, TaskKwargs

CLUSTER_OPTION = typer.Option(
    help="run on Ray: ray:local (start one here), ray://HOST:PORT, ray:HOST:PORT, or ray (RAY_ADDRESS); "
    "default: the local worker pool (docs/sweep.md)"
)
RAY_CPUS_OPTION = typer.Option(help="CPUs each Ray worker holds (its torch threads)")
RAY_MEMORY_OPTION = typer.Option(help="memory each Ray worker reserves, MiB (scheduling)")
MAX_WORKERS_OPTION = typer.Option(help="at most this many Ray workers (default: as many as the CPUs hold)")


def eval_cmd(
    target: Annotated[
        str, typer.Argument(help="a policy target, e.g. demo:conveyor (see `hotloop targets`)")
    ],
    task: Task = "conveyor-pick",
    task_kwargs: TaskKwargs = None,
    difficulty: Difficulty = None,
    strategy: Annotated[
        list[str],
        typer.Option(
            help="sync, chunk, async, rtc, rtc-prefix, rtc-soft, ensemble (ACT's temporal ensembling), "
            "draft (speculative chunks checked by the model), lerobot-async or lerobot-rtc-soft (LeRobot's stock "
            "async client); repeat or comma-separate for several"
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
    steps: FlowSteps = None,
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
    ensemble_coeff: Annotated[
        float | None,
        typer.Option(
            help="ensemble: m in the weights exp(-m i), i = 0 the oldest prediction (default: the "
            "policy's own, an ACT checkpoint's temporal_ensemble_coeff, else 0.01)"
        ),
    ] = None,
    draft_tolerance: Annotated[
        float | None,
        typer.Option(
            help="draft: how far (normalized action units, the largest coordinate of a row) the model's "
            "prediction may move a draft row that it still accepts (default 0.1)"
        ),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write results (with per-episode records)")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(help="PNG of success rate against latency per strategy")
    ] = None,
    quiet: Quiet = False,
    pipeline: Annotated[
        str | None,
        typer.Option(
            help="conveyor-pick layered chain: detector or truth[:perception=MS,control=MS,predict=1]; "
            "detector:model=learned[,resolution=N] for the learned box detector"
        ),
    ] = None,
    memory_cap_mb: Annotated[
        float | None,
        typer.Option(help="an artifact engine's resident-memory cap in MiB, checked every inference"),
    ] = None,
    perturb: Annotated[
        str | None,
        typer.Option(
            help="perturbations, NAME:VALUE,... (lighting, camera-shift, camera-rotate, box-colour, box-size, "
            "belt-speed, distractors, occlusion, image-noise, blur, drop-frames, state-noise, latency-jitter; "
            "see docs/perception.md)"
        ),
    ] = None,
    sweep_perturb: Annotated[
        str | None,
        typer.Option(help="one point per perturbation NAME:VALUE,... beside an unperturbed point"),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            help="compare with an earlier eval: a JSON or a history run (7, its id, latest): success paired "
            "by seed (McNemar's exact test), task time, jerk and chunk jump as paired differences"
        ),
    ] = None,
    fail_on_regression: Annotated[
        bool,
        typer.Option(
            "--fail-on-regression", help="with --baseline: exit 3 when a point's success interval is below 0"
        ),
    ] = False,
    max_load: Annotated[
        float,
        typer.Option(
            envvar="HOTLOOP_MAX_LOAD",
            help="with --fail-on-regression at --latency measured: CPUs of other work above which the gate "
            "does not judge (exit 2)",
        ),
    ] = 0.5,
    force: ForceJudge = False,
    history: History = None,
    cluster: Annotated[str | None, CLUSTER_OPTION] = None,
    ray_cpus_per_worker: Annotated[float, RAY_CPUS_OPTION] = 1.0,
    ray_memory_mb: Annotated[float | None, RAY_MEMORY_OPTION] = None,
    max_workers: Annotated[int | None, MAX_WORKERS_OPTION] = None,
    fit_state: Annotated[
        bool,
        typer.Option(
            "--fit-state",
            help="run a trained policy whose state width differs from the task's (zero-padded or cut; said on "
            "stderr); without it such a pair is refused",
        ),
    ] = False,
) -> None:
    """Closed-loop evaluation: simulated time advances while the policy thinks.

    The table goes to stdout, progress and errors to stderr. Exit code 0 when every episode ran (whatever
    its outcome), 1 when any episode crashed (counted apart from failures), 2 for bad input, 130 when
    interrupted (the finished episodes are written first), 3 with --fail-on-regression when success
    fell against --baseline.
    """
    from hotloop.closedloop.sweep import EvalSweep, run_sweep

    run_sweep(
        EvalSweep(
            target=target,
            task=task,
            task_kwargs=task_kwargs,
            difficulty=difficulty,
            strategy=tuple(strategy),
            latency=latency,
            sweep_latency=sweep_latency,
            episodes=episodes,
            seed=seed,
            workers=workers,
            execute_steps=execute_steps,
            trigger_remaining=trigger_remaining,
            sweep_trigger=sweep_trigger,
            num_steps=steps,
            blend=blend,
            fallback=fallback,
            deadline_ms=deadline_ms,
            guidance_weight=guidance_weight,
            ensemble_coeff=ensemble_coeff,
            draft_tolerance=draft_tolerance,
            json_path=json_path,
            plot=plot,
            quiet=quiet,
            pipeline=pipeline,
            memory_cap_mb=memory_cap_mb,
            perturb=perturb,
            sweep_perturb=sweep_perturb,
            baseline=baseline,
            fail_on_regression=fail_on_regression,
            max_load=max_load,
            force=force,
            history=history,
            cluster=cluster,
            ray_cpus_per_worker=ray_cpus_per_worker,
            ray_memory_mb=ray_memory_mb,
            max_workers=max_workers,
            fit_state=fit_state,
        )
    )


def sweep_cmd(
    spec: Annotated[Path, typer.Argument(help="the grid: a .yaml or .json file (docs/sweep.md)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="the results store and report folder")],
    resume: Annotated[
        bool, typer.Option("--resume", help="run only the episodes the --out folder does not hold yet")
    ] = False,
    overwrite: Overwrite = False,
    workers: Annotated[int, typer.Option(help="local worker processes (0 = in this process)")] = 2,
    cluster: Annotated[str | None, CLUSTER_OPTION] = None,
    ray_cpus_per_worker: Annotated[float, RAY_CPUS_OPTION] = 1.0,
    ray_memory_mb: Annotated[float | None, RAY_MEMORY_OPTION] = None,
    max_workers: Annotated[int | None, MAX_WORKERS_OPTION] = None,
    quiet: Quiet = False,
) -> None:
    """A closed-loop grid (axes x values, a seed range per cell) on the local pool or a Ray cluster.

    Every finished episode is appended to OUT/episodes.jsonl as it arrives; --resume runs only what is
    missing. The tables go to stdout; OUT/results.json, OUT/plots/ and OUT/report.html are rebuilt from
    the store at the end (and by `hotloop report OUT`). Exit codes as `hotloop eval`.
    """
    from hotloop.closedloop.sweep import exec_options
    from hotloop.closedloop.sweep_run import run_spec

    if workers < 0:
        from hotloop.errors import ConfigError

        raise ConfigError(f"--workers must be >= 0 (got {workers})")
    options = exec_options(cluster, workers, ray_cpus_per_worker, ray_memory_mb, max_workers, quiet)
    run_spec(spec, out, resume, options, overwrite)


def report_cmd(
    out: Annotated[Path, typer.Argument(help="a `hotloop sweep` --out folder")],
) -> None:
    """Rebuild a sweep's tables, results.json, plots and report.html from its results store alone."""
    from hotloop.closedloop.report import write_report

    write_report(out)


def add_commands(app: typer.Typer) -> None:
    app.command("eval")(user_errors(eval_cmd))
    app.command("sweep")(user_errors(sweep_cmd))
    app.command("report")(user_errors(report_cmd))


if __name__ == "__main__":  # pragma: no cover
    _app = typer.Typer()
    add_commands(_app)
    _app(sys.argv[1:])
