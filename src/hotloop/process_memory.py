"""This process's resident memory, read cheaply: what the memory cap, the planner's meters and the load
figures all count."""

from __future__ import annotations

import os
from pathlib import Path


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


def release_mapped_files(folders: list[Path]) -> int:
    """Unmap from this process the pages of read-only file mappings under `folders`; the bytes released.

    OpenVINO's CPU plugin maps a compiled blob (or an IR's weights) and repacks every weight it runs into
    its own memory while it compiles or imports; the mapping stays open, its pages counted in this
    process's resident set though nothing reads them again (measured on pi0.5 at full size: 2.5 GB of
    3.3 after the first call). `MADV_DONTNEED` drops them from this process only: the page cache keeps
    them for the next load, and a page read again later faults back in from the file, so nothing a
    runner needs can be lost. Mappings that are writable are left alone (a private page may have been
    written); nothing happens off Linux."""
    if not os.path.exists("/proc/self/smaps"):
        return 0
    roots = [str(Path(f).resolve()) + os.sep for f in folders]
    spans: list[tuple[int, int]] = []
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 5)
            if len(head) < 5 or "-" not in head[0] or head[0].endswith(":"):
                continue  # a field line of the mapping above
            path = head[5].strip() if len(head) > 5 else ""
            if "w" in head[1] or not any(path.startswith(r) for r in roots):
                continue
            start, end = (int(x, 16) for x in head[0].split("-"))
            spans.append((start, end))
    if not spans:
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    dontneed = 4  # MADV_DONTNEED (asm-generic/mman-common.h)
    return sum(end - start for start, end in spans if libc.madvise(start, end - start, dontneed) == 0)


__all__ = ["release_free_heap", "release_mapped_files", "resident_bytes"]
