"""Run a sweep's episodes on an executor and hand back each one as a row (`store.py` for the row).

Two executors, one contract: `local` (the worker pool of `pool.py`) and `ray`
(`hotloop.cluster.ray_executor`, over the cluster's actors), each running every cell at once. Both run the episodes
through `EpisodeRunner` with the same job, so the records are the same seed for seed; only the row's
`node`, `pid` and timings say where it ran.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from hotloop.closedloop.cells import Cell, Episode, job_for
from hotloop.closedloop.execution import ExecOptions, ExecResult, ExecStats, Row, make_row


def execute(
    cells: list[Cell], todo: list[Episode], on_row: Callable[[Row], None], options: ExecOptions
) -> ExecResult:
    """Run `todo` (episodes of `cells`) on the executor `options` name; `on_row` gets each finished one."""
    from hotloop.progress import Progress

    if options.cluster is not None:
        from hotloop.cluster.ray_executor import run_on_ray

        return run_on_ray(cells, todo, on_row, options)
    from hotloop.closedloop.pool import WorkerPool

    stats = ExecStats(len(todo), "local", slots=max(1, min(options.workers, len(todo))))
    bar = Progress(len(todo), "sweep", "ep", enabled=options.progress)
    node = socket.gethostname()

    def on_done(index: int, record: dict[str, Any], timing: dict[str, Any]) -> None:
        row = make_row(todo[index].cell, record, timing, node)
        on_row(row)
        stats.add(row, timing.get("slot"))
        bar.update(1, stats.postfix())

    # One pool for every cell: a worker builds each (target, task) once, and no cell waits for the
    # previous one's last episode.
    with bar, WorkerPool(options.workers) as pool:
        interrupted = pool.run([(ep.job, ep.seed) for ep in todo], on_done)
    return ExecResult(interrupted, stats.summary(interrupted), {})


def episodes_of(cells: list[Cell], done: set[tuple[str, int]], options: ExecOptions) -> list[Episode]:
    """Every (cell, seed) not in `done`, cell by cell (workers take a cell's episodes in turn)."""
    threads = options.threads()
    todo: list[Episode] = []
    for cell in cells:
        job = job_for(cell.request, threads)
        todo.extend(Episode(cell.key, job, s) for s in cell.seeds if (cell.key, s) not in done)
    return todo
