"""The latency harness: warm-up, timed iterations, per-stage breakdown, interleaved comparison.

A measurement changes one variable at a time (R1.6): the comparison target runs interleaved with the
target in the same process and the same minutes, so the ratio survives a noisy shared machine.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError
from hotloop.measure.case import BenchCase
from hotloop.measure.fingerprint import machine_fingerprint
from hotloop.measure.stages import StageTimer
from hotloop.measure.stats import LatencyStats

TOTAL_STAGE = "total"
MAX_THREADS = 1024  # torch starts them all at once; more is a typo, not a setting


@dataclass(frozen=True)
class BenchConfig:
    warmup: int = 20
    iterations: int = 200
    threads: int | None = None  # torch intra-op threads; None leaves the library default
    pin: tuple[int, ...] | None = None  # CPU affinity for this process
    gc_enabled: bool = False  # garbage collection is held off in the timed region unless asked
    # With --compare: an untimed pause before each call, so that the other library's worker threads,
    # which spin for a while after their call (OpenMP's wait policy in torch, OpenVINO's own pool), have
    # gone idle. On 2 cores an OpenVINO plan timed right after an eager torch call measured p90 10.5 ms
    # against 2.8 ms alone, and the torch reference drifted by a third between runs.
    settle_ms: float = 0.0
    progress: bool = True
    # Roofline: a target that states its analytic work (info["work"]) gets per-stage shares of this
    # machine's matmul peaks, read from this cache (None: ~/.cache/hotloop/roofline) or measured once.
    roofline: bool = True
    roofline_cache: Path | None = None
    # --contend N: N busy processes beside the target in alternate blocks (quiet, busy, busy, quiet, ...;
    # `contend_blocks` of each), so the inflation they cause is measured in the same minutes.
    contend: int = 0
    contend_blocks: int = 4

    def settings(self) -> dict[str, Any]:
        """What a result records of how it was measured (its JSON's `config`)."""
        return {
            "warmup": self.warmup,
            "iterations": self.iterations,
            "threads": self.threads,
            "pin": list(self.pin) if self.pin else None,
            "gc_enabled": self.gc_enabled,
            "contend": self.contend,
        }

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ConfigError(f"--iters must be >= 1 (got {self.iterations}); use e.g. --iters 200")
        if self.warmup < 0:
            raise ConfigError(f"--warmup must be >= 0 (got {self.warmup}); use e.g. --warmup 20")
        if not 0 <= self.settle_ms <= 10_000:
            raise ConfigError(
                f"--settle-ms must be from 0 to 10000 (got {self.settle_ms}); use e.g. --settle-ms 100"
            )
        if isinstance(self.contend, bool) or not 0 <= self.contend <= 256:
            raise ConfigError(f"--contend must be from 0 to 256 busy processes (got {self.contend})")
        if self.contend and not 1 <= self.contend_blocks <= self.iterations:
            raise ConfigError(
                f"--contend needs --iters >= {self.contend_blocks} (one per block; got {self.iterations})"
            )
        if self.threads is not None and not 1 <= self.threads <= MAX_THREADS:
            raise ConfigError(f"--threads must be from 1 to {MAX_THREADS} (got {self.threads})")
        if self.pin is not None:
            available = os.sched_getaffinity(0)
            missing = sorted(set(self.pin) - available)
            if not self.pin or missing:
                raise ConfigError(
                    f"--pin names CPUs {missing or list(self.pin)} that this process cannot use; "
                    f"available: {format_cpu_list(available)}"
                )


def parse_cpu_list(text: str, cpu_count: int | None = None) -> tuple[int, ...]:
    """Parse a Linux CPU list such as "0-3,6" into (0, 1, 2, 3, 6); every CPU must exist on this machine
    (ids below `cpu_count`, default `os.cpu_count()`).

    The bound is checked before a range is expanded, so "0-1000000000" is refused at once.
    """
    ranges: list[tuple[int, int]] = []
    try:
        for part in text.split(","):
            part = part.strip()
            lo, hi = (int(p) for p in part.split("-", 1)) if "-" in part else (int(part), int(part))
            if lo > hi or lo < 0:
                raise ValueError
            ranges.append((lo, hi))
    except ValueError:
        raise ConfigError(f"cannot read CPU list {text!r}; write it like 0-3,6") from None
    count = cpu_count or os.cpu_count() or 1
    top = max(hi for _, hi in ranges)
    if top >= count:
        raise ConfigError(f"--pin {text!r}: CPU {top} does not exist; this machine has CPUs 0-{count - 1}")
    return tuple(sorted({c for lo, hi in ranges for c in range(lo, hi + 1)}))


def format_cpu_list(cpus: Any) -> str:
    return ",".join(str(c) for c in sorted(cpus))


@dataclass
class CompareResult:
    target: str
    latency: LatencyStats
    ratio_p50: float  # other_p50 / this_p50: how many times faster the target is at the median
    ratio_p99: float
    samples_ms: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "latency_ms": self.latency.to_dict(),
            "ratio_p50": self.ratio_p50,
            "ratio_p99": self.ratio_p99,
            "samples_ms": self.samples_ms,  # raw, like the target's: a replay or a re-analysis needs them
        }


@dataclass
class ContentionResult:
    """The target timed beside `processes` busy processes, in blocks alternating with quiet ones."""

    processes: int
    blocks: int
    latency: LatencyStats  # the contended samples
    inflation_p50: float  # contended / quiet
    inflation_p99: float
    samples_ms: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "processes": self.processes,
            "blocks": self.blocks,
            "latency_ms": self.latency.to_dict(),
            "inflation_p50": self.inflation_p50,
            "inflation_p99": self.inflation_p99,
            "samples_ms": self.samples_ms,
        }


@dataclass
class BenchResult:
    target: str
    iterations: int
    warmup: int
    latency: LatencyStats
    stages: dict[str, LatencyStats]
    samples_ms: list[float]
    env: dict[str, Any]
    device_stages: dict[str, LatencyStats] = field(default_factory=dict)
    compare: CompareResult | None = None
    info: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    roofline: dict[str, Any] | None = None  # {"peaks": MatmulPeaks dict | None, "stages": {...}}
    # Per-iteration host time of each stage (0.0 where a stage did not run in an iteration, as in
    # `stages`): what `--baseline` resamples to put an interval on each stage's ratio.
    stage_samples_ms: dict[str, list[float]] = field(default_factory=dict)
    contention: ContentionResult | None = None  # with --contend: the same target beside busy processes

    @property
    def jitter_warning(self) -> bool:
        return self.latency.jitter_warning

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "target": self.target,
            "iterations": self.iterations,
            "warmup": self.warmup,
            "latency_ms": self.latency.to_dict(),
            "rate_hz": {"p50": self.latency.rate_hz_p50, "p99": self.latency.rate_hz_p99},
            "stages": {name: s.to_dict() for name, s in self.stages.items()},
            "jitter_warning": self.jitter_warning,
            "env": self.env,
            "compare": self.compare.to_dict() if self.compare else None,
            "samples_ms": self.samples_ms,
            "info": self.info,
            "config": self.config,
            "roofline": self.roofline,
            "stage_samples_ms": self.stage_samples_ms,
            "contention": self.contention.to_dict() if self.contention else None,
        }
        if self.device_stages:
            # GPU time per stage from device events; the gap to host time is launch and sync cost (R1.4).
            out["device_stages"] = {name: s.to_dict() for name, s in self.device_stages.items()}
            out["sync_gap_ms"] = {
                name: self.stages[name].p50 - s.p50
                for name, s in self.device_stages.items()
                if name in self.stages
            }
        return out


@contextmanager
def machine_settings(config: BenchConfig) -> Iterator[None]:
    """Apply threads and CPU affinity for the duration of a measurement, then restore them.

    Apply before the target is built: worker threads a library has already started keep their affinity.
    """
    old_affinity = os.sched_getaffinity(0)
    old_threads: int | None = None
    if config.threads is not None:
        import torch

        old_threads = torch.get_num_threads()
        torch.set_num_threads(config.threads)
    if config.pin is not None:
        os.sched_setaffinity(0, config.pin)
    try:
        yield
    finally:
        if config.pin is not None:
            os.sched_setaffinity(0, old_affinity)
        if old_threads is not None:
            import torch

            torch.set_num_threads(old_threads)


@dataclass
class _Samples:
    total: list[float] = field(default_factory=list)
    host: dict[str, list[float]] = field(default_factory=dict)
    device: dict[str, list[float]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)


def _time_once(
    case: BenchCase, timer: StageTimer, record: _Samples | None, checked: set[int] | None = None
) -> None:
    """One timed call of `case`. The first call of each case (`checked` holds those done) has its
    output checked for NaN / inf after the clock stopped (`check_output`)."""
    sync = _device_sync(case.device)
    timer.begin_iteration()
    t0 = time.perf_counter_ns()
    out = case.run(timer)
    if sync is not None:
        sync()  # the result is only usable once the device is done: count that wait
    total = (time.perf_counter_ns() - t0) / 1e6
    host, device = timer.end_iteration()
    if checked is not None and id(case) not in checked:
        checked.add(id(case))
        check_output(case, out)
    if record is None:
        return
    record.total.append(total)
    for name, ms in host.items():
        record.host.setdefault(name, []).append(ms)
    for name, ms in device.items():
        record.device.setdefault(name, []).append(ms)
    record.order = timer.stage_order


def check_output(case: BenchCase, output: Any) -> None:
    """Stop on a case whose output holds NaN or inf (checked on its first call, outside the timing): the
    latency of a broken model measures nothing, and a robot could never use its answer."""
    from hotloop.errors import NonFiniteOutputError
    from hotloop.finite import non_finite_output

    where = non_finite_output(output)
    if where is not None:
        raise NonFiniteOutputError(
            f"{case.name} answered non-finite values (NaN or inf; {where}); its weights or inputs overflow, "
            "so its latency means nothing: check it with `hotloop verify`"
        )


def _device_sync(device: str) -> Any:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return None


def _stage_samples(samples: _Samples, iterations: int) -> dict[str, list[float]]:
    # A stage that ran in only some iterations counts as 0 ms in the others.
    return {
        name: (values := samples.host.get(name, [])) + [0.0] * (iterations - len(values))
        for name in samples.order
    }


def _summarise(
    samples: _Samples, iterations: int
) -> tuple[LatencyStats, dict[str, LatencyStats], dict[str, LatencyStats]]:
    stages = {name: LatencyStats.from_samples(v) for name, v in _stage_samples(samples, iterations).items()}
    total = LatencyStats.from_samples(samples.total)
    stages[TOTAL_STAGE] = total
    device = {name: LatencyStats.from_samples(v) for name, v in samples.device.items()}
    return total, stages, device


def _settle(seconds: float) -> None:
    """The untimed pause of `--settle-ms` (its own function, so a test can watch it)."""
    time.sleep(seconds)


def run_bench(case: BenchCase, config: BenchConfig, compare: BenchCase | None = None) -> BenchResult:
    """Warm up, then time `config.iterations` runs of `case` (and of `compare`, interleaved)."""
    cases = [case] if compare is None else [case, compare]
    checked: set[int] = set()  # the cases whose first output was checked for NaN / inf
    timers = [StageTimer(cuda=c.device.startswith("cuda")) for c in cases]
    records = [_Samples() for _ in cases]

    from hotloop.progress import Progress

    if config.contend and compare is not None:
        raise ConfigError("--contend times one target against itself quiet; drop --compare (or run twice)")
    timed = config.iterations * (2 if config.contend else 1)
    with Progress(config.warmup + timed, f"bench {case.name}", "it", enabled=config.progress) as bar:
        for _ in range(config.warmup):
            for c, t in zip(cases, timers, strict=True):
                _time_once(c, t, None, checked)
            bar.update(1, "warm-up")
        gc.collect()
        busy = _Samples()  # the contended samples (--contend)
        gc_was_enabled = gc.isenabled()
        if not config.gc_enabled:
            gc.disable()
        try:
            if config.contend:
                _time_contended(case, timers[0], records[0], busy, config, bar, checked)
            else:
                for i in range(config.iterations):
                    # Alternate who goes first so neither target always runs on a warmer cache.
                    order = range(len(cases)) if i % 2 == 0 else reversed(range(len(cases)))
                    for k in order:
                        if config.settle_ms and len(cases) > 1:
                            _settle(config.settle_ms / 1e3)
                        _time_once(cases[k], timers[k], records[k], checked)
                    bar.update(1, "timed")
        except KeyboardInterrupt:  # Ctrl-C while timing: what was measured is still the user's
            raise BenchInterrupted(_partial_result(cases, records, busy, config)) from None
        finally:
            if gc_was_enabled:
                gc.enable()

    total, stages, device = _summarise(records[0], config.iterations)
    compare_result = None
    if compare is not None:
        other = LatencyStats.from_samples(records[1].total)
        compare_result = CompareResult(
            target=compare.name,
            latency=other,
            ratio_p50=other.p50 / total.p50,
            ratio_p99=other.p99 / total.p99,
            samples_ms=records[1].total,
        )
    contention = None
    if config.contend:
        loaded = LatencyStats.from_samples(busy.total)
        contention = ContentionResult(
            processes=config.contend,
            blocks=config.contend_blocks,
            latency=loaded,
            inflation_p50=loaded.p50 / total.p50,
            inflation_p99=loaded.p99 / total.p99,
            samples_ms=busy.total,
        )
    return BenchResult(
        contention=contention,
        roofline=_roofline(case, stages, config),
        target=case.name,
        iterations=config.iterations,
        warmup=config.warmup,
        latency=total,
        stages=stages,
        samples_ms=records[0].total,
        stage_samples_ms=_stage_samples(records[0], config.iterations),
        env=machine_fingerprint(threads=config.threads),
        device_stages=device,
        compare=compare_result,
        info=dict(case.info),
        config=config.settings(),
    )


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during the timed iterations; `partial` holds the samples measured before it (a dict in
    the shape of `BenchResult.to_dict()`'s raw parts, marked "interrupted": true), for `--json`."""

    def __init__(self, partial: dict[str, Any]) -> None:
        super().__init__()
        self.partial = partial


def _partial_result(
    cases: list[BenchCase], records: list[_Samples], busy: _Samples, config: BenchConfig
) -> dict[str, Any]:
    """The raw samples of an interrupted run, with the summary of those that exist: an interrupted
    measurement is still a measurement (a long run stopped at 90 % keeps its 90 %)."""
    main = records[0]
    done = len(main.total)
    out: dict[str, Any] = {
        "target": cases[0].name,
        "interrupted": True,
        "completed_iterations": done,
        "iterations": config.iterations,
        "warmup": config.warmup,
        "latency_ms": LatencyStats.from_samples(main.total).to_dict() if done else None,
        "samples_ms": main.total,
        "stage_samples_ms": _stage_samples(main, done),
        "env": machine_fingerprint(threads=config.threads),
        "info": dict(cases[0].info),
        "config": config.settings(),
    }
    if len(cases) > 1:
        out["compare"] = {"target": cases[1].name, "samples_ms": records[1].total}
    if config.contend:
        out["contention"] = {"processes": config.contend, "samples_ms": busy.total}
    return out


def _block_sizes(iterations: int, blocks: int) -> list[int]:
    base, extra = divmod(iterations, blocks)
    return [base + (1 if b < extra else 0) for b in range(blocks)]


def _time_contended(
    case: BenchCase,
    timer: StageTimer,
    quiet: _Samples,
    busy: _Samples,
    config: BenchConfig,
    bar: Any,
    checked: set[int],
) -> None:
    """`iterations` quiet and `iterations` contended samples in alternating blocks, ABBA order (quiet,
    busy, busy, quiet, ...) so a drift over the run weighs on both alike."""
    from hotloop.measure.contention import Contenders, contended

    sizes = _block_sizes(config.iterations, config.contend_blocks)
    with Contenders(config.contend) as others:
        for b, size in enumerate(sizes):
            pair = ("quiet", "busy") if b % 2 == 0 else ("busy", "quiet")
            for kind in pair:
                if kind == "busy":
                    with contended(others):
                        time.sleep(0.05)  # let the scheduler spread them before timing
                        for _ in range(size):
                            _time_once(case, timer, busy, checked)
                            bar.update(1, f"{config.contend} busy")
                else:
                    for _ in range(size):
                        _time_once(case, timer, quiet, checked)
                        bar.update(1, "quiet")


def _roofline(case: BenchCase, stages: dict[str, LatencyStats], config: BenchConfig) -> dict[str, Any] | None:
    work = case.info.get("work")
    if not config.roofline or not work or case.device != "cpu":
        return None  # peaks are measured for the CPU; a GPU roofline needs its own peaks
    from hotloop.measure.roofline import StageWork, cached_peaks, roofline

    peaks = cached_peaks(config.roofline_cache)
    rows = roofline(
        {name: StageWork(**w) for name, w in work.items()},
        {name: s.p50 for name, s in stages.items()},
        peaks,
    )
    return {"peaks": peaks.to_dict() if peaks is not None else None, "stages": rows}
