"""Other work on the machine: how busy the CPUs are now, and busy processes to time a target beside.

Why: on 2 cores, eager PyTorch with two OpenMP threads slowed ~25x and OpenVINO ~10x when other
processes ran (docs/compile.md). A ratio measured beside other work is fiction, so the planner checks
the machine is quiet before it times anything (`measure_load`, `check_quiet`); and a robot computer
always runs its drivers beside the policy, so `hotloop bench --contend N` measures what N busy
processes do to a plan's p50 and p99 (`Contenders`, `run_contended`).

`measure_load` reads /proc/stat twice: the CPUs' busy share over a short window while this process
sleeps, in CPUs' worth of work (1.0 = one core fully busy). Unlike the load average (a 1-minute mean
that still shows a job that ended 30 s ago, and counts waiting threads), it says what runs now.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError

PROC_STAT = Path("/proc/stat")
# CPUs' worth of other work above which the planner will not time (half a core: one busy helper
# process on 2 cores reads ~1.0; a quiet desktop or CI runner ~0.0-0.1).
DEFAULT_MAX_LOAD = 0.5
_IDLE_FIELDS = (3, 4)  # idle, iowait in a /proc/stat cpu line (after the name)


@dataclass(frozen=True)
class CpuLoad:
    """What the usable CPUs were doing over `window_s` (this process asleep)."""

    busy_cpus: float | None  # CPUs' worth of work by other processes; None where /proc/stat is missing
    load_avg_1m: float
    cpus: int
    window_s: float

    @property
    def level(self) -> float:
        """The figure compared with --max-load: busy CPUs now, else the 1-minute load average."""
        return self.busy_cpus if self.busy_cpus is not None else self.load_avg_1m

    def describe(self) -> str:
        now = f"{self.busy_cpus:.2f} CPUs busy now" if self.busy_cpus is not None else "busy share unknown"
        return f"{now} (load average {self.load_avg_1m:.2f}, {self.cpus} usable CPUs)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cpu_times(cpus: set[int], stat: Path = PROC_STAT) -> tuple[int, int] | None:
    """(busy, total) jiffies summed over `cpus`, from the per-CPU lines of /proc/stat."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
        idle = sum(values[i] for i in _IDLE_FIELDS)
        total += sum(values)
        busy += sum(values) - idle
    return (busy, total) if total else None


def measure_load(window_s: float = 1.0, stat: Path = PROC_STAT) -> CpuLoad:
    """Busy CPUs (other processes' work) over `window_s`, among the CPUs this process may use."""
    cpus = os.sched_getaffinity(0)
    first = _cpu_times(cpus, stat)
    time.sleep(window_s)
    second = _cpu_times(cpus, stat)
    busy_cpus = None
    if first is not None and second is not None and second[1] > first[1]:
        busy_cpus = round(len(cpus) * (second[0] - first[0]) / (second[1] - first[1]), 3)
    return CpuLoad(busy_cpus, round(os.getloadavg()[0], 3), len(cpus), window_s)


def check_max_load(max_load: float) -> None:
    if not max_load >= 0:  # also NaN
        raise ConfigError(f"--max-load must be >= 0 CPUs of other work (got {max_load}); e.g. --max-load 0.5")


def check_quiet(
    max_load: float, force: bool, what: str, window_s: float = 1.0, doing: str = "times candidates"
) -> CpuLoad:
    """The machine's load now; ConfigError when it is above `max_load` and `force` is off."""
    load = measure_load(window_s)
    if load.level > max_load and not force:
        raise ConfigError(
            f"{what} {doing}, and this machine is busy: {load.describe()}, above --max-load "
            f"{max_load:g}. Timings beside other work are meaningless (eager torch slows ~25x on 2 busy "
            "cores): stop the other work and run again, or pass --force to time anyway (the load is "
            "recorded beside every figure)"
        )
    return load


def recorded_level(record: Any) -> float | None:
    """The highest load level in a result's `machine_load` record ({"start": CpuLoad dict, "end": ...}),
    None when it has none (a result written before loads were recorded)."""
    if not isinstance(record, dict):
        return None
    levels = []
    for part in record.values():
        if not isinstance(part, dict):
            continue
        level = part.get("busy_cpus")
        if not isinstance(level, int | float) or isinstance(level, bool):
            level = part.get("load_avg_1m")
        if isinstance(level, int | float) and not isinstance(level, bool) and level == level:
            levels.append(float(level))
    return max(levels) if levels else None


def busy_gate_line(level: float, max_load: float, what: str) -> str:
    """The one line a timing gate says instead of a verdict when `what` was timed on a busy machine."""
    return (
        f"error: machine busy: {what} with {level:.2f} CPUs of other work, above --max-load {max_load:g}; a "
        "slowdown measured beside other work is the other work's, so the gate does not judge it (exit 2, "
        "not 3): rerun on a quiet machine, or pass --force to judge anyway"
    )


# ---- busy processes --------------------------------------------------------------------------------

_SPIN = "while True:\n    pass\n"


class Contenders:
    """`count` processes that each keep one core busy (a pure-Python spin loop: a driver, a logger, a
    perception node), paused and resumed with SIGSTOP / SIGCONT so quiet and contended blocks can
    alternate without start-up cost. Unpinned: the scheduler places them, as it would other work."""

    def __init__(self, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 256:
            raise ConfigError(f"--contend must be from 0 to 256 busy processes (got {count})")
        self.count = count
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Contenders:
        for _ in range(self.count):
            self._procs.append(
                subprocess.Popen(
                    [sys.executable, "-S", "-c", _SPIN],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        self.pause()
        return self

    def _signal(self, sig: int) -> None:
        for p in self._procs:
            if p.poll() is None:
                os.kill(p.pid, sig)

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def __exit__(self, *exc: object) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()  # SIGKILL works on a stopped process too
        for p in self._procs:
            p.wait()
        self._procs.clear()


@contextmanager
def contended(contenders: Contenders) -> Iterator[None]:
    contenders.resume()
    try:
        yield
    finally:
        contenders.pause()


__all__ = [
    "DEFAULT_MAX_LOAD",
    "Contenders",
    "CpuLoad",
    "check_max_load",
    "busy_gate_line",
    "check_quiet",
    "contended",
    "recorded_level",
    "measure_load",
]
