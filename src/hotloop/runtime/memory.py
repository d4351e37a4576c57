"""An engine's resident memory and its cap (`--memory-cap-mb`, `Engine.load(memory_cap_mb=...)`).

What is counted against an engine: its *footprint*, the growth of this process's resident set over
`Engine.load` (weights, the preallocated input/output buffers, the backend's sessions, and the working
memory the warm-up runs made the backends allocate), plus its *running growth*, the net change of the
resident set measured across each of its own `infer` / `sample` calls after load. Several engines in one
process each keep their own account, so memory another engine (or the caller) takes between this
engine's calls is not charged to it. The check runs after every call while a cap is set: two reads of
/proc/self/statm, about 10 µs (nothing at all without a cap).

Limits, stated plainly:
- The resident set is process-wide. Memory that another thread allocates *during* this engine's call
  (another engine on another thread, the caller) is charged to it, and memory freed then is credited.
  Engines driven from one thread are accounted exactly, up to the allocator.
- It is a check after the fact, not a limit: a call that allocates past the cap finishes, then raises
  (and so does every later call while the engine stays over). It does not stop the kernel's OOM killer.
- The allocator decides when freed memory leaves the resident set, so a leak shows up as growth only
  once its pages are touched. The backends' libraries are imported before the footprint is measured,
  but their one-time process-wide costs (OpenVINO's CPU plugin state and kernel caches, say) are charged
  to the first engine that uses them: two loads of one OpenVINO pi05:tiny artifact measured about 190
  and 54 MiB. Give the first engine of a process that headroom.
- Device (CUDA) memory is not counted.
"""

from __future__ import annotations

from pathlib import Path

from hotloop.errors import MemoryCapError
from hotloop.process_memory import resident_bytes
from hotloop.targets import CAP_FLAG, check_cap

MIB = 2**20


class MemoryAccount:
    """One engine's resident-memory account: `load_started()`, `load_finished()`, then `call()` around
    each inference. Not thread-safe on its own: the engine calls it under its inference lock."""

    def __init__(self, artifact: Path, cap_mb: float | None) -> None:
        check_cap(cap_mb)
        self.artifact = artifact
        self.cap_mb = cap_mb
        self.footprint = 0  # bytes: resident growth over load + warm-up
        self.growth = 0  # bytes: net resident growth across this engine's own calls since
        self._load_start: int | None = None
        self._running = False

    def load_started(self) -> None:
        self._load_start = resident_bytes()

    def load_finished(self) -> None:
        """Fix the footprint and refuse the engine if it alone is over the cap."""
        assert self._load_start is not None, "load_started() first"
        self.footprint = resident_bytes() - self._load_start
        self._running = True
        if self.cap_mb is not None and self.footprint > self.cap_mb * MIB:
            raise MemoryCapError(
                f"{self.artifact}: loading and warming up took {self.footprint / MIB:.0f} MiB of resident "
                f"memory, over {CAP_FLAG} {self.cap_mb:g}; raise {CAP_FLAG} or compile a smaller plan"
            )

    @property
    def used(self) -> int:
        """Bytes charged to the engine: footprint plus running growth (never below the footprint)."""
        return self.footprint + max(self.growth, 0)

    def call(self) -> _Metered:
        return _Metered(self)

    def to_dict(self) -> dict[str, float | None]:
        return {
            "footprint_mb": self.footprint / MIB,
            "growth_mb": self.growth / MIB,
            "cap_mb": self.cap_mb,
        }


class _Metered:
    """`with account.call(): ...` measures the resident change across the block and checks the cap."""

    __slots__ = ("account", "start")

    def __init__(self, account: MemoryAccount) -> None:
        self.account = account
        self.start = 0

    def __enter__(self) -> None:
        if self.account.cap_mb is not None and self.account._running:
            self.start = resident_bytes()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        a = self.account
        if a.cap_mb is None or not a._running:
            return
        a.growth += resident_bytes() - self.start
        if exc_type is None and a.used > a.cap_mb * MIB:
            raise MemoryCapError(
                f"{a.artifact}: the engine's resident memory reached {a.used / MIB:.0f} MiB "
                f"({a.footprint / MIB:.0f} at load + {a.growth / MIB:.0f} grown while running), over "
                f"{CAP_FLAG} {a.cap_mb:g}; raise {CAP_FLAG}, or look for a leak with "
                "benchmarks/engine_stability.py"
            )
