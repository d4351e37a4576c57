"""The planner's fast search (`hotloop.compile.search`): order, roofline-bound skips, timing stopped for
the slow, the default backends, the ETA; and calibration frames a demo target records from its own task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.compile.planner import Candidate, PlanConfig, time_candidate
from hotloop.compile.search import (
    GIVE_UP_RATIO,
    PROBE_CALLS,
    Eta,
    RooflineBounds,
    cannot_win,
    fast_default_backends,
    give_up_ms,
    needs_bounds,
    search_order,
)
from hotloop.compile.validate import parse_tolerance
from hotloop.errors import ConfigError
from hotloop.measure.stats import LatencyStats

runner = CliRunner()
# vision: 2 GFLOP; fp32 peak 100 GFLOP/s (20 ms floor), bf16 only 10 (200 ms floor: emulated here).
BOUNDS = RooflineBounds(
    stage_gflop={"vision": 2.0, "denoise": 1.0}, peaks_gflops={"float32": 100.0, "bfloat16": 10.0}
)


def _cand(stage: str, backend: str, precision: str, p99: float | None = None) -> Candidate:
    c = Candidate(stage, stage, backend, precision)
    if p99 is not None:
        c.status, c.latency = "accepted", LatencyStats.from_samples([p99])
    return c


def test_order_keeps_stages_and_puts_the_lowest_bound_and_cheapest_backend_first() -> None:
    pending = [
        _cand("vision", "eager", "bf16"),
        _cand("vision", "inductor", "fp32"),
        _cand("denoise", "openvino", "fp32"),
        _cand("vision", "eager", "fp32"),
        _cand("vision", "openvino", "fp32"),
    ]
    got = [(c.stage, c.backend, c.precision) for c in search_order(pending, ["vision", "denoise"], BOUNDS)]
    assert got == [
        ("vision", "openvino", "fp32"),
        ("vision", "eager", "fp32"),
        ("vision", "inductor", "fp32"),
        ("vision", "eager", "bf16"),  # its floor (200 ms) is the highest
        ("denoise", "openvino", "fp32"),
    ]


def test_a_candidate_whose_floor_is_above_the_best_is_skipped_but_never_the_reference() -> None:
    assert cannot_win(_cand("vision", "inductor", "bf16"), BOUNDS, best_p99=None) is None  # nothing to beat
    why = cannot_win(_cand("vision", "inductor", "bf16"), BOUNDS, best_p99=50.0)
    assert why is not None and "200.00 ms" in why and "50.00 ms" in why
    assert cannot_win(_cand("vision", "openvino", "fp32"), BOUNDS, best_p99=50.0) is None  # 20 ms floor
    assert cannot_win(_cand("vision", "eager", "fp32"), BOUNDS, best_p99=1.0) is None  # the reference
    assert cannot_win(_cand("vision", "openvino", "int8"), BOUNDS, best_p99=1.0) is None  # no int8 floor here
    assert cannot_win(_cand("vision", "openvino", "bf16"), None, best_p99=1.0) is None


def test_bounds_only_where_precisions_compete() -> None:
    assert not needs_bounds(("fp32",))
    assert needs_bounds(("fp32", "bf16")) and needs_bounds(("bf16", "int8"))


def test_timing_stops_after_the_probe_calls_of_a_slow_candidate() -> None:
    calls: list[int] = []
    config = PlanConfig(budget_ms=None, tolerance=parse_tolerance("cos:0.99"), warmup=1, iterations=20)
    slow = _cand("vision", "openvino", "fp32")
    assert not time_candidate(slow, lambda: calls.append(1), config, give_up_ms=-1.0)
    assert len(calls) == 1 + PROBE_CALLS and slow.latency is not None and slow.load_avg is not None
    calls.clear()
    assert time_candidate(slow, lambda: calls.append(1), config, give_up_ms=None)
    assert len(calls) == 1 + 20


def test_give_up_threshold_follows_the_stage_best_and_spares_the_reference() -> None:
    done = [_cand("vision", "openvino", "fp32", p99=10.0), _cand("denoise", "openvino", "fp32", p99=1.0)]
    assert give_up_ms(_cand("vision", "onnxruntime", "fp32"), done, "fast") == pytest.approx(
        GIVE_UP_RATIO * 10
    )
    assert give_up_ms(_cand("vision", "eager", "fp32"), done, "fast") is None
    assert give_up_ms(_cand("vision", "onnxruntime", "fp32"), done, "full") is None


def test_eta_and_bad_search_value() -> None:
    eta = Eta(total=4)
    assert eta.line(0).startswith("elapsed 0:00")
    eta.add(30.0)
    assert "about 1:30 left" in eta.line(1)
    with pytest.raises(ConfigError, match="--search must be fast or full"):
        PlanConfig(budget_ms=None, tolerance=parse_tolerance("cos:0.99"), search="quick")


def test_fast_default_leaves_inductor_out_where_openvino_runs() -> None:
    lines: list[str] = []
    got = fast_default_backends(("eager", "inductor", "onnxruntime", "openvino"), lines.append)
    from hotloop.compile.backends import get_backend

    if get_backend("openvino").unavailable_reason() is None:
        assert got == ("eager", "onnxruntime", "openvino") and "inductor left out" in lines[0]
    else:
        assert "inductor" in got and not lines
    assert fast_default_backends(("eager", "inductor"), lines.append) == ("eager", "inductor")


def test_compile_with_no_flags_runs_the_fast_search(tmp_path: Path) -> None:
    js = tmp_path / "plan.json"
    res = runner.invoke(
        app,
        [
            "compile",
            "toy:mlp",
            "-o",
            str(tmp_path / "art"),
            "--json",
            str(js),
            "--iters",
            "4",
            "--warmup",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    result = json.loads(js.read_text())
    backends = {c["backend"] for c in result["candidates"]}
    assert "inductor" not in backends and {"eager", "onnxruntime", "openvino"} <= backends
    assert "static int8 not tried" in " ".join(res.output.split())
    statuses = {c["status"] for c in result["candidates"]}
    assert statuses <= {"accepted", "rejected", "unavailable", "failed", "skipped"}


@pytest.mark.slow  # recorded episodes, then NNCF calibration on them: ~25 s
def test_a_demo_target_calibrates_static_int8_on_its_own_task(tmp_path: Path) -> None:
    """No --calibration: demo:conveyor-act records its calibration frames from conveyor-pick itself."""
    out, js = tmp_path / "art", tmp_path / "plan.json"
    res = runner.invoke(
        app,
        ["compile", "demo:conveyor-act", "-o", str(out), "--json", str(js), "--precisions", "fp32,int8",
         "--backends", "eager,openvino", "--variants", "plain", "--calibration-frames", "4", "--iters", "1",
         "--warmup", "0", "--threads", "1"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "frames recorded from the target's own task" in " ".join(res.output.split())
    candidates = json.loads(js.read_text())["candidates"]
    int8 = [c for c in candidates if c["precision"] == "int8" and c["backend"] == "openvino"]
    assert len(int8) == 2 and all(c["action"] is not None for c in int8), int8  # calibrated and judged
    calibration = json.loads((out / "manifest.json").read_text())["compression"]["calibration"]
    assert calibration["frames"] == 4 and calibration["dataset"].startswith("conveyor-pick start frames")
