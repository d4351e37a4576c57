"""The closed-loop rung's report: a success table and a smoothness table per strategy, two plots, and
RTC's jump relative to async. Evaluation itself is tested elsewhere; here run_eval is a stand-in."""

from hotloop.demo import closed_loop_rung as demo_rung


def test_rung_reports_success_jump_and_jerk_per_strategy(tmp_path, monkeypatch):
    from hotloop.closedloop import eval_run

    jumps = {"sync": 0.02, "async": 0.06, "rtc": 0.03, "rtc-soft": 0.006}

    def fake_run_eval(request, progress=True):
        ms = float(request.latency.split(":")[1])
        return {
            "strategy": {"name": request.strategy},
            "latency": {"kind": "fixed", "spec": request.latency, "ms": ms},
            "target": request.target,
            "task": request.task,
            "episodes": request.episodes,
            "successes": request.episodes - 1,
            "success_rate": (request.episodes - 1) / request.episodes,
            "success_ci95": [0.7, 0.99],
            "task_time_s": {"mean": 3.0, "std": 0.5},
            "jerk": 2000.0 + ms,
            "chunk_discontinuity": jumps[request.strategy],
            "chunk_jump_per_s": 2 * jumps[request.strategy],
            "errors": 0,
            "wall_s": 1.0,
            "per_episode": [],
        }

    monkeypatch.setattr(eval_run, "run_eval", fake_run_eval)
    out = demo_rung.run_rung(tmp_path, full=False, progress=False)
    latencies, per_point, at_zero = demo_rung.rung_plan(False)
    summary = out["summary"]
    assert set(summary["success"]) == {"sync", "async", "rtc", "rtc-soft"}
    assert summary["success"]["sync"]["0"]["episodes"] == at_zero
    assert summary["success"]["rtc"]["300"]["episodes"] == per_point
    assert summary["jump_over_async"]["rtc"]["200"] == 0.5
    assert abs(summary["jump_over_async"]["rtc-soft"]["300"] - 0.1) < 1e-12
    assert all(p.exists() and p.stat().st_size > 0 for p in out["plots"])
    assert (
        "rtc-soft" in out["html"]
        and "6.0 mm" in out["html"]
        and "60.0 mm" in out["html"]
        and "2300 m/s³" in out["html"]
    )
    assert (tmp_path / "closed_loop.json").exists() and len(latencies) == 3
