"""`hotloop eval`: closed loop on the simulated world (registered on the app by `add_commands`).

Module-level imports stay light (typer only); MuJoCo and torch load inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hotloop import cli_options as opts
from hotloop.cli_errors import register, run_alone

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
    task: opts.Task = "conveyor-pick",
    task_kwargs: opts.TaskKwargs = None,
    difficulty: opts.Difficulty = None,
    strategy: Annotated[
        list[str],
        typer.Option(
            help="sync, chunk, async, rtc, rtc-prefix, rtc-soft, ensemble (ACT's temporal ensembling), "
            "draft (speculative chunks checked by the model), lerobot-async or lerobot-rtc-soft (LeRobot's stock "
            "async client); repeat or comma-separate for several"
        ),
    ] = ["sync"],  # noqa: B006
    latency: opts.EvalLatency = None,
    sweep_latency: Annotated[
        str | None, typer.Option(help="fixed latencies in ms to sweep, e.g. 0,50,100,200,300")
    ] = None,
    episodes: Annotated[int, typer.Option(help="episodes per (strategy, latency) point")] = 50,
    seed: opts.EpisodeSeed = 0,
    workers: opts.Workers = 2,
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
    steps: opts.FlowSteps = None,
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
    deadline_ms: opts.DeadlineMs = None,
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
    draft_from: Annotated[
        Path | None,
        typer.Option(
            help="draft: the drafts are this onestep student's chunks (an artifact of `hotloop compress TARGET "
            "--recipe onestep`, sharing TARGET's vision and VLM), handed over from the executing chunk by "
            "rtc-soft's soft mask; pi0/pi0.5 in PyTorch"
        ),
    ] = None,
    json_path: opts.JsonOut = None,
    plot: Annotated[
        Path | None, typer.Option(help="PNG of success rate against latency per strategy")
    ] = None,
    quiet: opts.Quiet = False,
    pipeline: Annotated[
        str | None,
        typer.Option(
            help="conveyor-pick layered chain: detector or truth[:perception=MS,control=MS,predict=1]; "
            "detector:model=learned[,resolution=N] for the learned box detector"
        ),
    ] = None,
    memory_cap_mb: opts.MemoryCap = None,
    perturb: opts.Perturb = None,
    sweep_perturb: Annotated[
        str | None,
        typer.Option(help="one point per perturbation NAME:VALUE,... beside an unperturbed point"),
    ] = None,
    baseline: opts.Baseline = None,
    fail_on_regression: opts.FailOnRegression = False,
    max_load: opts.MaxLoad = 0.5,
    force: opts.ForceJudge = False,
    history: opts.History = None,
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
    flags = dict(locals())  # EvalSweep's fields, but --steps (num_steps) and --strategy (a tuple)
    from hotloop.closedloop.sweep import EvalSweep, run_sweep

    run_sweep(opts.config_from_flags(EvalSweep, flags, num_steps=steps, strategy=tuple(strategy)))


def sweep_cmd(
    spec: Annotated[Path, typer.Argument(help="the grid: a .yaml or .json file (docs/sweep.md)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="the results store and report folder")],
    resume: Annotated[
        bool, typer.Option("--resume", help="run only the episodes the --out folder does not hold yet")
    ] = False,
    overwrite: opts.Overwrite = False,
    workers: opts.Workers = 2,
    cluster: Annotated[str | None, CLUSTER_OPTION] = None,
    ray_cpus_per_worker: Annotated[float, RAY_CPUS_OPTION] = 1.0,
    ray_memory_mb: Annotated[float | None, RAY_MEMORY_OPTION] = None,
    max_workers: Annotated[int | None, MAX_WORKERS_OPTION] = None,
    quiet: opts.Quiet = False,
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
    register(app, {"eval": eval_cmd, "sweep": sweep_cmd, "report": report_cmd})


if __name__ == "__main__":  # pragma: no cover
    run_alone(add_commands)
