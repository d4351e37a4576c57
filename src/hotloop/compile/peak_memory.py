"""The resident memory a planner candidate really took, beside what `memory_fit` estimated for it.

Linux keeps a process's peak resident set (VmHWM in /proc/self/status), and writing 5 to
/proc/self/clear_refs resets it to the current resident set (any process may, for itself; Linux >= 4.0).
The planner resets it before each candidate and reads it after: the candidate's peak growth is the most
the process held above where it started, while preparing, checking and timing it. Where the reset is
refused (another OS, a locked-down /proc), the figures are None and the JSON says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.process_memory import resident_bytes

MIB = 2**20
CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")


def reset_peak() -> bool:
    """Reset this process's peak resident set to its current one; False where that is refused."""
    try:
        CLEAR_REFS.write_text("5\n")
    except OSError:
        return False
    return True


def peak_bytes() -> int | None:
    """This process's peak resident set since the last reset (VmHWM), or None where unreadable."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass
class PeakMeter:
    """`meter = PeakMeter.start(estimate)`, the work, then `meter.finish()` -> figures in MiB."""

    before: int
    reset: bool
    estimated: int | None

    @classmethod
    def start(cls, estimated: int | None = None) -> PeakMeter:
        reset = reset_peak()
        return cls(resident_bytes(), reset, estimated)

    def finish(self) -> dict[str, Any]:
        after = resident_bytes()
        peak = peak_bytes() if self.reset else None
        return {
            "estimated_mb": None if self.estimated is None else round(self.estimated / MIB, 1),
            "rss_before_mb": round(self.before / MIB, 1),
            "peak_rss_mb": None if peak is None else round(peak / MIB, 1),
            "peak_growth_mb": None if peak is None else round((peak - self.before) / MIB, 1),
            "kept_mb": round((after - self.before) / MIB, 1),
        }


def planning_memory(candidates: list[Any], captures: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The planner's memory, measured: its peak resident set over the candidates and the calibration
    captures (`captures`: `calibration_memory.ensure_capture`'s figures), and per (backend, precision)
    the largest peak growth against the estimate `memory_fit` made (ratio > 1: it took more than
    estimated, the reserve covered the difference)."""
    measured = [c for c in candidates if c.memory is not None]
    peaks = [c.memory["peak_rss_mb"] for c in measured if c.memory["peak_rss_mb"] is not None]
    peaks += [c["peak_rss_mb"] for c in captures or [] if c["peak_rss_mb"] is not None]
    by_kind: dict[str, dict[str, Any]] = {}
    for c in measured:
        growth, estimate = c.memory["peak_growth_mb"], c.memory["estimated_mb"]
        if growth is None:
            continue
        row = by_kind.setdefault(f"{c.backend} {c.precision}", {"candidates": 0, "peak_growth_mb": 0.0})
        row["candidates"] += 1
        if growth >= row["peak_growth_mb"]:
            row["peak_growth_mb"], row["estimated_mb"] = growth, estimate
            row["measured_over_estimate"] = round(growth / estimate, 2) if estimate else None
    return {
        "peak_rss_mb": max(peaks) if peaks else None,
        "measured": bool(peaks),
        "by_backend": by_kind,
        "calibration": list(captures or []),
    }
