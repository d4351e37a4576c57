"""Timing gates on a busy machine (issue 38, class 7): `bench --baseline --fail-on-regression` measures the
load as compile does and, above --max-load, exits 2 "machine busy" (or judges with --force), never 3; so do
`compare --fail-on-regression` on bench results recorded busy and compile's --budget-ms gate. The busy
machine is real: a spinning process beside the test (`Contenders`), not a mocked load figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.compile.commands import busy_budget_line
from hotloop.measure.contention import Contenders, contended, measure_load

runner = CliRunner()
BENCH = ["bench", "toy:mlp", "--warmup", "1", "--iters", "20", "--quiet", "--threads", "1"]


@pytest.fixture(autouse=True)
def _no_history_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOTLOOP_HISTORY", raising=False)


@pytest.fixture(scope="module")
def much_faster_baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real bench result with every sample divided by 100: any rerun is a regression beyond doubt."""
    path = tmp_path_factory.mktemp("b") / "a.json"
    res = runner.invoke(app, [*BENCH, "--json", str(path)])
    assert res.exit_code == 0, res.output
    data = json.loads(path.read_text())
    data["samples_ms"] = [v / 100 for v in data["samples_ms"]]
    data["stage_samples_ms"] = {k: [v / 100 for v in vs] for k, vs in data["stage_samples_ms"].items()}
    data.pop("machine_load", None)  # recorded quiet, as far as the gate knows
    path.write_text(json.dumps(data))
    return path


def test_the_bench_gate_on_a_busy_machine_is_exit_2_machine_busy_and_force_judges(
    much_faster_baseline: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.json"
    gate = [*BENCH, "--baseline", str(much_faster_baseline), "--fail-on-regression", "--max-load", "0.5"]
    with Contenders(2) as busy, contended(busy):
        assert measure_load(0.5).level > 0.5
        res = runner.invoke(app, [*gate, "--json", str(out)])
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert res.exit_code == 2 and len(lines) == 1, res.output[-2000:]
        assert "machine is busy" in lines[0] and "--force" in lines[0] and not out.exists()
        res = runner.invoke(app, [*gate, "--force", "--json", str(out)])
        assert res.exit_code == 3, res.output[-2000:]  # judged, as asked: a 100x slower run
        assert res.stderr.startswith("regression: toy:mlp is slower than")
    recorded = json.loads(out.read_text())["machine_load"]
    assert recorded["start"]["busy_cpus"] > 0.5  # the load it was judged under, kept with the result


def _with_load(src: Path, dst: Path, busy_cpus: float) -> Path:
    data = json.loads(src.read_text())
    load = {"busy_cpus": busy_cpus, "load_avg_1m": 0.1, "cpus": 2, "window_s": 1.0}
    data["machine_load"] = {"start": dict(load, busy_cpus=0.0), "end": load}
    dst.write_text(json.dumps(data))
    return dst


def test_compare_does_not_gate_on_runs_recorded_busy(much_faster_baseline: Path, tmp_path: Path) -> None:
    now = tmp_path / "now.json"
    assert runner.invoke(app, [*BENCH, "--json", str(now)]).exit_code == 0
    busy_now = _with_load(now, tmp_path / "busy_now.json", 1.7)
    quiet_now = _with_load(now, tmp_path / "quiet_now.json", 0.1)
    busy_then = _with_load(much_faster_baseline, tmp_path / "busy_then.json", 1.2)
    cases: list[tuple[list[str], int, str]] = [
        ([str(much_faster_baseline), str(busy_now)], 2, f"NEW {busy_now} was timed with 1.70 CPUs"),
        ([str(busy_then), str(quiet_now)], 2, f"the baseline {busy_then} was timed with 1.20 CPUs"),
        ([str(much_faster_baseline), str(quiet_now)], 3, "regression: "),
        ([str(much_faster_baseline), str(busy_now), "--force"], 3, "regression: "),
    ]
    for args, code, needle in cases:
        res = runner.invoke(app, ["compare", *args, "--fail-on-regression", "--max-load", "0.5"])
        assert res.exit_code == code and needle in res.stderr, (args, res.output[-1500:])
        if code == 2:
            assert res.stderr.startswith("error: machine busy: ")


def test_the_compile_budget_gate_judges_quiet_timings_only() -> None:
    def result(end_busy: float) -> dict[str, Any]:
        quiet = {"busy_cpus": 0.1, "load_avg_1m": 0.2, "cpus": 2, "window_s": 1.0}
        return {"machine_load": {"start": quiet, "end": {**quiet, "busy_cpus": end_busy}}}

    line = busy_budget_line(result(1.4), 0.5, force=False)
    assert line is not None and line.startswith("error: machine busy: the plan was timed with 1.40 CPUs")
    assert busy_budget_line(result(1.4), 0.5, force=True) is None
    assert busy_budget_line(result(0.2), 0.5, force=False) is None
    assert busy_budget_line({}, 0.5, force=False) is None  # unknown load: the gate judges as before


def test_an_eval_gate_at_measured_latency_is_a_timing_gate(tmp_path: Path) -> None:
    """At --latency measured the success depends on this machine's speed: the gate refuses a busy machine
    (exit 2 machine busy, before any episode); at a fixed latency it is load-independent and judges."""
    base = tmp_path / "base.json"
    run = ["eval", "expert:scripted", "--strategy", "sync", "--episodes", "2", "--workers", "0", "--quiet"]
    for latency in ("measured", "fixed:0"):
        res = runner.invoke(app, [*run, "--latency", latency, "--json", str(base)])
        assert res.exit_code == 0, res.output[-2000:]
        gate = [
            *run,
            "--latency",
            latency,
            "--baseline",
            str(base),
            "--fail-on-regression",
            "--max-load",
            "0.5",
        ]
        with Contenders(2) as busy, contended(busy):
            res = runner.invoke(app, gate)
        if latency == "measured":
            lines = [ln for ln in res.output.splitlines() if ln.strip()]
            assert res.exit_code == 2 and len(lines) == 1, res.output[-2000:]
            assert "at --latency measured gates on a success" in lines[0] and "machine is busy" in lines[0]
        else:
            assert res.exit_code == 0, res.output[-2000:]  # a rerun at a fixed latency: no drop


def test_history_says_which_runs_were_timed_busy(much_faster_baseline: Path, tmp_path: Path) -> None:
    from hotloop.baselines.history_report import _bench_versus

    quiet = json.loads(_with_load(much_faster_baseline, tmp_path / "q.json", 0.1).read_text())
    busy = json.loads(_with_load(much_faster_baseline, tmp_path / "b.json", 1.3).read_text())
    assert "busy" not in _bench_versus(quiet, quiet, 0.05)[0]
    assert _bench_versus(quiet, busy, 0.05)[0].endswith(
        "(timed on a busy machine: now 1.30 CPUs of other work)"
    )
