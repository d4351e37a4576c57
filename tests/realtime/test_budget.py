import json

import pytest

from hotloop.errors import ConfigError
from hotloop.realtime.budget import BudgetReport, CycleRecorder, PipelineBudget, budget_report


class FakeClock:
    """A clock that advances only when told: layer timestamps become exact known numbers."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance_ms(self, ms: float) -> None:
        self.ns += round(ms * 1e6)


BUDGET = PipelineBudget.of(perception=20, estimation=2, decision=100, control=2)


def _run(clock, recorder, perception_ms, decision_ms, charge_perception=0.0):
    with recorder.cycle() as c:
        with c.layer("perception"):
            clock.advance_ms(perception_ms)
        c.charge("perception", charge_perception)
        with c.layer("estimation"):
            clock.advance_ms(1.0)
        with c.layer("decision"):
            clock.advance_ms(decision_ms)
        with c.layer("control"):
            clock.advance_ms(0.5)


def test_every_cycle_gets_per_layer_timestamps_and_charges():
    clock = FakeClock()
    rec = CycleRecorder(BUDGET, clock=clock)
    _run(clock, rec, 5.0, 40.0, charge_perception=30.0)
    c = rec.last
    assert c is not None and list(c.layers) == ["perception", "estimation", "decision", "control"]
    spans = c.layers
    assert spans["perception"].start_ns == 0 and spans["perception"].end_ns == 5_000_000
    assert spans["estimation"].start_ns == 5_000_000 and spans["decision"].end_ns == 46_000_000
    assert c.latency_ms("perception") == pytest.approx(35.0)  # 5 ms measured + 30 ms injected
    assert c.latency_ms("decision") == pytest.approx(40.0)
    c.charge("decision", 120.0, replace=True)  # a simulated inference stands for the wall time
    assert c.latency_ms("decision") == pytest.approx(120.0)
    assert json.loads(json.dumps(c.to_dict()))["layers"]["perception"]["charged_ms"] == 30.0


def test_report_names_the_layer_that_breaks_its_budget():
    clock = FakeClock()
    rec = CycleRecorder(BUDGET, clock=clock)
    for i in range(100):
        # perception is 10 ms except every 10th cycle (35 ms): p99 over budget by 1.75x;
        # decision is 90 ms except once (110 ms): within budget at p99 (one cycle in 100).
        _run(clock, rec, 35.0 if i % 10 == 0 else 10.0, 110.0 if i == 50 else 90.0)
    report = budget_report(BUDGET, rec.latencies_ms())
    by = {r.name: r for r in report.layers}
    assert by["perception"].over_budget == 10 and by["perception"].p50_ms == pytest.approx(10.0)
    assert by["decision"].over_budget == 1 and by["decision"].p99_ms <= 110.0
    assert report.breaking == "perception"
    assert "perception" in report.verdict() and "10/100" in report.verdict()
    assert report.total.budget_ms == pytest.approx(124.0)
    assert report.total.p50_ms == pytest.approx(10.0 + 1.0 + 90.0 + 0.5)
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["breaking_layer"] == "perception"
    assert BudgetReport.from_dict(doc) == report


def test_a_pipeline_within_budget_names_no_layer(tmp_path):
    clock = FakeClock()
    rec = CycleRecorder(BUDGET, clock=clock)
    for _ in range(20):
        _run(clock, rec, 5.0, 50.0)
    report = budget_report(BUDGET, rec.latencies_ms())
    assert report.breaking is None and "kept its budget" in report.verdict()
    path = report.plot(tmp_path / "budget.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_bad_budgets_and_layers():
    with pytest.raises(ConfigError, match="unique"):
        PipelineBudget((BUDGET.layers[0], BUDGET.layers[0]))
    with pytest.raises(ConfigError, match="must be > 0"):
        PipelineBudget.of(perception=0)
    rec = CycleRecorder(BUDGET)
    with pytest.raises(ConfigError, match="not in this pipeline"), rec.cycle() as c, c.layer("planning"):
        pass
    with pytest.raises(ConfigError, match="one latency per cycle"):
        budget_report(BUDGET, {"perception": [1.0], "decision": [1.0, 2.0]})
