"""The deployment artifact: a directory with `manifest.json`, weights in safetensors, graphs per sub-engine.

    ART/manifest.json          schema + hotloop version, target, family/config, source-weights sha256,
                               one entry per sub-engine (backend, precision, I/O names/shapes/dtypes,
                               files, options, CPU features it needs), machine fingerprint and class,
                               budget, tolerance, compile-time figures, sha256 of every file,
                               `precision_plan` / `compression` (filled by the compression work)
    ART/weights.safetensors    the source weights, only where a sub-engine runs the torch model (eager,
                               inductor) and so is rebuilt from them (`layout: "weights"`)
    ART/<sub-engine>/...       exported graphs (model.onnx, model.xml + model.bin)

A plan whose every sub-engine runs from its own files is written lean (`layout: "lean"`, `weights: null`,
families with `capabilities.lean_artifact`): it holds only what runs. What loading needs besides the
graphs is in the manifest (config, shape, every sub-engine's I/O) and two kinds of small files:

    ART/tables.safetensors     the float32 tables the pipeline feeds by name (pi: the time table)
    ART/<table>.safetensors    each lookup table (pi: token_embedding) in the plan's precision, mapped at
                               load and read by rows (`hotloop.families.lookup`, `lookup_tables`)

The manifest's `memory.weights_mb` is what the plan's graph files hold: an engine cannot run in less,
so `--memory-cap-mb` below it is refused before anything is loaded.

Format history (`schema_version`): 1 always held the fp32 source weights and pi's prefix graph took the
token ids; 2 (this) adds the lean layout and takes pi's prompt as embedding rows. Other versions are
refused by name with the fix (recompile, or upgrade hotloop for a newer one).

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
from hotloop.compile.verified_files import file_sha256, sha256_file  # noqa: F401 - sha256_file: re-exported
from hotloop.errors import CheckpointError
from hotloop.io import _jsonable as _plain_jsonable

SCHEMA_VERSION = 2
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
TABLES = "tables.safetensors"
LEAN, WITH_WEIGHTS = "lean", "weights"


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


def check_output_dir(
    path: Path,
    flag: str = "-o",
    *,
    command: str = "compile",
    overwrite: bool = False,
    inputs: dict[str, Any] | None = None,
) -> Path:
    """Refuse, before any work, a destination we would clobber (a folder holding anything but a hotloop
    artifact, unless `overwrite`), one that is or holds an input, or one we cannot write
    (`hotloop.output_dir`). An artifact is replaced whole: with `overwrite` the folder's files go."""
    from hotloop.output_dir import ARTIFACT_MARKER, claim_output_dir

    claim_output_dir(path, flag, command, overwrite=overwrite, inputs=inputs, markers=[ARTIFACT_MARKER])
    return Path(path)


class ArtifactWriter:
    """Collects files in a temporary sibling directory, then `commit()` writes the manifest and renames."""

    def __init__(self, dest: Path, overwrite: bool = False) -> None:
        self.dest = check_output_dir(Path(dest), overwrite=overwrite)
        self.dest.resolve().parent.mkdir(parents=True, exist_ok=True)  # -o a/new/art: checked writable
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
        apply_umask(self.tmp)
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


def apply_umask(root: Path) -> None:
    """Give the artifact the permissions the umask asks for (folders 0777, files 0666 minus the umask):
    its temporary folder and a weights snapshot moved in are private (0700 / 0600) when created."""
    mask = os.umask(0)
    os.umask(mask)
    for p in [root, *root.rglob("*")]:
        if p.is_symlink():
            continue
        p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)


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


# The final check's figures every compiled plan records (`measured`): its latency against the reference's,
# then whether the actions and the budget held. A plan may add its own.
SPEED_KEYS = ("reference_latency_ms", "plan_latency_ms", "speedup_p50", "speedup_p99")
MEASURED_KEYS = (*SPEED_KEYS, "action_cos_min", "budget_met")


def planned_fields(config: Any, result: dict[str, Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The manifest fields every compiled plan writes alike, in their order: what it was planned under
    (`config`: a `PlanConfig`'s budget, tolerance, threads and pinned cores) and the final check's
    figures from `result` (`MEASURED_KEYS`, then `extra`)."""
    return {
        "budget_ms": config.budget_ms,
        "tolerance": config.tolerance.spec,
        "threads": config.threads,
        "pin": list(config.pin) if config.pin else None,
        "measured": {k: result[k] for k in (*MEASURED_KEYS, *extra)},
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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointError(
            f"{path} is corrupt ({type(exc).__name__}: {exc}); recompile the artifact"
        ) from None
    check_manifest(manifest, root, path)
    if verify_files:
        for rel, digest in manifest["files"].items():
            f = root / rel
            if not f.is_file():
                raise CheckpointError(f"{f}: file listed in the manifest is missing; recompile the artifact")
            if file_sha256(f) != digest:
                raise CheckpointError(
                    f"{f}: sha256 does not match the manifest (changed or truncated); recompile"
                )
    if check_machine:
        check_machine_fits(manifest, path)
    return manifest


_HEX = set("0123456789abcdef")
_ENTRY_LISTS = (
    "input_names",
    "input_dtypes",
    "output_names",
    "output_dtypes",
    "files",
    "requires_cpu_features",
)


def _fail(path: Path, field: str, want: str, value: Any) -> CheckpointError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return CheckpointError(
        f"{path}: field {field!r} must be {want} (got {type(value).__name__} {shown}); recompile the artifact"
    )


def _inside(root: Path, rel: Any, path: Path, field: str) -> None:
    """A manifest path must be relative, without `..`, and resolve to a file inside the artifact."""
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise _fail(path, field, "a relative path inside the artifact", rel)
    resolved = (root / rel).resolve()
    if root.resolve() not in resolved.parents:
        raise CheckpointError(f"{path}: {field} {rel!r} points outside the artifact ({resolved}); recompile")


def check_manifest(manifest: Any, root: Path, path: Path) -> None:
    """Every field the loader reads has the type it needs, and every file it opens is listed (with a
    sha256) inside the artifact: one CheckpointError naming the field, never a traceback later."""
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{path} is not a hotloop manifest (a JSON object); recompile the artifact")
    if "schema_version" not in manifest:
        raise CheckpointError(f"{path} is not a hotloop manifest (no schema_version)")
    version = manifest["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise _fail(path, "schema_version", f"the integer {SCHEMA_VERSION}", version)
    if version > SCHEMA_VERSION:
        raise CheckpointError(
            f"{path}: artifact format {version} is newer than this hotloop reads (format {SCHEMA_VERSION}, "
            f"hotloop {hotloop.__version__}); upgrade hotloop, or recompile with this one (`hotloop compile`)"
        )
    if version != SCHEMA_VERSION:
        raise CheckpointError(
            f"{path}: artifact format {version} is older than this hotloop reads (format {SCHEMA_VERSION}: "
            "lean artifacts, pi's prompt as embedding rows); recompile it with `hotloop compile`"
        )
    if manifest.get("hotloop_version") != hotloop.__version__:
        raise CheckpointError(
            f"{path}: compiled by hotloop {manifest.get('hotloop_version')}, this is {hotloop.__version__}; "
            "recompile with `hotloop compile`"
        )
    for key in ("kind", "files", "sub_engines"):
        if key not in manifest:
            raise CheckpointError(f"{path}: field {key!r} is missing; recompile the artifact")
    if not isinstance(manifest["kind"], str):
        raise _fail(path, "kind", "a string", manifest["kind"])
    files = manifest["files"]
    if not isinstance(files, dict):
        raise _fail(path, "files", "an object {path: sha256}", files)
    for rel, digest in files.items():
        _inside(root, rel, path, "files")
        if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
            raise _fail(path, f"files.{rel}", "a sha256 hex digest", digest)
    subs = manifest["sub_engines"]
    if not isinstance(subs, list) or not subs:
        raise _fail(path, "sub_engines", "a non-empty list", subs)
    for i, entry in enumerate(subs):
        where = f"sub_engines[{i}]"
        if not isinstance(entry, dict):
            raise _fail(path, where, "an object", entry)
        for key in ("name", "backend", "precision"):
            if not isinstance(entry.get(key), str):
                raise _fail(path, f"{where}.{key}", "a string", entry.get(key))
        for key in _ENTRY_LISTS:
            value = entry.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _fail(path, f"{where}.{key}", "a list of strings", value)
        for key in ("input_shapes", "output_shapes"):
            value = entry.get(key, [])
            ok = isinstance(value, list) and all(
                isinstance(s, list)
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in s)
                for s in value
            )
            if not ok:
                raise _fail(path, f"{where}.{key}", "a list of shapes (lists of sizes >= 0)", value)
        if len(entry.get("input_names", [])) != len(entry.get("input_shapes", [])) or len(
            entry.get("input_names", [])
        ) != len(entry.get("input_dtypes", [])):
            raise CheckpointError(f"{path}: {where} has input names, shapes and dtypes of different lengths")
        if not isinstance(entry.get("options", {}), dict):
            raise _fail(path, f"{where}.options", "an object", entry.get("options"))
        for rel in entry.get("files", []):
            _inside(root, rel, path, f"{where}.files")
            if rel not in files:
                raise CheckpointError(
                    f"{path}: {where} names file {rel!r}, which the manifest's files (with their sha256) do "
                    "not list; recompile the artifact"
                )
    if manifest["kind"] != "onnx":
        for key in ("weights", "config", "shape"):
            if key not in manifest:
                raise CheckpointError(f"{path}: field {key!r} is missing; recompile the artifact")
        if is_lean(manifest):
            if manifest["weights"] is not None:
                raise _fail(path, "weights", "null in a lean artifact", manifest["weights"])
            _listed(root, manifest.get("tables"), files, path, "tables")
            lookups = manifest.get("lookups", {})
            if not isinstance(lookups, dict):
                raise _fail(path, "lookups", "an object {table: file}", lookups)
            for name, rel in lookups.items():
                _listed(root, rel, files, path, f"lookups.{name}")
        else:
            _listed(root, manifest["weights"], files, path, "weights")
        for key in ("config", "shape"):
            if not isinstance(manifest[key], dict):
                raise _fail(path, key, "an object", manifest[key])
    layout = manifest.get("layout", WITH_WEIGHTS)
    if layout not in (LEAN, WITH_WEIGHTS):
        raise _fail(path, "layout", f"{LEAN!r} or {WITH_WEIGHTS!r}", layout)
    memory = manifest.get("memory", {})
    floor = memory.get("weights_mb", 0) if isinstance(memory, dict) else None
    if isinstance(floor, bool) or not isinstance(floor, int | float) or floor < 0:
        raise _fail(path, "memory", "an object with weights_mb >= 0", memory)
    machine = manifest.get("machine", {})
    if not isinstance(machine, dict) or not isinstance(machine.get("class", {}), dict | None):
        raise _fail(path, "machine", "an object with a class", machine)
    threads = manifest.get("threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise _fail(path, "threads", "null or an integer >= 1", threads)
    pin = manifest.get("pin")
    if pin is not None and (
        not isinstance(pin, list)
        or not pin
        or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in pin)
    ):
        raise _fail(path, "pin", "null or a non-empty list of CPU ids", pin)


def is_lean(manifest: dict[str, Any]) -> bool:
    """Whether the artifact holds only what runs (no source weights; see the module doc)."""
    return manifest.get("layout") == LEAN


def _listed(root: Path, rel: Any, files: dict[str, str], path: Path, field: str) -> None:
    """A file the loader opens: inside the artifact and listed with its sha256."""
    _inside(root, rel, path, field)
    if rel not in files:
        raise CheckpointError(
            f"{path}: {field} {rel!r} is not listed (with a sha256) in the manifest's files; recompile"
        )


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
    return _plain_jsonable(obj, "a manifest")
