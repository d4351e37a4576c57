"""Loading a lean artifact (`hotloop.compile.artifact`, `layout: "lean"`): the pipeline rebuilt from the
manifest, the artifact's tables and its graph files, never from the torch model.

A file backend's `load` reads a graph's name, I/O names and example inputs (to size its buffers) and
nothing of its module, so every runner comes from its manifest entry (`EntryGraph`: zeros of the recorded
shapes). The pipeline's constants are the artifact's tables and its lookup tables, mapped
(`hotloop.compile.lean_files`). What the weights path checks against the sub-engines its config builds,
this one checks against the family's signatures for the config (names, in order) and, once loaded,
against the outputs each graph gives (`check_recorded_io`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from hotloop.compile.artifact import SubEngineEntry, entries
from hotloop.compile.backends import FILE_BACKENDS, get_backend
from hotloop.compile.backends.base import BackendCrash, BackendError, Runner
from hotloop.errors import CheckpointError
from hotloop.families.protocol import PolicyFamily, Signature

_DTYPES = {"float32", "float16", "bfloat16", "int64", "int32", "int8", "bool"}


@dataclass
class EntryGraph:
    """A sub-engine as its manifest entry records it (what a file backend's `load` reads)."""

    name: str
    example_inputs: tuple[Tensor, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    module: Any = None


def entry_graph(where: Path, entry: SubEngineEntry) -> EntryGraph:
    bad = [d for d in entry.input_dtypes if d not in _DTYPES]
    if bad:
        raise CheckpointError(
            f"{where}: sub-engine {entry.name!r} records input dtype {bad[0]!r}; recompile the artifact"
        )
    inputs = tuple(
        torch.zeros(s, dtype=getattr(torch, d))
        for s, d in zip(entry.input_shapes, entry.input_dtypes, strict=True)
    )
    return EntryGraph(entry.name, inputs, tuple(entry.input_names), tuple(entry.output_names))


def constants(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The tables the pipeline feeds (read) and its lookup tables (read by rows at each call)."""
    from hotloop.compile.lean_files import FileRows, read_tables

    out: dict[str, Any] = read_tables(root / manifest["tables"])
    for name, rel in manifest.get("lookups", {}).items():
        out[name] = FileRows(root / rel, name)
    return out


def check_signature(
    where: Path, family: PolicyFamily, cfg: Any, entry: SubEngineEntry, base: str
) -> Signature:
    """The entry's I/O names are the ones the family's pipeline feeds for this config."""
    want = family.signatures(cfg)[base]
    for field, names in (("input_names", want.input_names), ("output_names", want.output_names)):
        if tuple(getattr(entry, field)) != names:
            raise CheckpointError(
                f"{where}: sub-engine {entry.name!r} records {field} {getattr(entry, field)}, but this "
                f"hotloop's {family.name} pipeline feeds {list(names)}: recompile the artifact"
            )
    return want


def load_runners(
    root: Path,
    manifest: dict[str, Any],
    family: PolicyFamily,
    cfg: Any,
    threads: int | None,
    blob_cache: bool = True,
) -> tuple[dict[str, Runner], dict[int, dict[str, Runner]], dict[str, Signature]]:
    """Every sub-engine's runner from its own files: (by entry name, by prompt bucket then base name,
    the signatures by base name). `blob_cache`: OpenVINO graphs load through their compiled-blob folders
    (`runtime.blob_cache`; only for files checked against the manifest's hashes)."""
    from hotloop.compile.bucket_plan import split_name
    from hotloop.runtime.blob_cache import load_files
    from hotloop.runtime.recorded_io import check_recorded_io

    where = root / "manifest.json"
    full = getattr(family.shape_from_dict(manifest["shape"]), "prompt_slots", 0)
    runners: dict[str, Runner] = {}
    per_bucket: dict[int, dict[str, Runner]] = {}
    signatures: dict[str, Signature] = {}
    planned = entries(manifest)
    for name, entry in sorted(planned.items(), key=lambda item: -_files_bytes(root / item[0], item[1].files)):
        # Largest first: a graph's load holds its mapped file and the backend's copy of the weights at once
        # (until `release_mapped_files`), so the peak is lowest while little else is resident yet.
        if entry.backend not in FILE_BACKENDS:
            raise CheckpointError(
                f"{where}: sub-engine {name!r} runs on {entry.backend}, which needs the source weights a lean "
                "artifact does not hold; recompile the artifact"
            )
        base, _ = split_name(name)
        family.stage_of(base)  # a sub-engine the family does not have is refused by name
        signatures[base] = check_signature(where, family, cfg, entry, base)
        files = load_files(entry, manifest, threads, blob_cache)
        try:
            runner = get_backend(entry.backend).load(
                entry_graph(where, entry), entry.precision, root / name, files
            )
        except BackendCrash as exc:
            raise CheckpointError(
                f"{where}: sub-engine {name!r}: {exc} on this CPU at these threads; load it with another "
                f"--threads (it was planned at {manifest.get('threads')}) or recompile it here"
            ) from None
        except BackendError as exc:
            raise CheckpointError(
                f"{where}: sub-engine {name!r} does not run with the I/O its entry records "
                f"({str(exc).splitlines()[0][:200]}); recompile the artifact"
            ) from None
        check_recorded_io(where, name, entry, runner)
        runners[name] = runner
    runners = {name: runners[name] for name in planned}  # the manifest's order, as before
    for name, runner in runners.items():
        base, bucket = split_name(name)
        per_bucket.setdefault(bucket if bucket is not None else full, {})[base] = runner
    return runners, per_bucket, signatures


def _files_bytes(folder: Path, files: Any) -> int:
    """The bytes of an entry's files that exist (a missing one is refused later, by its loader)."""
    return sum((folder / Path(f).name).stat().st_size for f in files if (folder / Path(f).name).is_file())
