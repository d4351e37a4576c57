"""An artifact file's sha256, remembered by the file's identity and times so that a warm load does not
hash its gigabytes again.

`Engine.load` checks every file of an artifact against the manifest's sha256. At pi05:full that is about
3.4 GB of int8 graphs: 12 s at the 276 MB/s hashlib gave on this busy machine, more than the whole warm
load target (10 s). The digest of a file is kept in hotloop's cache (`hotloop.io.cache_root`), beside
the file's device, inode, size, mtime and ctime, and is reused only while all five are unchanged. Any
write to the file moves its ctime, which no user call can set back; a file whose ctime was within
`RACY_S` of the hashing is not remembered (a write in the same timestamp tick could leave the times
equal: git's "racily clean" rule). A file replaced by another (a new inode) or copied elsewhere is
hashed again.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

FOLDER = "verified-files"
RACY_S = 2.0


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """`path`'s sha256, read in chunks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """`path`'s sha256: remembered when the file is unchanged since it was last hashed, else computed
    (and remembered, where hotloop's cache is writable)."""
    st = path.stat()
    identity = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    memo = _memo_path(path)
    try:
        known = json.loads(memo.read_text())
        if known.get("identity") == identity and isinstance(known.get("sha256"), str):
            return str(known["sha256"])
    except (OSError, ValueError, AttributeError):
        pass
    digest = sha256_file(path)
    if time.time_ns() - st.st_ctime_ns > RACY_S * 1e9:
        try:
            from hotloop.io import atomic_write_text

            memo.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(memo, json.dumps({"path": str(path), "identity": identity, "sha256": digest}))
        except OSError:  # a read-only cache: hashed every time, as before
            pass
    return digest


def _memo_path(path: Path) -> Path:
    from hotloop.io import cache_root

    name = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:40]
    return cache_root() / FOLDER / f"{name}.json"
