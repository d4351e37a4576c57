"""The previous `hotloop demo` run's figures beside this run's, when the demo keeps a history.

`hotloop demo --history DIR` (or HOTLOOP_HISTORY) appends each report to the history; the next report
shows, under each rung, the headline figures of the last demo run in that history next to the new ones
(latency quantiles, speedups, success rates), matched by rung title and figure name.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

# The leaves that are figures a reader compares; everything else (settings, raw samples, the machine)
# is left out. Subtrees named in _SKIPPED hold raw data or per-candidate detail.
_FIGURES = ("p50", "p99", "p50_ms", "p99_ms", "success_rate", "speedup_p50", "speedup_p99", "action_cos")
_SKIPPED = (
    "env",
    "candidates",
    "roofline",
    "samples_ms",
    "stage_samples_ms",
    "info",
    "config",
    "device_stages",
    "sync_gap_ms",
    "compare",
    "plan",
    "plan_options",
    "sync_0ms",
    "rate_hz",
)


def headline_figures(summary: Any, prefix: str = "") -> dict[str, float]:
    """{"latency_ms.p50": 8.4, "success.async.200.success_rate": 0.93, ...} from a rung's summary."""
    out: dict[str, float] = {}
    if isinstance(summary, dict):
        for key, value in summary.items():
            if key in _SKIPPED:
                continue
            name = f"{prefix}{key}"
            if key in _FIGURES and isinstance(value, int | float) and not isinstance(value, bool):
                out[name] = float(value)
            else:
                out.update(headline_figures(value, name + "."))
    elif isinstance(summary, list):
        for i, item in enumerate(summary):
            tag = item.get("step", i) if isinstance(item, dict) else i  # compression rungs: by step
            out.update(headline_figures(item, f"{prefix}{tag}."))
    return out


def previous_demo(history: Path | None) -> tuple[str, dict[str, Any]] | None:
    """(how to name it, its report) for the newest demo run of the history, or None."""
    if history is None or not Path(history).is_dir():
        return None
    from hotloop.measure.history import list_runs

    runs = [r for r in list_runs(history, "--history") if r.kind == "demo"]
    if not runs:
        return None
    run = runs[-1]
    return f"#{run.number}, {run.created}", run.result


def previous_html(title: str, summary: dict[str, Any], previous: tuple[str, dict[str, Any]] | None) -> str:
    """A small table of the previous run's figures against this rung's ('' when there is nothing)."""
    if previous is None:
        return ""
    label, report = previous
    before = next(
        (r for r in report.get("rungs", []) if r.get("title") == title and not r.get("error")),
        None,
    )
    if before is None:
        return f"<p><small>previous demo run ({html.escape(label)}) has no figures for this rung</small></p>"
    old, new = headline_figures(before.get("summary") or {}), headline_figures(summary)
    rows = []
    for name, value in new.items():
        if name not in old:
            continue
        was = old[name]
        ratio = f"{value / was:.2f}×" if was else "-"
        rows.append(
            f"<tr><td style='text-align:left'>{html.escape(name)}</td><td>{was:.4g}</td><td>{value:.4g}</td>"
            f"<td>{ratio}</td></tr>"
        )
    if not rows:
        return ""
    return (
        f"<details open><summary>beside the previous demo run ({html.escape(label)})</summary>"
        "<table><tr><th>figure</th><th>previous</th><th>now</th><th>now / previous</th></tr>"
        + "".join(rows)
        + "</table><p><small>Single runs, no intervals: to judge a change use "
        "<code>hotloop bench --baseline</code> or <code>hotloop eval --baseline</code>.</small></p></details>"
    )
