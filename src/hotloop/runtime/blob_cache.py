"""Where a loaded artifact's OpenVINO graphs keep their compiled form between loads.

Loading an OpenVINO graph is reading it and compiling it for this CPU; the compiled form can be exported
and imported instead (OpenVINO's model caching: `CACHE_DIR`), which skips the compile. The folder is in
hotloop's cache (`hotloop.io.cache_root`, `$HOTLOOP_CACHE_DIR`), never in the artifact, one per
sub-engine and key: the sha256 of the sub-engine's files as the manifest records them (checked at load
before any graph is read), its precision, the plugin settings it compiles with (threads included) and
the OpenVINO version. An artifact whose graph files change gets a new key, hence a new folder: a blob
compiled from other files is never imported. OpenVINO keys blobs inside the folder by the model path and
settings and by its own version, and checks the CPU it runs on at import.

The cache is bounded (`$HOTLOOP_BLOB_CACHE_GB`, default `DEFAULT_LIMIT_GB`): every compressed artifact, thread
count and OpenVINO version gets folders of its own, and a published-size plan's blobs take gigabytes, so an
unbounded cache fills a robot computer's disk over a few compress runs (one such cache held 12 GB). A
folder's mtime is its last use; when a load finds the cache over its bound it removes the least recently
used folders, never the one it is loading (a removed folder costs one compile at its next load).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hotloop.compile.artifact import SubEngineEntry
    from hotloop.compile.backends.base import PreparedFiles

# Load option (never saved into a manifest): the key of a sub-engine's compiled-blob folder.
BLOB_KEY = "blob_key"
FOLDER = "openvino-blobs"
LIMIT_ENV = "HOTLOOP_BLOB_CACHE_GB"
DEFAULT_LIMIT_GB = 16.0


def entry_key(manifest: dict[str, Any], files: list[str]) -> str:
    """The sub-engine's files as the manifest hashes them (names and sha256), as one digest."""
    digests = {f: manifest["files"][f] for f in files}
    return hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()


def blob_folder(key: str, precision: str, config: dict[str, Any]) -> Path:
    """The compiled-blob folder for a sub-engine key compiled at `precision` with plugin `config`."""
    import openvino as ov

    from hotloop.io import cache_root

    settings = {"key": key, "precision": precision, "config": config, "openvino": ov.get_version()}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()
    return cache_root() / FOLDER / digest[:40]


def cache_limit_bytes() -> int:
    """The blob cache's bound: `$HOTLOOP_BLOB_CACHE_GB` (GiB, > 0), else `DEFAULT_LIMIT_GB`."""
    from hotloop.errors import ConfigError

    raw = os.environ.get(LIMIT_ENV, "").strip()
    if not raw:
        return int(DEFAULT_LIMIT_GB * 2**30)
    try:
        gib = float(raw)
    except ValueError:
        gib = -1.0
    if not gib > 0 or gib == float("inf"):
        raise ConfigError(
            f"{LIMIT_ENV}={raw!r}: give the compiled-blob cache's bound in GiB, a number above 0 "
            f"(e.g. {LIMIT_ENV}={DEFAULT_LIMIT_GB:g}), or unset it"
        )
    return int(gib * 2**30)


def _folder_bytes(folder: Path) -> int:
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # another process removing it meanwhile
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def mark_used(folder: Path) -> list[Path]:
    """Note `folder` (a blob folder) as used now, then remove the least recently used other folders while
    the cache holds more than its bound; returns the folders removed."""
    limit = cache_limit_bytes()
    folder.mkdir(parents=True, exist_ok=True)
    os.utime(folder)
    others = [p for p in folder.parent.iterdir() if p.is_dir() and p != folder]
    sizes = {p: _folder_bytes(p) for p in others}
    total = _folder_bytes(folder) + sum(sizes.values())
    removed: list[Path] = []
    for old in sorted(others, key=lambda p: p.stat().st_mtime):
        if total <= limit:
            break
        shutil.rmtree(old, ignore_errors=True)
        total -= sizes[old]
        removed.append(old)
    return removed


def with_blob_key(
    options: dict[str, Any], manifest: dict[str, Any], files: list[str], backend: str
) -> dict[str, Any]:
    """`options` with the blob key of an OpenVINO sub-engine whose `files` (artifact-relative) the
    manifest hashes; unchanged for other backends."""
    if backend != "openvino" or not all(f in manifest.get("files", {}) for f in files):
        return options
    return {**options, BLOB_KEY: entry_key(manifest, files)}


def load_files(
    entry: SubEngineEntry, manifest: dict[str, Any], threads: int | None, blob_cache: bool
) -> PreparedFiles:
    """A sub-engine's files and load options as its backend loads them: the entry's options, with
    `threads` for the CPU backends that take it and, with `blob_cache`, the OpenVINO blob key."""
    from hotloop.compile.backends.base import PreparedFiles

    options = dict(entry.options)
    if threads is not None and entry.backend in ("onnxruntime", "openvino"):
        options["threads"] = threads
    if blob_cache:
        options = with_blob_key(options, manifest, list(entry.files), entry.backend)
    return PreparedFiles(files=[Path(f).name for f in entry.files], options=options)
