"""How much of the candidate space the planner walks, in what order, and what it can leave out unmeasured.

`hotloop compile pi05:small` with every backend took ~20 minutes here: 48 candidates, most of the time in
inductor's compiles (1-4 min per engine) and in timing emulated-bf16 engines that could not win. The
`fast` search (the default) keeps the answer and drops that time:

- **Order:** within a stage, candidates run fastest-expected first: the lowest roofline bound (the
  stage's FLOPs at this machine's matmul peak for the candidate's precision), then backends by how
  cheap they are to prepare (OpenVINO, ONNX Runtime, eager, inductor). A good time is known early.
- **Cannot win:** a candidate whose roofline bound is already above the stage's best p99 so far is
  skipped unmeasured (no engine that runs those FLOPs at that precision here can beat it). Honest: the
  bound is a floor on any implementation's time, from peaks measured on this machine.
- **Stop timing the slow:** after `PROBE_CALLS` timed calls, a candidate whose median is above
  `GIVE_UP_RATIO` times the stage's best p99 is rejected as slower, its timing stopped.
- **inductor** is left out of the default backends on a CPU when OpenVINO is usable: its compiles take
  minutes per engine, and its plans have not beaten OpenVINO's timed interleaved (docs/compile.md: on
  pi05:small the full search picked inductor for two stages, and that plan ran 1.14x slower at p50 than
  the fast search's, interleaved; ../shared/PERFORMANCE-NOTES.md); `--backends ...,inductor` or
  `--search full` tries it.

- **Cached timings** (`hotloop.compile.timing_cache`): candidates timed here by an earlier run go first,
  fastest first, and one whose cached median is above `GIVE_UP_RATIO` times the cached p99 of a
  candidate accepted in this run is skipped unprepared. A cached figure is never reported.

Eager fp32 (the reference, sharing the model's weights) is never skipped nor cut short: it is the
fallback of last resort when a plan's stages together miss the tolerance. `full` walks everything in
the old order, the way to check what `fast` gives away.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hotloop.errors import ConfigError

SEARCHES = ("fast", "full")
PROBE_CALLS = 3
GIVE_UP_RATIO = 1.25
# Cheapest to prepare first: a file-based backend converts in seconds, inductor compiles for minutes.
BACKEND_ORDER = ("openvino", "onnxruntime", "tensorrt", "eager", "inductor")
PEAK_OF = {"fp32": "float32", "bf16": "bfloat16"}  # precisions whose compute a measured peak bounds


def check_search(search: str) -> str:
    if search not in SEARCHES:
        raise ConfigError(f"--search must be {' or '.join(SEARCHES)} (got {search!r})")
    return search


def fast_default_backends(backends: tuple[str, ...], log: Callable[[str], None]) -> tuple[str, ...]:
    """The default backend list of a fast search: inductor out where OpenVINO is usable here."""
    from hotloop.compile.backends import get_backend

    if "inductor" not in backends or "openvino" not in backends:
        return backends
    if get_backend("openvino").unavailable_reason() is not None:
        return backends
    log(
        "--search fast: inductor left out (its compiles take minutes per engine, and its plans did not beat "
        "OpenVINO's timed interleaved: docs/compile.md); add --backends ...,inductor or --search full to try it"
    )
    return tuple(b for b in backends if b != "inductor")


@dataclass
class RooflineBounds:
    """The least time a stage can take at a precision: its FLOPs at this machine's measured peak."""

    stage_gflop: dict[str, float]
    peaks_gflops: dict[str, float | None]

    def bound_ms(self, stage: str, precision: str) -> float | None:
        gflop, peak = self.stage_gflop.get(stage), self.peaks_gflops.get(PEAK_OF.get(precision, ""))
        if gflop is None or not peak:
            return None
        return 1e3 * gflop / peak

    @classmethod
    def of(cls, family: Any, cfg: Any, shape: Any, stages: list[str]) -> RooflineBounds | None:
        """Bounds for `stages`, or None when the family has no work model or no peak can be had."""
        from hotloop.measure.roofline import cached_peaks

        work = family.stage_work(cfg, shape, {s: "float32" for s in stages})
        if not work:
            return None
        peaks = cached_peaks()
        if peaks is None:
            return None
        return cls(
            stage_gflop={s: float(w["flops"]) / 1e9 for s, w in work.items() if w.get("flops")},
            peaks_gflops=dict(peaks.gflops),
        )


def needs_bounds(precisions: tuple[str, ...]) -> bool:
    """Bounds can prune only where precisions of different peaks compete (fp32 alone never bounds
    below an fp32 time); measuring the peaks costs a second or two, so only then."""
    return len(set(precisions)) > 1 and any(p in PEAK_OF for p in precisions)


def is_reference(cand: Any) -> bool:
    return bool(cand.backend == "eager" and cand.precision == "fp32")


def search_order(pending: list[Any], stages: list[str], bounds: RooflineBounds | None) -> list[Any]:
    """`pending` by stage (the family's order, which memory release relies on), fastest-expected first:
    those with a cached timing by its p99, then the others by their roofline bound."""

    def key(c: Any) -> tuple[int, float, int]:
        rank = BACKEND_ORDER.index(c.backend) if c.backend in BACKEND_ORDER else len(BACKEND_ORDER)
        cached = getattr(c, "cached", None)
        if cached is not None:
            return (0, cached.p99, rank)
        bound = bounds.bound_ms(c.stage, c.precision) if bounds is not None else None
        return (1, bound if bound is not None else math.inf, rank)

    return [c for stage in stages for c in sorted((c for c in pending if c.stage == stage), key=key)]


def cannot_win(cand: Any, bounds: RooflineBounds | None, best_p99: float | None) -> str | None:
    """Why `cand` cannot beat the stage's best so far, or None."""
    if bounds is None or best_p99 is None or is_reference(cand):
        return None
    bound = bounds.bound_ms(cand.stage, cand.precision)
    if bound is None or bound < best_p99:
        return None
    peak = bounds.peaks_gflops.get(PEAK_OF[cand.precision])
    return (
        f"cannot win: {bounds.stage_gflop[cand.stage]:.2f} GFLOP at this machine's {cand.precision} matmul "
        f"peak ({peak:.0f} GFLOP/s) take at least {bound:.2f} ms, above the stage's best p99 {best_p99:.2f} ms"
    )


def cached_slower(cand: Any, candidates: list[Any]) -> str | None:
    """Why `cand`'s cached timing says it cannot win, or None: its cached median is above
    `GIVE_UP_RATIO` x the cached p99 of a candidate of its stage that was accepted in this run (numerics
    checked, timed afresh). The comparison is between two timings of one earlier-run machine state."""
    if getattr(cand, "cached", None) is None or is_reference(cand):
        return None
    rivals = [
        c
        for c in candidates
        if c.stage == cand.stage and c.status == "accepted" and c.cached is not None and c.cached.complete
    ]
    if not rivals:
        return None
    best = min(rivals, key=lambda c: c.cached.p99)
    limit = GIVE_UP_RATIO * best.cached.p99
    if cand.cached.p50 <= limit:
        return None
    return (
        f"cached timing: median {cand.cached.p50:.2f} ms here ({cand.cached.recorded}), above {GIVE_UP_RATIO:g} x "
        f"the cached p99 {best.cached.p99:.2f} ms of {best.label}, accepted in this run"
    )


@dataclass
class Eta:
    """Time left, from the seconds each candidate took so far (a prepared one, not a skipped one)."""

    total: int
    started: float = field(default_factory=time.perf_counter)
    spent: list[float] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self.spent.append(seconds)

    def line(self, done: int) -> str:
        elapsed = time.perf_counter() - self.started
        if not self.spent:
            return f"elapsed {_clock(elapsed)}"
        left = (self.total - done) * sum(self.spent) / len(self.spent)
        return f"elapsed {_clock(elapsed)}, about {_clock(left)} left"


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}:{s:02d}"


def best_p99(candidates: list[Any], stage: str) -> float | None:
    times = [
        c.latency.p99
        for c in candidates
        if c.stage == stage and c.status == "accepted" and c.latency is not None
    ]
    return min(times) if times else None


def give_up_ms(cand: Any, candidates: list[Any], search: str) -> float | None:
    """The probe median above which `cand`'s timing stops (None: time it fully)."""
    if search != "fast" or is_reference(cand):
        return None
    best = best_p99(candidates, cand.stage)
    return None if best is None else GIVE_UP_RATIO * best


def skipped_stages(candidates: list[Any]) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for c in candidates:
        if c.status == "skipped":
            out[c.stage] = out.get(c.stage, 0) + 1
    return out
