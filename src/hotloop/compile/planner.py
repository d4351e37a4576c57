"""The planner: for each stage and candidate (backend x precision x variant), check numerics against the
fp32 reference, measure latency here, and keep the plan with the lowest end-to-end p99 within tolerance.

The stages come from the target's family (`hotloop.families.protocol.StageSpec`); a loop stage is its step
engine run once per table row or its loop engine, the whole unrolled loop as one graph (pi: vision,
prefix, denoise). A candidate is accepted when its own outputs are finite and the
final actions of the reference pipeline with only this stage replaced stay within the tolerance; the
chosen combination is checked again as a whole (errors add up), and a stage falls back to its most
accurate accepted candidate until the whole passes. Reference and plan are then timed interleaved.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from hotloop.compile.backends import backend_names, get_backend
from hotloop.compile.backends.base import BackendError, Graph, Runner
from hotloop.compile.validate import (
    ActionAgreement,
    OutputAgreement,
    Tolerance,
)
from hotloop.errors import ConfigError
from hotloop.measure.stats import LatencyStats
from hotloop.records import plain_fields

KNOWN_RECIPES = ("plain", "fused")  # the union over families (`Capabilities.recipes`)
DEFAULT_BACKENDS = ("eager", "inductor", "onnxruntime", "openvino", "tensorrt")


@dataclass(frozen=True)
class PlanConfig:
    """What to try and how hard to measure. `iterations` rounds time each candidate and the final pair."""

    budget_ms: float | None  # None: no budget, the fastest plan within tolerance
    tolerance: Tolerance
    backends: tuple[str, ...] = DEFAULT_BACKENDS
    precisions: tuple[str, ...] = ("fp32", "bf16")
    inductor_modes: tuple[str, ...] = ("default",)
    variants: tuple[str, ...] = ("plain", "fused")  # sub-engine recipes; a family tries those it has
    warmup: int = 3
    iterations: int = 20
    threads: int | None = None
    pin: tuple[int, ...] | None = (
        None  # CPUs the plan was timed on (--reserve-cores); the engine applies them
    )
    progress: bool = True
    # "fast": fastest-expected first, skip what the roofline says cannot win, stop timing the slow
    # (`hotloop.compile.search`); "full": every candidate, fully timed. The CLI defaults to fast.
    search: str = "full"
    buckets: tuple[int, ...] = ()  # prompt-length buckets below the full prompt (pi targets); () = none
    # Quantized precisions (hotloop.compress): calibration observations for static int8, and the
    # layers a mixed-precision plan keeps fp32 ({sub-engine: [layer names]}).
    calibration: Any = None
    fp32_layers: dict[str, list[str]] = field(default_factory=dict)
    # This machine's earlier candidate timings (`hotloop.compile.timing_cache.TimingCache`): read to order
    # and skip candidates in a fast search, written with every candidate timed; None: neither.
    timing_cache: Any = None
    overwrite: bool = False  # --overwrite: the artifact may replace a folder hotloop did not write
    # --plan-memory-gb: the most resident memory planning may hold; a candidate whose estimate would pass
    # it is not tried (after finished stages make room), as when the machine has too little left.
    plan_memory_gb: float | None = None

    def __post_init__(self) -> None:
        if self.plan_memory_gb is not None and not 0 < self.plan_memory_gb < float("inf"):
            raise ConfigError(
                f"--plan-memory-gb must be > 0 (got {self.plan_memory_gb}); e.g. --plan-memory-gb 20"
            )
        if self.budget_ms is not None and not self.budget_ms > 0:
            raise ConfigError(f"--budget-ms must be > 0 (got {self.budget_ms}); e.g. --budget-ms 100")
        if self.iterations < 1:
            raise ConfigError(f"--iters must be >= 1 (got {self.iterations})")
        if self.threads is not None and (isinstance(self.threads, bool) or self.threads < 1):
            raise ConfigError(f"--threads must be >= 1 (got {self.threads}); e.g. --threads 2")
        if self.warmup < 0:
            raise ConfigError(f"--warmup must be >= 0 (got {self.warmup})")
        from hotloop.compile.search import check_search

        check_search(self.search)
        from hotloop.compile.backends import check_backend_names, check_precision_names

        check_backend_names(list(self.backends))
        check_precision_names(list(self.precisions))
        for v in self.variants:
            if v not in KNOWN_RECIPES:
                raise ConfigError(f"--variants: unknown variant {v!r}; use {' or '.join(KNOWN_RECIPES)}")
        bad = [b for b in self.buckets if not isinstance(b, int) or b < 1]
        if bad:
            raise ConfigError(
                f"--buckets sizes must be positive integers (got {bad}); e.g. --buckets 32,64,128"
            )
        if not self.backends:
            raise ConfigError("--backends is empty; name at least one, e.g. eager,openvino")


@dataclass
class Candidate:
    stage: str
    sub_engine: str
    backend: str
    precision: str
    options: dict[str, Any] = field(default_factory=dict)
    variant: str = "plain"
    status: str = "pending"  # accepted | rejected | unavailable | failed | skipped (cannot win)
    reason: str = ""
    outputs: list[OutputAgreement] = field(default_factory=list)
    action: ActionAgreement | None = None
    latency: LatencyStats | None = None
    compile_s: float | None = None
    load_avg: float | None = None  # the 1-minute load average when it was timed
    timed_calls: int | None = None  # calls its latency is over (fewer when its timing was stopped)
    cache_key: str | None = None  # its identity in the timing cache (`hotloop.compile.timing_cache`)
    graph_digest: str | None = None  # its sub-engine's content hash, the graph part of `cache_key`
    cached: Any = None  # a trusted `CachedTiming` of an earlier run here: orders and skips, never reported
    memory: dict[str, Any] | None = None  # estimated vs measured resident memory (`compile.peak_memory`)
    runner: Runner | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.sub_engine}:{self.variant}:{self.backend}:{self.precision}" + (
            f"[{opts}]" if opts else ""
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **plain_fields(self, until="reason"),
            "outputs": [o.to_dict() for o in self.outputs],
            "action": self.action.to_dict() if self.action else None,
            "latency_ms": {"p50": self.latency.p50, "p99": self.latency.p99} if self.latency else None,
            "compile_s": self.compile_s,
            "load_avg": self.load_avg,
            "memory": self.memory,
            "cached_latency_ms": None
            if self.cached is None
            else {
                "p50": self.cached.p50,
                "p99": self.cached.p99,
                "calls": self.cached.calls,
                "load_avg": self.cached.load_avg,
                "recorded": self.cached.recorded,
            },
        }


def candidate_specs(
    config: PlanConfig,
    sub_engines: tuple[str, ...],
    variants: tuple[str, ...] = ("plain",),
    stage_of: dict[str, str] | None = None,
) -> Iterator[Candidate]:
    """Every (sub-engine, backend, precision, options) to try, with availability decided up front.
    `stage_of` maps a sub-engine to the stage it implements (default: its own name)."""
    for sub, variant in ((s, v) for s in sub_engines for v in variants):
        stage = (stage_of or {}).get(sub, sub)
        for name in config.backends:
            backend = get_backend(name)
            reason = backend.unavailable_reason()
            for precision in config.precisions:
                modes: tuple[dict[str, Any], ...] = ({},)
                if name == "inductor":
                    modes = tuple({"mode": m} for m in config.inductor_modes)
                for opts in modes:
                    cand = Candidate(stage, sub, name, precision, dict(opts), variant)
                    why = reason or (
                        f"{name} has no {precision}" if precision not in backend.precisions else None
                    )
                    why = why or backend.precision_reason(precision)
                    if why:
                        cand.status, cand.reason = "unavailable", why
                    yield cand


def prepare(
    cand: Candidate, graph: Graph, threads: int | None, extra: dict[str, Any] | None = None
) -> Runner:
    options = {**cand.options, **(extra or {})}
    if threads is not None and cand.backend in ("onnxruntime", "openvino"):
        options["threads"] = threads
    return get_backend(cand.backend).prepare(graph, cand.precision, options)


def time_calls(fn: Callable[[], Any], warmup: int, iterations: int) -> LatencyStats:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return LatencyStats.from_samples(samples)


def time_candidate(
    cand: Candidate, fn: Callable[[], Any], config: PlanConfig, give_up_ms: float | None = None
) -> bool:
    """Time `cand` and record the load it was timed under. With `give_up_ms`: after the probe calls,
    a median above it stops the timing and returns False (the candidate is slower than one in hand)."""
    import os
    import statistics

    from hotloop.compile.search import PROBE_CALLS

    for _ in range(config.warmup):
        fn()
    samples: list[float] = []
    finished = True
    for _ in range(config.iterations):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
        if (
            give_up_ms is not None
            and len(samples) == PROBE_CALLS < config.iterations
            and statistics.median(samples) > give_up_ms
        ):
            finished = False
            break
    cand.latency = LatencyStats.from_samples(samples)
    cand.timed_calls = len(samples)
    cand.load_avg = round(os.getloadavg()[0], 3)
    return finished


# The final check times reference and plan in alternating blocks of this many calls, each block after one
# untimed call: each is timed back to back, as the search timed every candidate and as the artifact runs
# alone, while the blocks share the minutes (drift weighs on both). Alternating single calls instead times
# each runtime while the other's worker threads still spin (issue 38: OpenVINO timed slower alternating
# with ONNX Runtime than alone in the search; docs/compile.md).
FINAL_BLOCK = 4


def interleaved(
    fns: dict[str, Callable[[], Any]],
    warmup: int,
    iterations: int,
    block: int = 1,
    untimed: dict[str, Callable[[], Any]] | None = None,
) -> dict[str, list[float]]:
    """Run the callables round-robin (same minutes, same machine state) and return each one's samples.

    `block` > 1: each takes `block` timed calls in a row, after one untimed call (its thread pool wakes
    while the other's goes idle); the blocks alternate. `untimed[name]` is called for the untimed calls
    (warm-up included) instead of `fns[name]`, when given (a call that records nothing)."""
    quiet = {name: (untimed or {}).get(name, fn) for name, fn in fns.items()}
    for _ in range(warmup):
        for fn in quiet.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    while any(len(s) < iterations for s in samples.values()):
        for name, fn in fns.items():
            if block > 1:
                quiet[name]()
            for _ in range(min(block, iterations - len(samples[name]))):
                t0 = time.perf_counter_ns()
                fn()
                samples[name].append((time.perf_counter_ns() - t0) / 1e6)
    return samples


def slower_than_reference(reference: dict[str, Any] | None, plan: dict[str, Any]) -> bool:
    """Whether the final check timed the plan slower than the reference at the median (the figure the
    speed-up is stated at): such a plan is never written as the answer."""
    return reference is not None and plan["p50"] > reference["p50"]


def check_finite(cand: Candidate, outputs: tuple[Tensor, ...], names: tuple[str, ...]) -> bool:
    for name, out in zip(names, outputs, strict=True):
        if out.is_floating_point() and not bool(torch.isfinite(out).all()):
            cand.status, cand.reason = "rejected", f"output {name!r} has NaN or Inf"
            return False
    return True


def choose(candidates: list[Candidate], stage: str) -> Candidate | None:
    """The accepted candidate of `stage` with the lowest p99."""
    ok = [c for c in candidates if c.stage == stage and c.status == "accepted" and c.latency is not None]
    return min(ok, key=lambda c: c.latency.p99) if ok else None  # type: ignore[union-attr]


def most_accurate(candidates: list[Candidate], stage: str) -> Candidate | None:
    ok = [c for c in candidates if c.stage == stage and c.status == "accepted" and c.action is not None]
    return max(ok, key=lambda c: c.action.cosine) if ok else None  # type: ignore[union-attr]


def plan_summary(chosen: dict[str, Candidate]) -> dict[str, Any]:
    return {
        stage: {
            "sub_engine": c.sub_engine,
            "variant": c.variant,
            "backend": c.backend,
            "precision": c.precision,
            "options": c.options,
        }
        for stage, c in chosen.items()
    }


def stats_dict(samples: list[float], stages: dict[str, list[float]] | None = None) -> dict[str, Any]:
    s = LatencyStats.from_samples(samples)
    out: dict[str, Any] = {"p50": s.p50, "p90": s.p90, "p99": s.p99, "max": s.max, "mean": s.mean}
    if stages:
        out["stages"] = {k: asdict(LatencyStats.from_samples(v)) for k, v in stages.items() if v}
    return out


def output_table(candidates: list[Candidate]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in candidates]


def safe_prepare(
    cand: Candidate, graph: Graph, threads: int | None, extra: dict[str, Any] | None = None
) -> Runner | None:
    """Prepare, or mark the candidate failed with the backend's own message (the op it cannot run)."""
    t0 = time.perf_counter()
    try:
        runner = prepare(cand, graph, threads, extra)
    except BackendError as exc:
        cand.status, cand.reason = "failed", str(exc)
        return None
    cand.compile_s = round(time.perf_counter() - t0, 3)
    return runner


__all__ = [
    "Candidate",
    "PlanConfig",
    "backend_names",
    "candidate_specs",
    "choose",
    "interleaved",
    "most_accurate",
    "safe_prepare",
    "time_calls",
    "time_candidate",
]
