"""The families rung of `hotloop demo`: opt-in, and a real (tiny) run of its closed loop and compression."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hotloop.demo import families_rung
from hotloop.demo.report import RUNGS, DemoConfig, run_demo, selected_rungs


def test_families_rung_is_opt_in() -> None:
    assert RUNGS["families"] not in selected_rungs(())
    assert RUNGS["families"] in selected_rungs((), full=True)
    assert selected_rungs(("families",)) == [RUNGS["families"]]
    full, short = families_rung.rung_plan(True), families_rung.rung_plan(False)
    assert full.episodes > short.episodes and 0.0 in full.latencies_ms and len(full.latencies_ms) >= 3
    for demo in families_rung.DEMOS:  # every recipe parses with its family's own steps (ddim:N)
        assert [step.label for step in demo.recipe_steps()] == demo.recipe.split(",")
    act = next(d for d in families_rung.DEMOS if d.target == "demo:conveyor-act")
    assert "ensemble" in act.strategies  # ACT's temporal ensembling is one of its curves
    smolvla = next(d for d in families_rung.DEMOS if d.target == "demo:conveyor-smolvla")
    assert "rtc" in smolvla.strategies  # LeRobot's own real-time chunking for SmolVLA


@pytest.mark.slow  # closed-loop episodes and compression of every family: ~35 s
def test_families_rung_runs_closed_loop_and_compression(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SmolVLA (its compress recipe judges on its own task's start observations, the prompt padded to the
    # engines' slots) with fewer flow steps; ACT's quantize runs in tests/families/act.
    monkeypatch.setattr(
        families_rung,
        "DEMOS",
        (families_rung.FamilyDemo("demo:conveyor-smolvla", ("chunk",), "steps:5", "chunk", 0.9),),
    )
    monkeypatch.setattr(
        families_rung, "rung_plan", lambda full: families_rung.FamiliesPlan((0.0, 200.0), 1, 1, 2)
    )
    rungs = run_demo(DemoConfig(out_dir=tmp_path, progress=False, only=("families",)), log=lambda s: None)
    assert len(rungs) == 1 and rungs[0].error is None, rungs[0].error
    summary = json.loads((tmp_path / "families.json").read_text())
    policy = summary["policies"]["demo:conveyor-smolvla"]
    assert set(policy["success"]) == {"chunk"}
    points = policy["success"]["chunk"]
    assert set(points) == {"0", "200"}
    assert all(
        p["episodes"] == 1 and 0.0 <= p["success_rate"] <= 1.0 and p["errors"] == 0 for p in points.values()
    )
    compression = policy["compression"]["rungs"]
    assert [(r["step"], r["num_steps"]) for r in compression] == [("reference", 10), ("steps:5", 5)]
    assert all(r["episodes"] == 1 and r["action_cos"] > 0.9 for r in compression)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["rungs"][0]["plots"] == ["demo_conveyor-smolvla_closed_loop.png"]
    assert (tmp_path / "demo_conveyor-smolvla_closed_loop.png").stat().st_size > 0
    # The headline: the policy's curve and its compressed plan, figures from the report.
    headline = report["headline"]
    i = headline.index("  demo:conveyor-smolvla:")
    assert headline[i + 1].split() == ["0", "ms", "200", "ms"]
    rates = [f"{100 * points[ms]['success_rate']:.0f}" for ms in ("0", "200")]
    assert headline[i + 2].split() == ["chunk", rates[0], "%", rates[1], "%"]
    last = compression[-1]
    assert headline[i + 3].startswith(
        f"    compressed, steps:5: {last['speedup_p50']:.2f}x the reference's speed at p50, "
        f"action cosine {last['action_cos']:.4f}, success {100 * last['success_rate']:.0f} %"
    )
