"""`hotloop record`, registered on the app by `add_commands`. Module-level imports stay light (typer
only); MuJoCo and torch load inside the command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from hotloop.cli_errors import register
from hotloop.cli_options import Difficulty, EpisodeSeed, Overwrite, Perturb, Quiet, Task, TaskKwargs
from hotloop.sim.tasks import check_difficulty


def record_cmd(
    task: Task,
    task_kwargs: TaskKwargs = None,
    episodes: Annotated[int, typer.Option(help="number of expert episodes")] = 50,
    out: Annotated[
        Path, typer.Option("-o", "--out", help="new dataset directory (LeRobot v3 layout)")
    ] = Path("data/episodes"),
    difficulty: Difficulty = None,
    seed: EpisodeSeed = 0,
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
    image_size: Annotated[
        int | None,
        typer.Option(help="side of the recorded images in pixels, 16-512 (default: the task's own, 64)"),
    ] = None,
    perturb: Perturb = None,
    quiet: Quiet = False,
    overwrite: Overwrite = False,
) -> None:
    """Record scripted-expert episodes of a task to DIR (parquet + meta/info.json; see docs/dataset.md)."""
    recording: dict[str, Any] = (
        dict(  # checked here, before the output folder is claimed; record checks them again
            seed=seed,
            action_noise=action_noise,
            recovery_starts=recovery_starts,
            image_size=image_size,
            perturb=perturb,
        )
    )
    from hotloop.datasets.recorder import check_record_options, record
    from hotloop.errors import ConfigError
    from hotloop.interrupts import stop_at_next_boundary
    from hotloop.output_dir import claim_output_dir
    from hotloop.progress import Progress
    from hotloop.sim.tasks import check_task
    from hotloop.sim.tasks.gym_task import parse_task_kwargs

    check_task(task)
    parse_task_kwargs(task_kwargs)
    if episodes < 1:
        raise ConfigError(f"--episodes must be >= 1 (got {episodes})")
    check_record_options(**recording)
    check_difficulty(task, difficulty)
    view_keys = _record_views(task, views)
    claimed = claim_output_dir(out, "-o", "record", overwrite=overwrite)
    if (out / "meta" / "info.json").exists():  # the writer would refuse it after the recording
        raise ConfigError(f"-o {out} already holds a dataset; give a new folder, or delete that one first")
    wins = 0

    def tick(i: int, ok: bool) -> None:
        nonlocal wins
        wins += int(ok)
        bar.update(1, f"expert success {wins}/{i + 1}")

    # Ctrl-C stops after the episode in progress and writes the finished ones (a dataset is written whole
    # at the end: an exception there would lose every episode).
    with (
        claimed.writing(),
        stop_at_next_boundary("episode") as stop,
        Progress(episodes, f"record {task}", "ep", enabled=not quiet) as bar,
    ):
        result = record(
            task,
            episodes,
            out,
            difficulty=difficulty,
            progress=tick,
            stop=stop,
            task_kwargs=task_kwargs,
            views=view_keys,
            **recording,
        )
    typer.echo(
        f"wrote {result['episodes']} episodes ({result['frames']} frames) to {out}; "
        f"expert success {result['successes']}/{result['episodes']}"
    )
    if result["duplicate_starts"]:
        typer.echo(
            f"note: {result['duplicate_starts']} of {result['episodes']} episodes began in the start state of "
            "an earlier one (the task has few distinct starts); they are repeats, not new data",
            err=True,
        )
    if result.get("success_note"):
        typer.echo(f"note: {result['success_note']}", err=True)
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


def add_commands(app: typer.Typer) -> None:
    register(app, {"record": record_cmd})
