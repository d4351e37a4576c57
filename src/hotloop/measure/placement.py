"""Where a policy's threads run when the machine also runs other work (`--reserve-cores N`).

A robot computer runs its drivers, cameras and logging beside the policy. Two OpenMP threads on two cores
with one of them busy wait at every barrier for the thread that lost its core (eager torch p99 7x, inductor
20x beside one busy process here, docs/compile.md), so a plan that keeps N cores for the others runs
`usable - N` threads. They are not pinned: measured beside one unpinned busy process on 2 cores, one
thread pinned to a core was 2.4-3.6x slower at p99 (the busy process kept landing on that core and the
pinned policy could not move), while one unpinned thread stayed within 1.02-1.41x of quiet on every backend.
Pinning helps only when the other work is pinned away too: `--pin` (bench) and `Engine.load(pin=...)` do it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hotloop.errors import ConfigError


@dataclass(frozen=True)
class Placement:
    threads: int
    pin: tuple[int, ...] | None  # None: the scheduler places the threads (see the module docstring)


def reserve_placement(reserve: int, usable: set[int] | None = None) -> Placement:
    """Threads for a process that leaves `reserve` of its usable CPUs to other work, unpinned."""
    cpus = sorted(usable if usable is not None else os.sched_getaffinity(0))
    if isinstance(reserve, bool) or not isinstance(reserve, int) or not 0 <= reserve < len(cpus):
        raise ConfigError(
            f"--reserve-cores must be from 0 to {len(cpus) - 1} (got {reserve}): this process may use "
            f"{len(cpus)} CPU{'s' if len(cpus) != 1 else ''} ({','.join(map(str, cpus))}) and needs one"
        )
    return Placement(threads=len(cpus) - reserve, pin=None)


def apply_reserve(
    reserve: int | None, threads: int | None, pin: tuple[int, ...] | None
) -> tuple[int | None, tuple[int, ...] | None]:
    """(threads, pin) for a command: --reserve-cores decides both, else --threads / --pin as given."""
    if reserve is None:
        return threads, pin
    if threads is not None or pin is not None:
        raise ConfigError("--reserve-cores sets the threads and the pinning itself: drop --threads / --pin")
    placement = reserve_placement(reserve)
    return placement.threads, placement.pin
