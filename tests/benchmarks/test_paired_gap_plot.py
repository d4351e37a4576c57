"""benchmarks/paired_gap_plot.py pairs plans with a teacher by episode seed across split eval files, counts
the discordant episodes with `hotloop compare`'s paired success (McNemar's p checked against scipy's binomial test) and refuses files
that are not eval JSONs by name."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "paired_gap_plot.py"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("paired_gap_plot", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _eval_json(path: Path, outcomes: dict[int, bool], errors: tuple[int, ...] = ()) -> str:
    rows = [{"seed": s, "success": ok, "error": None} for s, ok in outcomes.items()]
    rows += [{"seed": s, "success": False, "error": "RuntimeError: boom"} for s in errors]
    path.write_text(json.dumps({"per_episode": rows}))
    return str(path)


def test_plans_are_paired_by_seed_over_split_files_and_crashes_are_no_outcome(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scipy.stats import binomtest

    mod = _script()
    teacher = {s: s % 3 != 0 for s in range(100)}  # 66 successes
    plan = dict(teacher)
    for s in range(1, 13):  # 8 of these were teacher successes: lost; 4 were failures: won
        plan[s] = not teacher[s]
    t1 = _eval_json(tmp_path / "t1.json", {s: teacher[s] for s in range(60)})
    t2 = _eval_json(tmp_path / "t2.json", {s: teacher[s] for s in range(60, 100)})
    # the plan crashed on seed 99: that episode is paired with nothing
    p1 = _eval_json(tmp_path / "p.json", {s: plan[s] for s in range(99)}, errors=(99,))
    gap = mod.paired_gap(mod.load_outcomes(f"{t1},{t2}"), mod.load_outcomes(p1))
    lost = sum(teacher[s] and not plan[s] for s in range(99))
    won = sum(plan[s] and not teacher[s] for s in range(99))
    assert (gap.pairs, gap.only_baseline, gap.only_now) == (99, lost, won) == (99, 8, 4)
    assert gap.difference.estimate == pytest.approx((won - lost) / 99)
    assert gap.p_value == pytest.approx(binomtest(won, lost + won).pvalue)
    assert gap.difference.low < gap.difference.estimate < gap.difference.high

    out = tmp_path / "gap.png"
    assert (
        mod.main(
            ["--teacher", f"{t1},{t2}", "--plan", f"student=1 step={p1}", "--label", "async", "-o", str(out)]
        )
        == 0
    )
    assert out.stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "student=1 step" in printed and "8/4" in printed  # the name keeps its own '='


def test_bad_input_is_refused_by_name(tmp_path: Path) -> None:
    mod = _script()
    good = _eval_json(tmp_path / "t.json", {0: True})
    other = _eval_json(tmp_path / "o.json", {5: True})
    (tmp_path / "bench.json").write_text(json.dumps({"p50": 1.0}))
    with pytest.raises(SystemExit, match="missing.json"):
        mod.main(["--teacher", str(tmp_path / "missing.json"), "--plan", f"a={good}"])
    with pytest.raises(SystemExit, match="bench.json.*per_episode"):
        mod.main(["--teacher", str(tmp_path / "bench.json"), "--plan", f"a={good}"])
    with pytest.raises(SystemExit, match="NAME=JSON"):
        mod.main(["--teacher", good, "--plan", good])
    with pytest.raises(SystemExit, match="share no episode seed"):
        mod.main(["--teacher", good, "--plan", f"a={other}"])
    with pytest.raises(SystemExit, match="-o .*folder does not exist"):
        mod.main(["--teacher", good, "--plan", f"a={good}", "-o", str(tmp_path / "no" / "x.png")])
