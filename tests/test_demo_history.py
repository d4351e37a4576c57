"""`hotloop demo --history`: the report shows the previous demo run's figures beside this run's."""

from __future__ import annotations

from hotloop.demo.previous import headline_figures, previous_html
from hotloop.demo.report import DemoConfig, run_demo
from hotloop.measure.history import list_runs


def test_headline_figures_pick_the_figures_only() -> None:
    summary = {
        "latency_ms": {"p50": 8.0, "p99": 12.0, "mean": 9.0},
        "stages": {"vision": {"p50": 1.0}},
        "env": {"p50": 99.0},
        "success": {"async": {"200": {"success_rate": 0.9, "episodes": 100}}},
        "rungs": [{"step": "quantize", "p50_ms": 3.0, "speedup_p50": 2.0}],
    }
    assert headline_figures(summary) == {
        "latency_ms.p50": 8.0,
        "latency_ms.p99": 12.0,
        "stages.vision.p50": 1.0,
        "success.async.200.success_rate": 0.9,
        "rungs.quantize.p50_ms": 3.0,
        "rungs.quantize.speedup_p50": 2.0,
    }
    previous = ("#1, then", {"rungs": [{"title": "T", "summary": {"latency_ms": {"p50": 4.0}}}]})
    page = previous_html("T", {"latency_ms": {"p50": 8.0}}, previous)
    assert "beside the previous demo run (#1, then)" in page and "<td>4</td><td>8</td><td>2.00×</td>" in page
    assert "has no figures for this rung" in previous_html("U", {}, previous)
    assert previous_html("T", {}, None) == ""


def test_demo_with_a_history_shows_the_previous_run(tmp_path) -> None:
    hist = tmp_path / "hist"
    config = DemoConfig(out_dir=tmp_path / "r", progress=False, only=("harness",), history=hist)
    run_demo(config, log=lambda s: None)
    first = (tmp_path / "r" / "report.html").read_text()
    assert "beside the previous demo run" not in first
    run_demo(config, log=lambda s: None)
    page = (tmp_path / "r" / "report.html").read_text()
    assert "beside the previous demo run (#1, " in page and "latency_ms.p50" in page
    assert [r.kind for r in list_runs(hist)] == ["demo", "demo"]
