"""`hotloop demo`'s headline: report.html opens with it and the command's output ends with it, its figures
those of report.json. A real (small) demo: the harness rung, and the closed-loop rung run on the task's
scripted expert (it loads no model, and its episodes end early)."""

from __future__ import annotations

import functools
import html
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.demo import closed_loop_rung
from hotloop.demo.headline import format_ms


def test_demo_ends_with_the_headline_its_report_opens_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two latencies, one episode a point (two at sync 0 ms), in this process: the figures' path is what is
    # checked; the rung's own table is tested in test_demo_rung.py.
    monkeypatch.setattr(closed_loop_rung, "TARGET", "expert:scripted")
    monkeypatch.setattr(closed_loop_rung, "rung_plan", lambda full: ([0.0, 50.0], 1, 2))
    monkeypatch.setattr(closed_loop_rung, "run_rung", functools.partial(closed_loop_rung.run_rung, workers=0))
    out = tmp_path / "report"
    res = CliRunner().invoke(
        app, ["demo", "--out", str(out), "--rung", "harness", "--rung", "closed-loop", "--quiet"]
    )
    assert res.exit_code == 0, res.output
    report = json.loads((out / "report.json").read_text())
    headline = report["headline"]

    # The terminal ends with it; the page shows it before the first rung's section.
    assert res.stdout.rstrip("\n").splitlines()[-len(headline) :] == headline
    page = (out / "report.html").read_text()
    block = page.split("<section class='headline'><pre>", 1)[1].split("</pre>", 1)[0]
    assert html.unescape(block).splitlines() == headline
    assert page.index("<section class='headline'>") < page.index("<section><h2>")

    # Its figures are the report's.
    harness, closed = (r["summary"] for r in report["rungs"])
    lat = harness["latency_ms"]
    assert f"latency of toy:mlp: p50 {format_ms(lat['p50'])} ms, p99 {format_ms(lat['p99'])} ms" in "\n".join(
        headline
    )
    start = next(
        i for i, line in enumerate(headline) if line.startswith("success against latency, expert:scripted")
    )
    assert headline[start + 1].split() == ["0", "ms", "50", "ms"]
    rows = {line.split()[0]: line.split()[1:] for line in headline[start + 2 : start + 6]}
    assert set(rows) == {"sync", "async", "rtc", "rtc-soft"}
    for strategy, points in closed["success"].items():
        expected = [f"{100 * points[ms]['success_rate']:.0f}" for ms in ("0", "50")]
        assert rows[strategy] == [expected[0], "%", expected[1], "%"], strategy
    env = report["env"]
    assert headline[-1].startswith(f"machine: {env['cpu_model']}, {env['cpu_count']} CPUs")
