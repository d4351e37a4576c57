"""The eval comparison (hotloop.closedloop.baseline) on hand-made runs: pairing, counts, verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from hotloop.closedloop.baseline import (
    DROP,
    GAIN,
    PointKey,
    compare_eval,
    compare_point,
    pair_points,
    regression_line,
)
from hotloop.measure.compare import NO_CHANGE, mcnemar_exact


def episode(
    seed: int, success: bool, jerk: float = 100.0, jump: float = 0.01, error: str | None = None
) -> dict:
    return {
        "seed": seed,
        "success": success,
        "task_time_s": 2.0 + seed / 100 if success else None,
        "jerk": jerk,
        "chunk_discontinuity": jump,
        "error": error,
    }


def run(strategy: str, latency: str, episodes: list[dict[str, Any]], trigger: int | None = None) -> dict:
    return {
        "target": "demo:conveyor",
        "task": "conveyor-pick",
        "difficulty": "medium",
        "strategy": {"name": strategy},
        "latency": {"kind": "fixed", "spec": latency},
        "length_unit": "m",
        "request": {
            "strategy": strategy,
            "latency": latency,
            "trigger_remaining": trigger,
            "episodes": len(episodes),
        },
        "per_episode": episodes,
    }


def test_points_pair_by_key_then_strategy_then_latency_then_the_only_one() -> None:
    base = [PointKey("async", None, "fixed:100"), PointKey("sync", None, "fixed:200")]
    now = [
        PointKey("async", None, "fixed:100"),  # the same point
        PointKey("async", None, "fixed:300"),  # same strategy
        PointKey("rtc-soft", None, "fixed:200"),  # same latency
        PointKey("rtc", None, "fixed:50"),  # nothing in common, two candidates: no partner
    ]
    assert pair_points(now, base) == [base[0], base[0], base[1], None]
    assert pair_points([PointKey("rtc", None, "fixed:50")], base[:1]) == [base[0]]  # the only point
    assert pair_points([PointKey("async", 10, "fixed:100")], [PointKey("async", 8, "fixed:100")]) == [
        PointKey("async", 8, "fixed:100")
    ]


def test_a_perturbed_point_pairs_only_with_the_same_perturbation() -> None:
    # A --sweep-perturb result: every point shares strategy and latency; the perturbation tells them apart.
    sweep = [PointKey("sync", None, "fixed:50", p) for p in (None, "lighting:0.5", "blur:1")]
    assert pair_points(sweep[::-1], sweep) == sweep[::-1]
    assert pair_points([PointKey("sync", None, "fixed:50", "occlusion:0.08")], sweep) == [None]
    assert PointKey("sync", None, "fixed:50", "blur:1").label == "sync fixed:50 (blur:1)"


def test_paired_counts_metrics_and_unpaired_seeds() -> None:
    then = [episode(s, s < 8, jerk=100.0, jump=0.010) for s in range(10)]
    then.append(episode(10, True, error="boom"))  # crashed: left out of every count
    now = [episode(s, s not in (0, 1, 2) and s != 9 or s == 8, jerk=110.0, jump=0.004) for s in range(11)]
    now += [episode(s, s % 2 == 0) for s in range(20, 24)]  # only now
    then += [episode(s, True) for s in range(30, 34)]  # only then
    c = compare_point(run("async", "fixed:100", then), run("rtc-soft", "fixed:100", now))
    p = c.paired
    assert p.pairs == 10  # seeds 0-9; seed 10 crashed in the baseline
    assert (p.only_baseline, p.only_now) == (3, 1)  # seeds 0, 1, 2 lost; seed 8 won
    assert p.p_value == pytest.approx(mcnemar_exact(3, 1))
    # Unpaired: 30-33 then; 20-23 now, and seed 10, whose baseline episode crashed (3 of 5 succeed).
    assert c.unpaired is not None and c.unpaired.baseline == (4, 4) and c.unpaired.current == (3, 5)
    assert c.jerk is not None and c.jerk.difference.estimate == pytest.approx(10.0) and c.jerk.pairs == 10
    assert c.chunk_jump is not None and c.chunk_jump.difference.estimate == pytest.approx(-0.006)
    assert c.task_time is not None and c.task_time.pairs == 5  # seeds 3-7 succeed in both
    assert [d.describe() for d in c.changed] == ["strategy async → rtc-soft"]
    assert "3 succeed only in the baseline, 1 only now (McNemar exact p = 0.625)" in c.sentence()
    assert c.verdict == NO_CHANGE


def test_verdicts_and_the_regression_line() -> None:
    good = [episode(s, True) for s in range(12)]
    bad = [episode(s, s < 2) for s in range(12)]
    drop = compare_eval([run("async", "fixed:100", good)], [run("async", "fixed:200", bad)])
    assert [c.verdict for c in drop] == [DROP]
    line = regression_line(drop, "B.json")
    assert line is not None and line.startswith(
        "regression: success fell against B.json: async fixed:200 -83 ("
    )
    assert "10 only then, 0 only now" in line
    gain = compare_eval([run("async", "fixed:200", bad)], [run("async", "fixed:100", good)])
    assert [c.verdict for c in gain] == [GAIN] and regression_line(gain, "B.json") is None
    # No shared seed: the unpaired interval decides.
    apart = compare_eval(
        [run("async", "fixed:100", [episode(s, True) for s in range(40)])],
        [run("async", "fixed:100", [episode(s, s < 5) for s in range(100, 140)])],
    )
    assert apart[0].paired.pairs == 0 and apart[0].verdict == DROP
    assert "no seed in common" in apart[0].sentence()


def test_an_artifact_against_its_target_names_the_change() -> None:
    """A compiled artifact is compared with the target it was compiled from (the same policy): the
    sentence says the target changed, not that the run was repeated."""
    then = [episode(s, True) for s in range(4)]
    now_run = {**run("sync", "fixed:0", [episode(s, s != 0) for s in range(4)]), "target": "runs/student"}
    c = compare_point(run("sync", "fixed:0", then), now_run)
    assert [d.describe() for d in c.changed] == ["target demo:conveyor → runs/student"]
    assert "(changed: target demo:conveyor → runs/student)" in c.sentence()
    same = compare_point(run("sync", "fixed:0", then), run("sync", "fixed:0", then))
    assert "(changed: nothing (a rerun))" in same.sentence()
