"""A cold load: an artifact's files dropped from the page cache before `Engine.load`, as after a reboot.

Two ways, the first this process is permitted:
- `drop_caches`: `echo 1 > /proc/sys/vm/drop_caches` drops every clean page of the machine (root, and a
  writable /proc/sys: not inside most containers). Other processes then read their files again too.
- `fadvise`: `posix_fadvise(POSIX_FADV_DONTNEED)` on each of the artifact's files, after `fsync` (dirty
  pages cannot be dropped). Any user may; the kernel keeps pages that another process has mapped, so on
  a machine where something else holds the artifact open the load is only partly cold.
When neither is possible, the load is warm and is said to be.
"""

from __future__ import annotations

import os
from pathlib import Path

DROP_CACHES = Path("/proc/sys/vm/drop_caches")
METHODS = ("drop_caches", "fadvise")


def drop_artifact_pages(root: Path, methods: tuple[str, ...] | None = None) -> str:
    """Drop `root`'s files from the page cache by the first method in `methods` (default `METHODS`)
    that is permitted; returns what was done, for the bench JSON's `load_cache`."""
    files = [p for p in Path(root).rglob("*") if p.is_file()] + _blob_files()
    for method in methods if methods is not None else METHODS:
        if method == "drop_caches" and _drop_all():
            return "cold: page cache dropped (/proc/sys/vm/drop_caches)"
        if method == "fadvise" and hasattr(os, "posix_fadvise") and _fadvise(files):
            return (
                f"cold: the artifact's files and hotloop's compiled OpenVINO blobs ({len(files)} files) "
                "dropped with posix_fadvise(DONTNEED) (pages another process maps stay cached)"
            )
    return "warm only: this process may not drop the page cache"


def _blob_files() -> list[Path]:
    """Every compiled OpenVINO blob in hotloop's cache (`runtime.blob_cache`): a reboot drops those too."""
    from hotloop.io import cache_root
    from hotloop.runtime.blob_cache import FOLDER

    return [p for p in (cache_root() / FOLDER).rglob("*") if p.is_file()]


def _drop_all() -> bool:
    try:
        os.sync()
        DROP_CACHES.write_text("1\n")
    except OSError:
        return False
    return True


def _fadvise(files: list[Path]) -> bool:
    try:
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    except OSError:
        return False
    return True
