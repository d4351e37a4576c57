"""Run a sweep's episodes on an executor and hand back each one as a row (`store.py` for the row).

Two executors, one contract: `local` (the worker pool of `pool.py`) and `ray`
(`hotloop.cluster.ray_executor`, over the cluster's actors), each running every cell at once. Both run the episodes
through `EpisodeRunner` with the same job, so the records are the same seed for seed; only the row's
`node`, `pid` and timings say where it ran.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hotloop.closedloop.cells import Cell, Episode, job_for
from hotloop.closedloop.execution import ExecOptions, ExecResult, ExecStats, Row, make_row

# Local episodes are handed to the pool this many at a time, made as they are needed: a sweep's episodes
# are never all in memory at once (the pool keeps its workers between chunks).
CHUNK_EPISODES = 4096


def execute(
    cells: list[Cell],
    todo: Iterable[Episode],
    on_row: Callable[[Row], None],
    options: ExecOptions,
    count: int | None = None,
) -> ExecResult:
    """Run `todo` (episodes of `cells`, `count` of them) on the executor `options` name; `on_row` gets
    each finished one."""
    from hotloop.progress import Progress

    if count is None:
        todo = list(todo)
        count = len(todo)
    if options.cluster is not None:
        from hotloop.cluster.ray_executor import run_on_ray

        return run_on_ray(cells, list(todo), on_row, options)
    from hotloop.closedloop.pool import WorkerPool

    stats = ExecStats(count, "local", slots=max(1, min(options.workers, count)))
    bar = Progress(count, "sweep", "ep", enabled=options.progress)
    node = socket.gethostname()
    episodes = iter(todo)
    interrupted = False

    # One pool for every cell: a worker builds each (target, task) once, and no cell waits for the
    # previous one's last episode.
    with bar, WorkerPool(options.workers) as pool:
        while not interrupted and (chunk := list(itertools.islice(episodes, CHUNK_EPISODES))):

            def on_done(index: int, record: dict[str, Any], timing: dict[str, Any], chunk=chunk) -> None:
                row = make_row(chunk[index].cell, record, timing, node)
                on_row(row)
                stats.add(row, timing.get("slot"))
                bar.update(1, stats.postfix())

            interrupted = pool.run([(ep.job, ep.seed) for ep in chunk], on_done)
    return ExecResult(interrupted, stats.summary(interrupted), {})


def episodes_of(cells: list[Cell], done: set[tuple[str, int]], options: ExecOptions) -> Iterator[Episode]:
    """Every (cell, seed) not in `done`, cell by cell (workers take a cell's episodes in turn), made one
    at a time as the executor takes them."""
    threads = options.threads()
    for cell in cells:
        job = job_for(cell.request, threads)
        first = cell.request.seed
        for s in range(first, first + cell.request.episodes):
            if (cell.key, s) not in done:
                yield Episode(cell.key, job, s)


def count_todo(cells: list[Cell], done: set[tuple[str, int]]) -> int:
    """How many episodes `episodes_of` gives."""
    ranges = {c.key: (c.request.seed, c.request.seed + c.request.episodes) for c in cells}
    stored = sum(1 for key, s in done if key in ranges and ranges[key][0] <= s < ranges[key][1])
    return sum(c.request.episodes for c in cells) - stored


def check_builds(cells: list[Cell], where: str) -> None:
    """Build, in this process, what each cell's workers would build and a file can break: the task (its
    --task-kwargs) and a folder target (a checkpoint, an artifact). Bad input is one line naming the cell,
    before the results store is made; registered targets are not loaded twice."""
    from pathlib import Path

    from hotloop.closedloop.workers import EpisodeRunner, build_key
    from hotloop.errors import ConfigError, HotloopError
    from hotloop.sim.tasks import make_task

    tried: set[Any] = set()
    for cell in cells:
        job = job_for(cell.request, None)
        folder = Path(job.target).is_dir() or (job.fallback_target and Path(job.fallback_target).is_dir())
        key = build_key(job) if folder else (job.task, job.difficulty, job.task_kwargs)
        if key in tried:
            continue
        tried.add(key)
        try:
            if folder:
                EpisodeRunner(job).close()
            else:
                make_task(job.task, difficulty=job.difficulty, task_kwargs=job.task_kwargs).close()
        except HotloopError as e:
            raise ConfigError(f"{where}: cell ({cell.label()}): {e}") from None
        except Exception:  # noqa: BLE001, S112 - not bad input: the workers record it as crashed episodes
            continue
