"""This process's resident memory, read cheaply: what the memory cap, the planner's meters and the load
figures all count."""

from __future__ import annotations

import os


def resident_bytes() -> int:
    """This process's resident set size now (Linux: /proc/self/statm, a few µs; elsewhere psutil)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return int(psutil.Process().memory_info().rss)


def release_free_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's `malloc_trim(0)`; nothing elsewhere). A
    large request is served from a free heap chunk that fits when there is one, already resident: then
    what is allocated next adds nothing to the resident set. Measurements of growth call this first."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


__all__ = ["release_free_heap", "resident_bytes"]
