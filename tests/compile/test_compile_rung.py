"""`hotloop demo`'s compile rung writes its section: candidate table, speedup, roofline, closed-loop success."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hotloop.demo.compile_rung import CompileRungPlan, rung_plan
from hotloop.demo.headline import format_ms


def test_default_plan_stays_small_and_full_plan_is_pi05_small() -> None:
    default, full = rung_plan(False), rung_plan(True)
    assert default.vla_target == "demo:conveyor" and default.precisions == ("fp32",)
    assert full.vla_target == "pi05:small" and "bf16" in full.precisions and full.prompt_tokens == 20


@pytest.mark.slow
def test_compile_rung_writes_its_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hotloop.demo.compile_rung as demo_rung
    from hotloop.demo.report import DemoConfig, run_demo

    # One closed-loop episode each for the reference and the compiled plan: the rung's section is what is
    # checked, and each episode was ~10 s of this test.
    tiny = CompileRungPlan("pi05:tiny", ("eager",), ("fp32",), ("plain",), (4,), 3, 1, 2, 1)
    monkeypatch.setattr(demo_rung, "rung_plan", lambda full: tiny)
    rungs = run_demo(DemoConfig(out_dir=tmp_path, progress=False, only=("compile",)), log=lambda s: None)
    assert [r.error for r in rungs] == [None]
    summary = json.loads((tmp_path / "compile.json").read_text())
    assert summary["target"] == "pi05:tiny"
    assert {c["backend"] for c in summary["candidates"]} == {"eager"}
    assert summary["compile"]["prompt_buckets"] == [4, 12]
    assert summary["bench"]["speedup_p50"] > 0 and set(summary["bench"]["roofline"]["stages"]) == {
        "vision",
        "prefix",
        "denoise",
    }
    for name in ("reference", "compiled"):
        assert summary["demo_success"][name]["episodes"] == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["rungs"][0]["title"] == "Compiled plan: pi05:tiny"
    page = (tmp_path / "report.html").read_text()
    assert "Compiled plan: pi05:tiny" in page and "speedup p50" in page and "demo:conveyor success" in page
    bench, success = summary["bench"], summary["demo_success"]
    assert report["headline"][1:3] == [
        f"compiled plan of pi05:tiny: {bench['speedup_p50']:.2f}x faster than fp32 eager at p50, "
        f"{bench['speedup_p99']:.2f}x at p99 ({format_ms(bench['plan_latency_ms']['p50'])} ms against "
        f"{format_ms(bench['reference_latency_ms']['p50'])} ms at p50); final-action cosine "
        f"{summary['compile']['action_cos_min']:.6f} (tolerance cos:0.995)",
        f"compiled demo:conveyor in closed loop at 0 ms: {success['compiled']['successes']}/1 against the "
        f"reference's {success['reference']['successes']}/1",
    ]
