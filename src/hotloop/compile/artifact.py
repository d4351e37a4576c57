"""The deployment artifact: a directory with `manifest.json`, weights in safetensors, graphs per sub-engine.

    ART/manifest.json          schema + hotloop version, target, family/config, source-weights sha256,
                               one entry per sub-engine (backend, precision, I/O names/shapes/dtypes,
                               files, options, CPU features it needs), machine fingerprint and class,
                               budget, tolerance, compile-time figures, sha256 of every file,
                               `precision_plan` / `compression` (filled by the compression work)
    ART/weights.safetensors    the source weights (eager/inductor sub-engines are rebuilt from them)
    ART/<sub-engine>/...       exported graphs (model.onnx, model.xml + model.bin)

Loading (`read_manifest`) checks, in order: the manifest parses, the schema and hotloop versions match,
every file exists with its recorded sha256, the CPU has the features the plan needs and is of the same
machine class. Each failure is a `CheckpointError` naming the file or the feature; nothing falls back.
The directory is written beside its final place and renamed in one step, so a crash never leaves half
an artifact.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import hotloop
from hotloop.compile.cpu_features import machine_class, missing_features
from hotloop.errors import CheckpointError, ConfigError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"


@dataclass(frozen=True)
class SubEngineEntry:
    """How one sub-engine is run: enough to rebuild its runner and to check its inputs."""

    name: str
    backend: str
    precision: str
    input_names: list[str]
    input_shapes: list[list[int]]
    input_dtypes: list[str]
    output_names: list[str]
    output_shapes: list[list[int]]
    output_dtypes: list[str]
    files: list[str] = field(default_factory=list)  # relative to the artifact root
    options: dict[str, Any] = field(default_factory=dict)
    requires_cpu_features: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SubEngineEntry:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_state_dict(state: dict[str, Any]) -> str:
    """Hash of the source weights independent of file layout: names, dtypes, shapes and raw bytes."""
    import torch

    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy())  # the buffer itself: no copy of a 2 GB table
    return h.hexdigest()


def check_output_dir(path: Path, flag: str = "-o") -> Path:
    """Refuse a destination we would clobber or cannot write, before any work is done."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not (path / MANIFEST).is_file())):
        raise ConfigError(f"{flag} {path} exists and is not a hotloop artifact; pick a new folder")
    parent = path.resolve().parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"{flag} {path}: folder {parent} is not writable; pick another place")
    return path


class ArtifactWriter:
    """Collects files in a temporary sibling directory, then `commit()` writes the manifest and renames."""

    def __init__(self, dest: Path) -> None:
        self.dest = check_output_dir(Path(dest))
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.dest.name}.", dir=self.dest.resolve().parent))

    def path(self, relative: str) -> Path:
        p = self.tmp / relative
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_weights(self, state: dict[str, Any]) -> str:
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(self.path(WEIGHTS)))
        return WEIGHTS

    def commit(self, manifest: dict[str, Any]) -> Path:
        files = sorted(
            str(p.relative_to(self.tmp)) for p in self.tmp.rglob("*") if p.is_file() and p.name != MANIFEST
        )
        manifest = {**manifest, "files": {f: sha256_file(self.tmp / f) for f in files}}
        (self.tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, default=_jsonable) + "\n")
        old = None
        if self.dest.exists():
            old = self.dest.with_name(f".{self.dest.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            self.dest.rename(old)
        self.tmp.rename(self.dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.dest

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def base_manifest(**fields: Any) -> dict[str, Any]:
    """The fields every artifact carries; callers add target-specific ones."""
    from hotloop.measure.fingerprint import machine_fingerprint

    return {
        "schema_version": SCHEMA_VERSION,
        "hotloop_version": hotloop.__version__,
        "machine": {"fingerprint": machine_fingerprint(), "class": machine_class()},
        "precision_plan": None,  # per-layer precisions; written by the compression work
        "compression": None,
        **fields,
    }


def read_manifest(
    folder: str | Path,
    *,
    verify_files: bool = True,
    check_machine: bool = True,
) -> dict[str, Any]:
    """The checked manifest of the artifact in `folder`; every mismatch raises CheckpointError by name."""
    root = Path(folder)
    path = root / MANIFEST
    if not path.is_file():
        raise CheckpointError(
            f"{root} is not a hotloop artifact (no {MANIFEST}); compile one with `hotloop compile`"
        )
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is corrupt ({exc}); recompile the artifact") from None
    if not isinstance(manifest, dict) or "schema_version" not in manifest:
        raise CheckpointError(f"{path} is not a hotloop manifest (no schema_version)")
    if manifest["schema_version"] != SCHEMA_VERSION:
        raise CheckpointError(
            f"{path}: manifest schema {manifest['schema_version']} is not the supported {SCHEMA_VERSION}; "
            "recompile with this hotloop"
        )
    if manifest.get("hotloop_version") != hotloop.__version__:
        raise CheckpointError(
            f"{path}: compiled by hotloop {manifest.get('hotloop_version')}, this is {hotloop.__version__}; "
            "recompile with `hotloop compile`"
        )
    if verify_files:
        for rel, digest in manifest.get("files", {}).items():
            f = root / rel
            if not f.is_file():
                raise CheckpointError(f"{f}: file listed in the manifest is missing; recompile the artifact")
            if sha256_file(f) != digest:
                raise CheckpointError(
                    f"{f}: sha256 does not match the manifest (changed or truncated); recompile"
                )
    if check_machine:
        check_machine_fits(manifest, path)
    return manifest


def check_machine_fits(manifest: dict[str, Any], where: Path | str = MANIFEST) -> None:
    """Refuse a plan whose CPU features are missing here, or that was compiled for another machine class."""
    for entry in manifest.get("sub_engines", []):
        missing = missing_features(list(entry.get("requires_cpu_features", [])))
        if missing:
            raise CheckpointError(
                f"{where}: sub-engine {entry['name']!r} ({entry['backend']} {entry['precision']}) needs CPU "
                f"feature {' and '.join(missing)}, which this CPU lacks; recompile here "
                "(`hotloop compile`) or load with replan=True"
            )
    theirs = manifest.get("machine", {}).get("class")
    ours = machine_class()
    our_isa: list[str] = list(ours["isa"])  # type: ignore[call-overload]
    if theirs is not None and theirs != ours:
        extra = sorted(set(theirs.get("isa", [])) ^ set(our_isa))
        raise CheckpointError(
            f"{where}: compiled for machine class {theirs.get('arch')} [{', '.join(theirs.get('isa', []))}], "
            f"this is {ours['arch']} [{', '.join(our_isa)}] (differs in: {', '.join(extra) or 'arch'}); "
            "plans are chosen by measurement, so recompile here or load with replan=True"
        )


def entries(manifest: dict[str, Any]) -> dict[str, SubEngineEntry]:
    return {e["name"]: SubEngineEntry.from_dict(e) for e in manifest.get("sub_engines", [])}


def entry_for(
    name: str, runner: Any, files: list[str], options: dict[str, Any], requires: list[str]
) -> dict[str, Any]:
    """A manifest entry describing a prepared runner's fixed I/O."""

    def dt(t: Any) -> str:
        return str(t.dtype).replace("torch.", "")

    return asdict(
        SubEngineEntry(
            name=name,
            backend=runner.backend,
            precision=runner.precision,
            input_names=list(runner.input_names),
            input_shapes=[list(x.shape) for x in runner.inputs],
            input_dtypes=[dt(x) for x in runner.inputs],
            output_names=list(runner.output_names),
            output_shapes=[list(y.shape) for y in runner.outputs],
            output_dtypes=[dt(y) for y in runner.outputs],
            files=files,
            options=options,
            requires_cpu_features=requires,
        )
    )


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to a manifest")
