"""Candidate timings remembered per machine, so that a second `hotloop compile` of a target skips what
the first one found slow.

Why: the default search of `pi05:small` spends minutes preparing and timing candidates that lose, and
a user compiles the same target again and again (a new tolerance, a new calibration set, a new budget).
What a candidate costs on this machine does not change between those runs.

A timing is keyed by
- **the machine** (`timing_fingerprint`): CPU model and flags, CPU count and the CPUs this process may
  use, the thread count and pinning the candidates are timed with, and the versions of hotloop (with its
  git commit in a source checkout), torch, numpy, ONNX Runtime, OpenVINO and TensorRT. One file per
  fingerprint, `<cache>/timings/<key>.json`: another machine, thread count or library reads another file;
- **the candidate** (`candidate_key`): the fp32 sub-engine's content hash (`graph_digests`: the module's
  structure, the names, dtypes, shapes and bytes of its weights and constants, its example inputs' shapes
  and dtypes, its I/O names), its recipe, backend, precision and options, and for a quantized precision
  the calibration frames' sha256 and the layers kept fp32.

A cached timing only saves work; it is never a result (`hotloop.compile.search`):
- **order**: within a stage, candidates with a trusted timing go first, the fastest cached p99 first;
- **skip**: a candidate whose cached median is above `GIVE_UP_RATIO` x the cached p99 of a candidate of
  its stage that was accepted in this run is skipped unprepared (the rule that stops timing a slow one
  after `PROBE_CALLS` calls, applied to an earlier run's calls). Never the eager fp32 reference.
- **trust**: an entry timed while other work ran (its 1-minute load average, less the threads the
  candidate ran with, above `--max-load`) is neither used nor allowed to replace a quieter entry.
Every candidate that is not skipped has its numerics checked and is timed in this run, and the chosen
plan is timed against the reference in this run: what a result reports was measured by it.

Where: `$HOTLOOP_CACHE_DIR`, else `$XDG_CACHE_HOME/hotloop`, else `~/.cache/hotloop`. A file that cannot
be read is ignored with one warning and rewritten; a cache that cannot be written is a warning, never a
failed compile. Runs at once may each drop the other's new entries (the file is replaced atomically).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import hotloop
from hotloop.io import cache_root  # noqa: F401  (re-exported: where the timings live)

SCHEMA = 1
_VERSIONED = ("torch", "numpy", "onnxruntime", "openvino", "tensorrt")


def timing_fingerprint(threads: int, pin: tuple[int, ...] | None) -> dict[str, Any]:
    """What two timings must share to be compared: the machine, its libraries, the threads and pinning."""
    from hotloop.measure.fingerprint import cpu_flags, cpu_model, git_commit, package_versions

    return {
        "schema": SCHEMA,
        "cpu_model": cpu_model(),
        "cpu_flags": hashlib.sha256(" ".join(cpu_flags() or []).encode()).hexdigest()[:16],
        "arch": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": sorted(os.sched_getaffinity(0)),
        "threads": threads,
        "pin": list(pin) if pin else None,
        "hotloop": hotloop.__version__,
        "git_commit": git_commit(),  # a source checkout changes its kernels without a version bump
        "versions": package_versions(_VERSIONED),
    }


def _key(obj: Any, length: int) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:length]


def graph_digests(engines: Mapping[str, Any]) -> dict[str, str]:
    """{sub-engine name: content hash} of `hotloop.families.protocol.SubEngine`s. A tensor shared by
    several engines (a loop engine and its step engine hold the same weights) is hashed once."""
    import torch

    # Keyed by where a tensor's bytes live; each tensor is kept alive here, so that no address is freed
    # and reused by another one while the hashes are taken.
    memo: dict[tuple[Any, ...], tuple[str, torch.Tensor]] = {}

    def digest(t: torch.Tensor) -> str:
        t = t.detach()
        ident = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        if ident not in memo:
            h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}".encode())
            flat = t.cpu().contiguous().reshape(-1)
            if flat.numel():
                h.update(flat.view(torch.uint8).numpy().data)  # the buffer itself, no copy
            memo[ident] = (h.hexdigest(), t)
        return memo[ident][0]

    out: dict[str, str] = {}
    for name, engine in engines.items():
        module = engine.module
        h = hashlib.sha256()
        head = {
            "class": f"{type(module).__module__}.{type(module).__qualname__}",
            "structure": repr(module),
            "inputs": list(engine.input_names),
            "outputs": list(engine.output_names),
            "example": [[list(x.shape), str(x.dtype)] for x in engine.example_inputs],
        }
        h.update(json.dumps(head, sort_keys=True).encode())
        tensors = sorted(module.state_dict().items()) + sorted(
            (f"constant:{k}", v) for k, v in engine.constants.items()
        )
        for key, tensor in tensors:
            h.update(f"\n{key}|{digest(tensor)}".encode())
        out[name] = h.hexdigest()
    return out


def onnx_digest(graph: Any) -> str:
    """The content hash of an ONNX-file target (`OnnxGraph`): the file's bytes and the stated inputs."""
    from hotloop.compile.artifact import sha256_file

    inputs = [
        [n, list(x.shape), str(x.dtype)] for n, x in zip(graph.input_names, graph.example_inputs, strict=True)
    ]
    return _key(
        {"file": sha256_file(Path(graph.path)), "inputs": inputs, "outputs": list(graph.output_names)}, 64
    )


def candidate_key(graph_digest: str, cand: Any, calibration: Any, fp32_layers: Mapping[str, Any]) -> str:
    """The identity of a candidate's timing: its graph, recipe, backend, precision and options."""
    parts: dict[str, Any] = {
        "graph": graph_digest,
        "sub_engine": cand.sub_engine,
        "variant": cand.variant,
        "backend": cand.backend,
        "precision": cand.precision,
        "options": cand.options,
    }
    if cand.precision not in ("fp32", "bf16"):  # a quantized graph depends on what calibrated it
        parts["calibration"] = None if calibration is None else calibration.manifest_entry().get("sha256")
        parts["fp32_layers"] = dict(fp32_layers)
    return _key(parts, 32)


@dataclass(frozen=True)
class CachedTiming:
    """One candidate's timing from an earlier run on this machine. `complete`: timed through all its
    calls (accepted); otherwise cut short as slower after the probe calls."""

    label: str
    p50: float
    p99: float
    calls: int
    complete: bool
    load_avg: float
    recorded: str  # UTC, ISO 8601

    @classmethod
    def from_dict(cls, d: Any) -> CachedTiming:
        if not isinstance(d, dict):
            raise TypeError(f"an entry must be an object, not {type(d).__name__}")
        t = cls(
            label=str(d["label"]),
            p50=float(d["p50"]),
            p99=float(d["p99"]),
            calls=int(d["calls"]),
            complete=bool(d["complete"]),
            load_avg=float(d["load_avg"]),
            recorded=str(d["recorded"]),
        )
        if not (t.p50 > 0 and t.p99 > 0 and t.calls >= 1 and t.load_avg >= 0):
            raise ValueError(f"entry {t.label!r} has out-of-range figures")
        return t

    def describe(self) -> str:
        return f"p50 {self.p50:.2f} / p99 {self.p99:.2f} ms over {self.calls} calls, {self.recorded}"


class TimingCache:
    """The cached timings of one machine fingerprint, read once and written back after every timing."""

    def __init__(
        self,
        path: Path,
        fingerprint: dict[str, Any],
        max_load: float,
        warn: Callable[[str], None],
        entries: dict[str, CachedTiming],
    ) -> None:
        self.path, self.fingerprint, self.max_load, self._warn = path, fingerprint, max_load, warn
        self.root = path.parent.parent  # the cache folder: the file is never written outside it
        self.entries = entries
        self.read = dict(entries)  # as found at the start (this run's timings go into `entries`)
        self.recorded = 0
        self._write_failed = False

    @property
    def threads(self) -> int:
        return int(self.fingerprint["threads"])

    @classmethod
    def open(
        cls,
        threads: int,
        pin: tuple[int, ...] | None,
        max_load: float,
        warn: Callable[[str], None],
        root: Path | None = None,
    ) -> TimingCache:
        """This machine's cache file, read; unreadable: `warn` once and start empty."""
        fingerprint = timing_fingerprint(threads, pin)
        path = (root if root is not None else cache_root()) / "timings" / f"{_key(fingerprint, 20)}.json"
        entries: dict[str, CachedTiming] = {}
        if path.exists():
            try:
                entries = _read(path, fingerprint)
            except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
                why = f"{type(exc).__name__}: {exc}"
                warn(
                    f"timing cache {path} is unreadable ({why[:160]}): ignored, every candidate is timed "
                    "afresh and the file rewritten"
                )
        return cls(path, fingerprint, max_load, warn, entries)

    def trusted(self, timing: CachedTiming) -> bool:
        """Timed on a quiet machine: the load beyond the candidate's own threads within --max-load."""
        return timing.load_avg - self.threads <= self.max_load

    def lookup(self, key: str) -> CachedTiming | None:
        """The entry for `key` when there is one and it can be trusted."""
        found = self.entries.get(key)
        return found if found is not None and self.trusted(found) else None

    def record(self, key: str, cand: Any) -> None:
        """`cand`'s fresh timing (it has `latency` and `load_avg`), then the file rewritten. A timing on a
        busy machine never replaces one from a quiet one."""
        if cand.latency is None or cand.load_avg is None:
            return
        new = CachedTiming(
            label=cand.label,
            p50=round(float(cand.latency.p50), 4),
            p99=round(float(cand.latency.p99), 4),
            calls=int(cand.timed_calls or 1),
            complete=cand.status == "accepted",
            load_avg=float(cand.load_avg),
            recorded=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        old = self.entries.get(key)
        if old is not None and self.trusted(old) and not self.trusted(new):
            return
        self.entries[key] = new
        self.recorded += 1
        self._save()

    def _save(self) -> None:
        from hotloop.io import atomic_write_json

        merged: dict[str, CachedTiming] = {}
        # Another run may have written entries since this one read the file; unreadable (said at open):
        # this run's entries replace it.
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError, RecursionError):
            merged = _read(self.path, self.fingerprint) if self.path.exists() else {}
        merged.update(self.entries)
        body = {
            "schema": SCHEMA,
            "fingerprint": self.fingerprint,
            "entries": {k: asdict(v) for k, v in sorted(merged.items())},
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            inside = Path(os.path.realpath(self.root)) / self.path.parent.name
            if Path(os.path.realpath(self.path.parent)) != inside:
                raise OSError(f"{self.path.parent} is a link out of the cache folder {self.root}")
            # A link at the file itself is replaced, never followed: the cache writes only in the cache.
            atomic_write_json(self.path, body, follow_symlinks=False)
        except OSError as exc:
            if not self._write_failed:
                self._write_failed = True
                self._warn(
                    f"timing cache {self.path} cannot be written ({exc}): this run's timings are not kept"
                )


MAX_CACHE_BYTES = 64 << 20  # a timing is ~300 bytes: hundreds of thousands of them


def _read(path: Path, fingerprint: dict[str, Any]) -> dict[str, CachedTiming]:
    from hotloop.io import read_text_bounded

    if path.is_symlink():
        raise ValueError("it is a link (the cache reads and writes only its own files)")
    body = json.loads(read_text_bounded(path, "", MAX_CACHE_BYTES))
    if not isinstance(body, dict) or body.get("schema") != SCHEMA:
        raise ValueError(f"not a schema-{SCHEMA} timing cache")
    if body.get("fingerprint") != json.loads(json.dumps(fingerprint)):
        raise ValueError("its machine fingerprint is not this machine's")
    entries = body.get("entries")
    if not isinstance(entries, dict):
        raise TypeError("'entries' must be an object")
    return {str(k): CachedTiming.from_dict(v) for k, v in entries.items()}


def summary(cache: TimingCache, candidates: list[Any], skipped: list[str]) -> dict[str, Any]:
    """What the result JSON says about the cache: which file, what it held for this run's candidates,
    which entries were not trusted (and the load they were timed at), what was skipped on its word."""
    held = [c for c in candidates if c.cache_key is not None and c.cache_key in cache.read]
    untrusted = [c for c in held if not cache.trusted(cache.read[c.cache_key])]
    return {
        "file": str(cache.path),
        "fingerprint": cache.path.stem,
        "entries_for_this_target": len(held),
        "not_trusted_high_load": [
            {"candidate": c.label, "load_avg": cache.read[c.cache_key].load_avg} for c in untrusted
        ],
        "skipped": skipped,
        "recorded": cache.recorded,
        "max_load": cache.max_load,
    }
