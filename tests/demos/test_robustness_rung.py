"""The robustness rung of `hotloop demo`: opt-in, and a real (tiny) run of plans under perturbations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hotloop.demo import robustness_rung
from hotloop.demo.report import RUNGS, DemoConfig, run_demo, selected_rungs
from hotloop.sim.perturb import parse_perturb


def test_robustness_rung_is_opt_in_and_its_points_parse() -> None:
    assert RUNGS["robustness"] not in selected_rungs(())
    assert RUNGS["robustness"] in selected_rungs((), full=True)
    assert robustness_rung.rung_episodes(True) > robustness_rung.rung_episodes(False)
    names = {parse_perturb(p)[0].name for p in robustness_rung.PERTURBATIONS}
    assert len(names) >= 5 and {"distractors", "occlusion", "box-size"} <= names


def test_robustness_rung_runs_each_plan_at_each_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scripted expert (reads no image, loads no model) keeps this cheap; the learned chain under a
    # scene perturbation is tested in tests/perception/test_perturb.py.
    monkeypatch.setattr(robustness_rung, "PLANS", (robustness_rung.Plan("expert", "expert:scripted"),))
    monkeypatch.setattr(robustness_rung, "PERTURBATIONS", ("distractors:2",))
    monkeypatch.setattr(robustness_rung, "rung_episodes", lambda full: 1)
    monkeypatch.setattr(robustness_rung, "WORKERS", 0)  # in this process: no worker start-up to pay
    rungs = run_demo(DemoConfig(out_dir=tmp_path, progress=False, only=("robustness",)), log=lambda s: None)
    assert len(rungs) == 1 and rungs[0].error is None, rungs[0].error
    runs = json.loads((tmp_path / "robustness.json").read_text())["runs"]
    assert [r["request"]["perturb"] for r in runs] == [None, "distractors:2"]
    assert [r.get("perturbation") for r in runs] == [None, {"distractors": 2.0}]
    assert all(r["episodes"] == 1 and r["errors"] == 0 and r["task"] == "conveyor-pick" for r in runs)
    table = rungs[0].summary["success"]
    assert set(table) == {"none", "distractors:2"} and all(set(c) == {"expert"} for c in table.values())
    assert (tmp_path / "robustness.png").stat().st_size > 0
    assert "distractors:2" in rungs[0].html
    headline = json.loads((tmp_path / "report.json").read_text())["headline"]
    none, worst = table["none"]["expert"], table["distractors:2"]["expert"]
    assert (
        f"  expert: {100 * none['success_rate']:.0f} %, {100 * worst['success_rate']:.0f} % under distractors:2"
        in headline
    )
