"""`hotloop history DIR`, `hotloop compare OLD NEW` and `hotloop robustness RESULT...` (registered on the
app by `add_commands`).

`history` prints a history folder's runs in order with what changed between each and the one before;
`compare` puts two results already on disk side by side with the statistics of `--baseline`, so a
claim can be re-checked from its JSON files without measuring again; `robustness` puts several plans'
`--sweep-perturb` results side by side, per perturbation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from hotloop.cli_errors import register, run_alone
from hotloop.cli_options import FailOnRegression, ForceJudge, JsonOut, MaxLoad, Threshold, write_json


def history_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="a folder written by --history DIR")],
    target: Annotated[
        str | None, typer.Option(help="only the runs of this target (an artifact matches its source)")
    ] = None,
    kind: Annotated[str | None, typer.Option(help="only bench, eval or demo runs")] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="PNG of p50/p99 (bench) and success (eval) over the runs, with intervals"),
    ] = None,
    threshold: Threshold = None,
) -> None:
    """The runs of a history in order: their figures, the verdict against the run before of the same
    target, and the variable that changed between the two."""
    from rich.console import Console

    from hotloop.baselines.history_report import history_rows, history_table, plot_history
    from hotloop.errors import ConfigError
    from hotloop.io import check_output_file
    from hotloop.measure.baseline import parse_threshold
    from hotloop.measure.history import KINDS, list_runs

    if kind is not None and kind not in KINDS:
        raise ConfigError(f"--kind {kind!r}: use one of {', '.join(KINDS)}")
    value = parse_threshold(threshold)
    check_output_file(plot, "--plot")
    runs = list_runs(directory, "DIR")
    chosen = [r for r in runs if kind in (None, r.kind) and target in (None, r.target, r.policy)]
    if not chosen:
        what = " ".join(x for x in (kind, "runs", f"of {target}" if target else "") if x)
        held = f" (it holds {len(runs)} others)" if runs else ""
        raise ConfigError(f"{directory} holds no {what}{held}; record them with --history {directory}")
    console = Console(width=max(160, Console().width))
    console.print(history_table(history_rows(chosen, value), f"history {directory}: {len(chosen)} runs"))
    if plot is not None:
        typer.echo(f"wrote {plot_history(chosen, plot)}")


def _a(kind: str) -> str:
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def _load(spec: str, history: Path | None, flag: str) -> tuple[str, dict[str, Any]]:
    from hotloop.measure.baseline import looks_like_path, read_json_result
    from hotloop.measure.history import resolve_run

    if looks_like_path(spec):
        return spec, read_json_result(spec, flag)
    run = resolve_run(history, spec, None, None, flag)
    return f"#{run.number} ({run.id})", run.result


def compare_cmd(
    old: Annotated[str, typer.Argument(metavar="OLD", help="the baseline: a result JSON or a history run")],
    new: Annotated[
        str, typer.Argument(metavar="NEW", help="the run to judge: a result JSON or a history run")
    ],
    threshold: Threshold = None,
    fail_on_regression: FailOnRegression = False,
    history: Annotated[
        Path | None,
        typer.Option(envvar="HOTLOOP_HISTORY", help="the history folder OLD and NEW name runs of"),
    ] = None,
    max_load: MaxLoad = 0.5,
    force: ForceJudge = False,
) -> None:
    """Compare two results on disk (two bench JSONs, or two eval JSONs) as --baseline would."""
    from rich.console import Console

    from hotloop.errors import ConfigError
    from hotloop.measure.baseline import check_bench_result, parse_threshold, result_kind
    from hotloop.measure.contention import check_max_load

    value = parse_threshold(threshold)
    check_max_load(max_load)
    old_label, old_data = _load(old, history, "OLD")
    new_label, new_data = _load(new, history, "NEW")
    kinds = result_kind(old_data), result_kind(new_data)
    if kinds[1] not in ("bench", "eval"):
        raise ConfigError(f"NEW {new} is not a `hotloop bench --json` or `hotloop eval --json` result")
    if kinds[0] != kinds[1]:
        raise ConfigError(
            f"OLD {old} is {_a(kinds[0])} result and NEW {new} {_a(kinds[1])} one; compare like with like"
        )
    line: str | None
    busy: str | None = None
    if kinds[1] == "bench":
        from hotloop.measure.baseline import (
            busy_line,
            check_same_policy,
            compare_bench,
            print_comparison,
            regression_line,
            result_policy,
            unjudged_line,
        )

        check_bench_result(old_data, old, "OLD")
        check_bench_result(new_data, new, "NEW")
        check_same_policy(old_data, result_policy(new_data), old, "OLD")
        cmp = compare_bench(old_data, new_data, value, old_label)
        print_comparison(cmp, Console(width=max(160, Console().width)))
        unjudged = unjudged_line(cmp)
        line = regression_line(cmp)
        busy = busy_line(new_data, old_data, old_label, max_load, force, current_label=f"NEW {new_label}")
    else:
        if threshold is not None:
            raise ConfigError("--threshold is for bench results; success is judged by its interval: drop it")
        from hotloop.closedloop import baseline as ev

        old_runs = ev.check_eval_result(old_data, old, "OLD")
        new_runs = ev.check_eval_result(new_data, new, "NEW")
        ev.check_same_run(old_runs, str(new_runs[0]["target"]), str(new_runs[0]["task"]), old, "OLD")
        points = ev.compare_eval(old_runs, new_runs)
        if not points:
            raise ConfigError(
                f"no point of NEW {new} pairs with one of OLD {old}: give the same strategy or latency"
            )
        ev.print_comparison(points, old_label, ev.env_differences(old_runs, new_runs))
        unjudged = ev.unjudged_line(points, old_label)
        line = ev.regression_line(points, old_label)
    typer.echo(f"compared {new_label} against {old_label}")
    if unjudged is not None and fail_on_regression:
        typer.echo(unjudged, err=True)
        raise typer.Exit(2)
    if line is not None and fail_on_regression:
        if busy is not None:  # a slowdown timed beside other work is not a regression to gate on
            typer.echo(busy, err=True)
            raise typer.Exit(2)
        typer.echo(line, err=True)
        raise typer.Exit(3)


def robustness_cmd(
    results: Annotated[
        list[Path],
        typer.Argument(
            metavar="RESULT...",
            help="`hotloop eval --sweep-perturb --json` results (or `--perturb` ones); results of one target "
            "(or one --label) are one plan's points",
        ),
    ],
    label: Annotated[
        list[str] | None,
        typer.Option(help="a column's name, once per RESULT in order (default: its target and --pipeline)"),
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="PNG: success per perturbation, a bar per plan")] = None,
    json_out: JsonOut = None,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="print the table as markdown too (for docs)")
    ] = False,
) -> None:
    """Success per perturbation, several plans side by side: which plan breaks first and under what."""
    from hotloop.closedloop.baseline import check_eval_result
    from hotloop.closedloop.robustness import (
        Plan,
        markdown_robustness,
        plot_robustness,
        print_robustness,
        robustness_summary,
    )
    from hotloop.errors import ConfigError
    from hotloop.io import check_output_file
    from hotloop.measure.baseline import read_json_result

    labels = list(label or [])
    if labels and len(labels) != len(results):
        raise ConfigError(f"--label given {len(labels)} times for {len(results)} results: once per RESULT")
    check_output_file(plot, "--plot")
    check_output_file(json_out, "--json")
    by_label: dict[str, list[dict[str, Any]]] = {}  # results of one label are one plan's points
    for i, path in enumerate(results):
        runs = check_eval_result(read_json_result(str(path), "RESULT"), str(path), "RESULT")
        first = runs[0]
        pipeline = (first.get("request") or {}).get("pipeline")
        name = labels[i] if labels else str(first["target"]) + (f" + {pipeline}" if pipeline else "")
        by_label.setdefault(name, []).extend(runs)
    plans = [Plan(name, runs) for name, runs in by_label.items()]
    summary = robustness_summary(plans)
    print_robustness(summary)
    if markdown:
        typer.echo(markdown_robustness(summary))
    if json_out is not None:
        write_json(json_out, summary)
    if plot is not None:
        typer.echo(f"wrote {plot_robustness(summary, plot, str(plans[0].runs[0]['task']))}")


def add_commands(app: typer.Typer) -> None:
    register(app, {"history": history_cmd, "compare": compare_cmd, "robustness": robustness_cmd})


if __name__ == "__main__":  # pragma: no cover
    run_alone(add_commands)
