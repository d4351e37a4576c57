"""The watchdog on the wall clock: how late, in milliseconds, the runner switches to its fallback after a
missed deadline or a failed inference (an engine that stalls, raises or returns NaN), against the
control period. The tests check the same thing exactly on a fake clock; this is the real clock, so run
it on an otherwise idle machine.

    PYTHONPATH=src python benchmarks/realtime_watchdog.py --control-hz 50 --repeats 20 --json watchdog.json

For every (fault, fallback) pair it runs a short async session with a worker-thread engine whose third
inference fails, and reports, over the repeats, the worst and median delay from the moment the miss or
fault was due (the deadline, or the failed result being ready) to the first fallback command sent.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "realtime"))

from rt_fakes import FakeRobot, FaultyPolicy, SmallEnginePolicy  # noqa: E402

from hotloop.realtime.clock import MonotonicClock  # noqa: E402
from hotloop.realtime.runner import WallClockRunner  # noqa: E402
from hotloop.realtime.scheduler import SchedulerConfig  # noqa: E402
from hotloop.realtime.strategies import StrategyConfig, make_strategy  # noqa: E402
from hotloop.realtime.watchdog import WatchdogConfig  # noqa: E402


def one_run(fault: str, fallback: str, control_hz: float) -> dict[str, Any]:
    clock = MonotonicClock(tick_s=0.0005)
    policy = FaultyPolicy("block" if fault == "stall" else fault, fault_call=2)
    runner = WallClockRunner(
        policy,
        FakeRobot(np.array([0.1, 0.0, 0.2, 0.0])),
        lambda h: make_strategy("async", StrategyConfig(h)),
        control_hz,
        config=SchedulerConfig(watchdog=WatchdogConfig(fallback)),
        clock=clock,
        fallback_policy=SmallEnginePolicy() if fallback == "engine" else None,
    )
    period_s = 1.0 / control_hz
    timer = threading.Timer(22 * period_s, policy.release.set)  # the stall outlasts the deadline
    timer.start()
    report = runner.run(32 * period_s)
    timer.cancel()
    policy.release.set()
    trigger = next(e for e in report.events if e.kind in ("miss", "fault"))
    switch = next(e for e in report.events if e.kind == "switch")
    sent = next(t for t, _ in report.commands if t >= switch.tick)
    due = trigger.due if trigger.due is not None else trigger.tick
    return {
        "switch_ms": (switch.tick - due) * clock.tick_s * 1e3,
        "command_ms": (sent - due) * clock.tick_s * 1e3,
        "returned": any(e.kind == "return" for e in report.events),
        "overruns": report.counters["overruns"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--control-hz", type=float, default=50.0)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    period_ms = 1e3 / args.control_hz
    rows = []
    for fault in ("stall", "raise", "nan"):
        for fallback in ("hold", "continue", "stop", "engine"):
            runs = [one_run(fault, fallback, args.control_hz) for _ in range(args.repeats)]
            lat = [r["command_ms"] for r in runs]
            row = {
                "fault": fault,
                "fallback": fallback,
                "command_ms_median": statistics.median(lat),
                "command_ms_max": max(lat),
                "within_period": all(x < period_ms for x in lat),
                "returned": all(r["returned"] for r in runs),
                "overruns": sum(r["overruns"] for r in runs),
            }
            rows.append(row)
            print(
                f"{fault:6s} {fallback:9s} first fallback command after "
                f"{row['command_ms_median']:.2f} ms (median), {row['command_ms_max']:.2f} ms (max); "
                f"period {period_ms:.0f} ms; within period: {row['within_period']}; returned: {row['returned']}"
            )
    if args.json is not None:
        from hotloop.io import atomic_write_json
        from hotloop.measure.fingerprint import machine_fingerprint

        atomic_write_json(
            args.json,
            {
                "control_hz": args.control_hz,
                "repeats": args.repeats,
                "rows": rows,
                "env": machine_fingerprint(),
            },
        )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
