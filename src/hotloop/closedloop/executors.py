"""Run a sweep's episodes on an executor and hand back each one as a row (`store.py` for the row).

Two executors, one contract: `local` (the worker pool of `workers.py`, one cell after another) and `ray`
(`hotloop.cluster.ray_executor`, every cell at once over the cluster's actors). Both run the episodes
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
    stats = ExecStats(len(todo), "local", slots=max(1, options.workers))
    bar = Progress(len(todo), "sweep", "ep", enabled=options.progress)
    node = socket.gethostname()
    interrupted = False
    by_cell: dict[str, list[Episode]] = {}
    for ep in todo:
        by_cell.setdefault(ep.cell, []).append(ep)
    with bar:
        for key, episodes in by_cell.items():
            timings: list[dict[str, Any]] = []

            def on_result(
                record: dict[str, Any], key: str = key, timings: list[dict[str, Any]] = timings
            ) -> None:
                row = make_row(key, record, timings.pop() if timings else {}, node)
                on_row(row)
                stats.add(row)
                bar.update(1, stats.postfix())

            from hotloop.closedloop.workers import run_episodes

            _, interrupted = run_episodes(
                episodes[0].job, [e.seed for e in episodes], options.workers, on_result, timings.append
            )
            if interrupted:
                break
    return ExecResult(interrupted, stats.summary(interrupted), {})


def episodes_of(cells: list[Cell], done: set[tuple[str, int]], options: ExecOptions) -> list[Episode]:
    """Every (cell, seed) not in `done`, cell by cell (so that workers rebuild as rarely as they can)."""
    threads = options.threads()
    todo: list[Episode] = []
    for cell in cells:
        job = job_for(cell.request, threads)
        todo.extend(Episode(cell.key, job, s) for s in cell.seeds if (cell.key, s) not in done)
    return todo
