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


__all__ = ["resident_bytes"]
