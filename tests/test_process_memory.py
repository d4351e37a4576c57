"""`release_mapped_files` drops the resident pages of read-only file mappings under given folders from this
process, and a page read again comes back from the file; writable mappings are left alone."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest

from hotloop.process_memory import release_mapped_files

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps (Linux)")
PAGES = 256


def resident_kb(path: Path) -> int:
    """Resident kB of this process's mappings of `path` (from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 5)
            if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                inside = len(head) > 5 and head[5].strip() == str(path.resolve())
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def mapped(tmp_path: Path, access: int) -> tuple[Path, mmap.mmap, bytes]:
    data = bytes(range(256)) * (mmap.PAGESIZE * PAGES // 256)
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    with open(path, "r+b" if access == mmap.ACCESS_WRITE else "rb") as f:
        view = mmap.mmap(f.fileno(), 0, access=access)
    assert sum(view[i] for i in range(0, len(data), mmap.PAGESIZE)) >= 0  # touch every page
    return path, view, data


def test_read_only_pages_are_released_and_read_back_from_the_file(tmp_path: Path) -> None:
    path, view, data = mapped(tmp_path, mmap.ACCESS_READ)
    try:
        assert resident_kb(path) >= PAGES * mmap.PAGESIZE // 1024
        assert release_mapped_files([tmp_path]) >= len(data)
        assert resident_kb(path) == 0
        assert view[:] == data  # faulted back in from the file, unchanged
        assert resident_kb(path) >= PAGES * mmap.PAGESIZE // 1024
    finally:
        view.close()


def test_writable_mappings_and_other_folders_are_left_alone(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    path, view, _ = mapped(tmp_path / "a", mmap.ACCESS_WRITE)
    try:
        before = resident_kb(path)
        assert before >= PAGES * mmap.PAGESIZE // 1024
        assert release_mapped_files([tmp_path / "a"]) == 0
        assert resident_kb(path) == before
    finally:
        view.close()
    (tmp_path / "ab").mkdir()
    path, view, _ = mapped(tmp_path / "ab", mmap.ACCESS_READ)
    try:
        assert release_mapped_files([tmp_path / "a"]) == 0  # "ab" merely shares the name's first letter
        assert resident_kb(path) >= PAGES * mmap.PAGESIZE // 1024
    finally:
        view.close()
