"""`hotloop sweep SPEC --out DIR`: expand the spec, open the results store, run what it lacks on the chosen
executor, then rebuild the report from the store (`report.py`).

Exit codes as `hotloop eval`: 0 every episode ran, 1 some crashed (error rows, apart from failures) or a
cell was refused by every node, 2 bad input (before any episode), 130 interrupted (every finished
episode is already in the store; `--resume` runs the rest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from hotloop.closedloop.execution import ExecOptions, print_summary


def run_spec(spec: Path, out: Path, resume: bool, options: ExecOptions, overwrite: bool = False) -> None:
    from hotloop.closedloop.executors import check_builds, count_todo, episodes_of, execute
    from hotloop.closedloop.report import write_report
    from hotloop.closedloop.spec import load_spec
    from hotloop.closedloop.store import ResultsStore
    from hotloop.output_dir import check_not_input

    cells = load_spec(spec, options.workers)
    inputs: dict[str, Any] = {"SPEC": spec}
    inputs.update({f"target {c.request.target}": c.request.target for c in cells})
    check_not_input(out, "--out", inputs)  # before the builds: a second of loading, then a refusal
    if options.cluster is not None:
        from hotloop.cluster.ray_executor import parse_cluster, probe

        # A malformed or unreachable --cluster fails before the store is touched.
        probe(options.cluster, parse_cluster(options.cluster))
    check_builds(cells, f"SPEC {spec}")  # a task or checkpoint that cannot be built: before the store
    store = ResultsStore.open(out, cells, resume, overwrite=overwrite, inputs=inputs)
    try:
        done = store.done()
        total = sum(c.request.episodes for c in cells)
        left = count_todo(cells, done)
        typer.echo(
            f"sweep: {len(cells)} cells, {total} episodes"
            + (f", {total - left} already stored, {left} to run" if resume else ""),
            err=True,
        )
        result = execute(cells, episodes_of(cells, done, options), store.append, options, left)
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
