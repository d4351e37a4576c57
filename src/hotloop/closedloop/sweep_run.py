"""`hotloop sweep SPEC --out DIR`: expand the spec, open the results store, run what it lacks on the chosen
executor, then rebuild the report from the store (`report.py`).

Exit codes as `hotloop eval`: 0 every episode ran, 1 some crashed (error rows, apart from failures) or a
cell was refused by every node, 2 bad input (before any episode), 130 interrupted (every finished
episode is already in the store; `--resume` runs the rest).
"""

from __future__ import annotations

from pathlib import Path

import typer

from hotloop.closedloop.execution import ExecOptions, print_summary


def run_spec(spec: Path, out: Path, resume: bool, options: ExecOptions) -> None:
    from hotloop.closedloop.executors import episodes_of, execute
    from hotloop.closedloop.report import write_report
    from hotloop.closedloop.spec import load_spec
    from hotloop.closedloop.store import ResultsStore

    cells = load_spec(spec, options.workers)
    if options.cluster is not None:
        from hotloop.cluster.ray_executor import parse_cluster, probe

        # A malformed or unreachable --cluster fails before the store is touched.
        probe(options.cluster, parse_cluster(options.cluster))
    store = ResultsStore.open(out, cells, resume)
    try:
        todo = episodes_of(cells, store.done(), options)
        total = sum(len(c.seeds) for c in cells)
        typer.echo(
            f"sweep: {len(cells)} cells, {total} episodes"
            + (f", {total - len(todo)} already stored, {len(todo)} to run" if resume else ""),
            err=True,
        )
        result = execute(cells, todo, store.append, options)
        store.log_run(result.summary)
    finally:
        store.close()
    print_summary(result.summary)
    results = write_report(out)
    if result.interrupted:
        typer.echo("interrupted: every finished episode is stored; add --resume to run the rest", err=True)
        raise typer.Exit(130)
    crashed = sum(r["errors"] for r in results["runs"])
    if result.refused or crashed:
        if crashed:
            typer.echo(
                f"error: {crashed} episode(s) crashed; they are errors, not policy failures, and left out of "
                "the success rate (their rows hold the error)",
                err=True,
            )
        raise typer.Exit(1)
