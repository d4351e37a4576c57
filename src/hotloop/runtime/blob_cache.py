"""Where a loaded artifact's OpenVINO graphs keep their compiled form between loads.

Loading an OpenVINO graph is reading it and compiling it for this CPU; the compiled form can be exported
and imported instead (OpenVINO's model caching: `CACHE_DIR`), which skips the compile. The folder is in
hotloop's cache (`hotloop.io.cache_root`, `$HOTLOOP_CACHE_DIR`), never in the artifact, one per
sub-engine and key: the sha256 of the sub-engine's files as the manifest records them (checked at load
before any graph is read), its precision, the plugin settings it compiles with (threads included) and
the OpenVINO version. An artifact whose graph files change gets a new key, hence a new folder: a blob
compiled from other files is never imported. OpenVINO keys blobs inside the folder by the model path and
settings and by its own version, and checks the CPU it runs on at import.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hotloop.compile.artifact import SubEngineEntry
    from hotloop.compile.backends.base import PreparedFiles

# Load option (never saved into a manifest): the key of a sub-engine's compiled-blob folder.
BLOB_KEY = "blob_key"
FOLDER = "openvino-blobs"


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
