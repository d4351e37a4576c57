"""`Engine`: a compiled artifact loaded for inference with fixed shapes and buffers allocated once.

    engine = hotloop.Engine.load("art")          # verifies the artifact, builds the runners, warms up
    actions = engine.infer(obs, noise)           # obs: the family's observation or a dict of arrays
    future = engine.submit(obs, noise)           # the same on the engine's own worker thread

A policy artifact's manifest names its family (`kind`: "pi", "act", ...; `hotloop.families`), which
rebuilds the sub-engines' signatures and chains the runners (`PolicyFamily.pipeline`). Every runner owns
its input and output buffers; an output is bound as a later engine's input of the same name (pi: the
prefix's KV cache into the denoise engine), so nothing is copied between stages that agree on dtype. Inputs are validated (names, shapes,
dtypes, value ranges, NaN/Inf) with errors that name the input. On CUDA the denoise loop is captured once
as a CUDA Graph and replayed. Several engines can live in one process, each with its own resident-memory
cap (`memory_cap_mb`, checked at load and after every call; see `hotloop.runtime.memory`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from hotloop.compile.artifact import entries, is_lean, read_manifest
from hotloop.compile.backends import FILE_BACKENDS, get_backend
from hotloop.compile.backends.base import BackendError, OnnxGraph, PreparedFiles, Runner
from hotloop.errors import CheckpointError, ConfigError
from hotloop.families.inputs import check_finite, to_tensor
from hotloop.finite import check_finite_weights
from hotloop.runtime.memory import MemoryAccount, check_cap
from hotloop.runtime.onnx_check import check_onnx_entry
from hotloop.runtime.recorded_io import check_recorded_io

_log = logging.getLogger(__name__)

# Backends that run a sub-engine on a thread pool of their own (OpenVINO's, ONNX Runtime's), not on torch's.
# Between their calls torch only glues (the Euler update, a time embedding, copies); at torch's own thread
# count its OpenMP workers spin after each small parallel region and take the cores the backend's pool
# needs next. pi05:small's all-OpenVINO plan, 2 threads on 2 cores, 1,000 calls, three runs each in turn:
# p50 6.4 ms and p99 8.5-10.7 (max ~30: bursts of calls with vision and prefix 2.8x slower) with torch
# at 2 threads; p50 6.2-6.6 and p99 6.8-7.7 with the glue on one torch thread for the call.
OWN_POOL_BACKENDS = frozenset({"openvino", "onnxruntime"})


def _manifest_pin(manifest: dict[str, Any], root: Path) -> tuple[int, ...] | None:
    """The CPUs the plan was made for (`compile --reserve-cores`), where this process may use them all;
    otherwise none, said in the log (another machine's CPU ids mean nothing here)."""
    pin = manifest.get("pin")
    if not pin:
        return None
    usable = os.sched_getaffinity(0)
    if not set(pin) <= usable:
        _log.warning(
            "%s: the plan was pinned to CPUs %s, which this process cannot all use (usable: %s); not pinned",
            root,
            pin,
            sorted(usable),
        )
        return None
    return tuple(pin)


def check_load_options(path: str | Path, threads: int | None, pin: tuple[int, ...] | None) -> None:
    """`Engine.load`'s own arguments, named: an empty path, threads < 1, CPUs this process cannot use."""
    if not str(path):
        raise ConfigError("Engine.load: the artifact path is empty; give the artifact's folder")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"threads must be an integer >= 1 (got {threads!r})")
    if pin is not None:
        usable = os.sched_getaffinity(0)
        bad = [c for c in pin if not isinstance(c, int) or c not in usable]
        if not pin or bad:
            raise ConfigError(
                f"pin {tuple(pin)!r}: CPU(s) {bad or 'none given'} are not usable here; usable: {sorted(usable)}"
            )


def release_weights(model: torch.nn.Module) -> None:
    """Replace a model's parameters and buffers by meta tensors (same shapes and dtypes, no storage):
    every module that shares them (the sub-engines' graphs) sees the change, and their memory is freed."""
    model.to("meta")


class Engine:
    """A loaded artifact. Build with `Engine.load`; `infer` is not re-entrant (use `submit` to queue)."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest
        self.kind: str = manifest["kind"]
        self.runners: dict[str, Runner] = {}
        self.deterministic = False
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self.model: Any = None
        self.cfg: Any = None
        self.shape: Any = None
        self.pipeline: Any = None
        self.pipelines: dict[int, Any] = {}  # prompt bucket -> pipeline (families with prompt buckets)
        self.family: Any = None  # the policy family (None for an ONNX artifact)
        self.cuda_graph: Any = None
        self.memory = MemoryAccount(path, None)  # replaced by Engine.load's, which measured the load
        self.load_s: float | None = None  # Engine.load's wall time: verify, build the runners, warm up
        # torch's intra-op threads while a call runs (None: the process's setting): 1 when every sub-engine
        # runs on its backend's own pool (`OWN_POOL_BACKENDS`); the process's setting is restored after.
        backends = {e.backend for e in entries(manifest).values()}
        self.glue_threads: int | None = 1 if backends and backends <= OWN_POOL_BACKENDS else None

    # ---- loading ---------------------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        threads: int | None = None,
        pin: tuple[int, ...] | None = None,
        deterministic: bool = False,
        warmup: int = 1,
        replan: bool = False,
        memory_cap_mb: float | None = None,
        verify_files: bool = True,
    ) -> Engine:
        """Load and verify the artifact at `path`; threads/pinning from the caller, else the manifest.

        `replan=True`: when the plan needs CPU features this machine lacks (or was made for another
        machine class), re-plan it here into `<path>-replanned` and load that instead of refusing.
        `memory_cap_mb`: the engine's resident-memory cap in MiB, checked at load and after every call
        while running (`MemoryCapError` naming the artifact; what is counted: `hotloop.runtime.memory`).
        `warmup`: whole calls before returning. One is every graph's first call, which pays its one-time
        costs (an OpenVINO graph loaded from files is not called at its own load); `bench` and `serve`
        warm up again on their own, so more here only lengthens `load_s`.
        """
        started = time.perf_counter()
        check_cap(memory_cap_mb)
        check_load_options(path, threads, pin)
        root = Path(path)
        try:
            manifest = read_manifest(root, verify_files=verify_files)
        except CheckpointError as exc:
            if not replan or "CPU feature" not in str(exc) and "machine class" not in str(exc):
                raise
            from hotloop.runtime.replan import replan_artifact

            root = replan_artifact(root)
            manifest = read_manifest(root, verify_files=verify_files)
        check_cap_fits_plan(root, manifest, memory_cap_mb)
        for backend in sorted({e.backend for e in entries(manifest).values()}):
            # Import the libraries first: their code is the process's, shared by its engines, not this one's.
            get_backend(backend).unavailable_reason()
        account = MemoryAccount(root, memory_cap_mb)
        account.load_started()
        pin = pin if pin is not None else _manifest_pin(manifest, root)
        if pin is not None:
            os.sched_setaffinity(0, pin)
        threads = threads if threads is not None else manifest.get("threads")
        if threads is not None:
            torch.set_num_threads(int(threads))
        engine = cls(root, manifest)
        engine.memory = account
        engine.deterministic = deterministic
        if deterministic:
            # Same input, same output: torch picks deterministic kernels (a process-wide switch in torch).
            torch.use_deterministic_algorithms(True, warn_only=True)
        if engine.kind == "onnx":
            engine._load_onnx(threads)
        else:
            from hotloop.families import FAMILIES, get_family

            if engine.kind not in FAMILIES:
                raise CheckpointError(
                    f"{root / 'manifest.json'}: unknown artifact kind {engine.kind!r}; this hotloop "
                    f"loads onnx and the families {', '.join(FAMILIES)}"
                )
            engine.family = get_family(engine.kind)
            engine._load_family(threads, blob_cache=verify_files)
        for _ in range(warmup):
            engine.infer(engine.example_observation())
            for bucket in list(engine.pipelines)[:-1]:  # the smaller buckets see a prompt that fits them
                engine.infer(engine.example_observation(prompt_tokens=bucket))
        account.load_finished()
        engine.load_s = time.perf_counter() - started
        return engine

    def _load_family(self, threads: int | None, blob_cache: bool = True) -> None:
        """`blob_cache`: OpenVINO graphs load through their compiled-blob folders (`runtime.blob_cache`),
        whose keys are the manifest's hashes: only when the files were checked against them."""
        from hotloop.compile.bucket_plan import split_name
        from hotloop.compile.lean_files import mapped_state_dict
        from hotloop.families.protocol import constants_of
        from hotloop.runtime.blob_cache import load_files

        family, m = self.family, self.manifest
        try:
            self.cfg = family.config_from_dict(m["config"])
            self.shape = family.shape_from_dict(m["shape"])
        except (TypeError, KeyError, ValueError) as exc:
            raise CheckpointError(
                f"{self.path / 'manifest.json'}: config / shape do not describe a {family.name} model "
                f"({type(exc).__name__}: {exc}); recompile the artifact"
            ) from None
        if is_lean(m):
            self._load_lean(threads, blob_cache)
            return
        model = family.empty_model(self.cfg)
        try:
            state = mapped_state_dict(self.path / m["weights"])  # mapped, not read: `lean_files`
            model.load_state_dict(state, assign=True)
        except Exception as exc:  # noqa: BLE001 - safetensors and torch raise their own types
            raise CheckpointError(
                f"{self.path / m['weights']}: not the weights this manifest's config describes "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); recompile the artifact"
            ) from None
        check_finite_weights(state.items(), self.path / m["weights"])
        del state  # the model holds the tensors now; `release_weights` below must be able to free them
        self.model = model.float().eval()
        sets: dict[tuple[torch.dtype, str], Any] = {}
        variants = {e["name"]: e.get("variant", "plain") for e in m["sub_engines"]}
        # Entries "prefix@32", "denoise_step@32" are a prompt-length bucket's engines; plain names the full prompt.
        full = getattr(self.shape, "prompt_slots", 0)
        per_bucket: dict[int, dict[str, Runner]] = {}
        loop_sets: dict[int, Any] = {}
        looped = {n for st in family.stages if st.loop is not None for n in st.sub_engines}
        planned = []
        for name, entry in entries(m).items():
            base, bucket = split_name(name)
            bucket = bucket if bucket is not None else full
            backend = get_backend(entry.backend)
            key = (backend.graph_dtype(entry.precision), variants[name])
            if key[1] not in family.capabilities.recipes:
                raise CheckpointError(f"{self.path / 'manifest.json'}: unknown sub-engine variant {key[1]!r}")
            family.stage_of(base)  # a sub-engine the family does not have is refused by name
            if key not in sets:
                sets[key] = family.build_subengines(self.model, self.shape, key[0], key[1])
            graphs = sets[key] if bucket == full else family.reshape_subengines(self.cfg, sets[key], bucket)
            if base in looped:
                loop_sets[bucket] = graphs  # reshaped once, while the weights are still here
            planned.append((name, entry, base, bucket, backend, graphs))
        if all(entry.backend in FILE_BACKENDS for entry in entries(m).values()):
            # Every runner runs from the artifact's own files: the torch weights only built the graphs'
            # signatures, example inputs and step tables. Dropped before the backends load, so a
            # full-size model's fp32 copy and its compiled one are never resident together.
            release_weights(self.model)
        for name, entry, base, bucket, backend, graphs in planned:
            files = load_files(entry, m, threads, blob_cache)
            runner = backend.load(graphs[base], entry.precision, self.path / name, files)
            check_recorded_io(self.path / "manifest.json", name, entry, runner)
            self.runners[name] = runner
            per_bucket.setdefault(bucket, {})[base] = runner
        bucketed = set(family.capabilities.bucket_stages)
        shared = {
            n: r for n, r in per_bucket[full].items() if family.stage_of(n).name not in bucketed
        }  # one engine for the stages before the prompt (pi's vision): its output feeds every bucket
        pipelines = {}
        for bucket, runners in sorted(per_bucket.items()):
            runners.update(shared)
            engines = loop_sets.get(bucket, sets[next(iter(sets))] if bucket == full else None)
            if engines is None:
                raise CheckpointError(
                    f"{self.path / 'manifest.json'}: prompt bucket {bucket} has no {', '.join(sorted(looped))} engine"
                )
            shape = self.shape if bucket == full else family.with_prompt_slots(self.shape, bucket)
            signatures = {n: e.signature for n, e in engines.items()}
            pipelines[bucket] = family.pipeline(self.cfg, shape, runners, constants_of(engines), signatures)
            link_runners(runners)
        self._set_pipelines(pipelines, full)

    def _load_lean(self, threads: int | None, blob_cache: bool = True) -> None:
        """A lean artifact's pipeline from its manifest, tables and graph files (`runtime.lean_load`):
        the torch model is never built, and `self.model` stays None."""
        from hotloop.runtime import lean_load

        family, full = self.family, getattr(self.shape, "prompt_slots", 0)
        self.runners, per_bucket, signatures = lean_load.load_runners(
            self.path, self.manifest, family, self.cfg, threads, blob_cache
        )
        constants = lean_load.constants(self.path, self.manifest)
        if full not in per_bucket:
            raise CheckpointError(
                f"{self.path / 'manifest.json'}: no sub-engine runs the full prompt; recompile"
            )
        bucketed = set(family.capabilities.bucket_stages)
        shared = {n: r for n, r in per_bucket[full].items() if family.stage_of(n).name not in bucketed}
        pipelines = {}
        for bucket, runners in sorted(per_bucket.items()):
            runners.update(shared)
            shape = self.shape if bucket == full else family.with_prompt_slots(self.shape, bucket)
            pipelines[bucket] = family.pipeline(self.cfg, shape, runners, constants, signatures)
            link_runners(runners)
        self._set_pipelines(pipelines, full)

    def _set_pipelines(self, pipelines: dict[int, Any], full: int) -> None:
        self.pipelines = pipelines
        if len(pipelines) > 1:
            from hotloop.families.buckets import BucketedPipeline

            self.pipeline = BucketedPipeline(pipelines, self.family.prompt_length)
        else:
            self.pipeline = pipelines[full]
        self._maybe_capture_cuda_graph()

    def _load_onnx(self, threads: int | None) -> None:
        for name, entry in entries(self.manifest).items():
            graph = OnnxGraph(
                name=name,
                path=self.path / entry.files[0] if entry.files else self.path,
                example_inputs=tuple(
                    torch.zeros(s, dtype=getattr(torch, d))
                    for s, d in zip(entry.input_shapes, entry.input_dtypes, strict=True)
                ),
                input_names=tuple(entry.input_names),
                output_names=tuple(entry.output_names),
            )
            options = dict(entry.options)
            if threads is not None:
                options["threads"] = threads
            files = PreparedFiles(files=[Path(f).name for f in entry.files], options=options)
            graph.path = self.path / name / _graph_file(entry.backend, files.files)
            where = self.path / "manifest.json"
            check_onnx_entry(where, self.manifest, name, entry, graph.path)  # before any buffer is fed
            try:
                runner = get_backend(entry.backend).load(graph, entry.precision, self.path / name, files)
            except BackendError as exc:
                raise CheckpointError(
                    f"{where}: sub-engine {name!r} does not run with the I/O its entry records "
                    f"({str(exc).splitlines()[0][:200]}); recompile the artifact"
                ) from None
            check_recorded_io(where, name, entry, runner)  # the outputs the graph gives
            self.runners[name] = runner

    def _maybe_capture_cuda_graph(self) -> None:
        """Capture the denoise loop once on CUDA (eager / inductor loop engines only)."""
        loop = self.runners.get("denoise_loop")
        if loop is None or not loop.inputs or loop.inputs[0].device.type != "cuda":
            return
        from hotloop.runtime.cuda_graph import capture

        self.cuda_graph = capture(loop)

    # ---- inputs ----------------------------------------------------------------------------------------
    def example_observation(self, prompt_tokens: int | None = None) -> Any:
        """A deterministic observation of the engine's shapes (ONNX: zeros); `prompt_tokens` real tokens
        (families with prompt buckets; default all slots)."""
        if self.kind == "onnx":
            return {
                n: torch.zeros_like(x)
                for n, x in zip(self._onnx_runner.input_names, self._onnx_runner.inputs, strict=True)
            }
        obs = self.family.example_observation(self.cfg, self.shape, torch.device("cpu"))
        if prompt_tokens is not None:
            obs = self.family.fill_prompt(obs, prompt_tokens)
        return obs

    @property
    def _onnx_runner(self) -> Runner:
        return next(iter(self.runners.values()))

    def validate(self, obs: Any, noise: Tensor | None = None) -> Any:
        """The observation as the engine's inputs, or ConfigError naming the input that does not fit."""
        if self.kind == "onnx":
            return self._validate_onnx(obs)
        checked = self.family.validate_observation(self.cfg, self.shape, obs)
        if noise is not None:
            check_finite("noise", noise)
        return checked

    def _onnx_checked_names(self, obs: Any) -> Runner:
        """The ONNX runner, once `obs` is a dict naming exactly its inputs (ConfigError otherwise)."""
        runner = self._onnx_runner
        if not isinstance(obs, dict):
            raise ConfigError(f"inputs must be a dict of {', '.join(runner.input_names)}")
        missing = [n for n in runner.input_names if n not in obs]
        unknown = sorted(set(obs) - set(runner.input_names))
        if missing or unknown:
            raise ConfigError(
                f"inputs {'missing ' + ', '.join(missing) if missing else ''}"
                f"{'; unknown ' + ', '.join(unknown) if unknown else ''}; this engine takes {', '.join(runner.input_names)}"
            )
        return runner

    def _onnx_arrays(self, obs: Any) -> list[Any]:
        """The inputs of an ONNX artifact as numpy arrays, checked with numpy alone (names, shapes, float
        or not, NaN / inf): nothing on this path starts a torch parallel region (`Runner.run_from`)."""
        import numpy as np

        runner = self._onnx_checked_names(obs)
        out = []
        for name, buf in zip(runner.input_names, runner.inputs, strict=True):
            value = obs[name]
            if isinstance(value, Tensor):
                value = value.detach().cpu().numpy()
            try:
                arr = np.asarray(value)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"input {name!r} is a {type(value).__name__}; pass a tensor or a numpy array"
                ) from None
            if arr.dtype.kind not in "biuf":
                raise ConfigError(f"input {name!r} has dtype {arr.dtype}; this engine takes {buf.dtype}")
            if tuple(arr.shape) != tuple(buf.shape):
                raise ConfigError(
                    f"input {name!r} has shape {tuple(arr.shape)}; this engine takes {tuple(buf.shape)}"
                )
            if (arr.dtype.kind == "f") != buf.is_floating_point():
                raise ConfigError(f"input {name!r} has dtype {arr.dtype}; this engine takes {buf.dtype}")
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise ConfigError(f"input {name!r} contains NaN or Inf")
            out.append(arr)
        return out

    def _validate_onnx(self, obs: Any) -> list[Tensor]:
        runner = self._onnx_checked_names(obs)
        out = []
        for name, buf in zip(runner.input_names, runner.inputs, strict=True):
            t = to_tensor(name, obs[name])
            if t.shape != buf.shape:
                raise ConfigError(
                    f"input {name!r} has shape {tuple(t.shape)}; this engine takes {tuple(buf.shape)}"
                )
            if t.is_floating_point() != buf.is_floating_point():
                raise ConfigError(f"input {name!r} has dtype {t.dtype}; this engine takes {buf.dtype}")
            if t.is_floating_point():
                check_finite(name, t)
            out.append(t)
        return out

    # ---- running ---------------------------------------------------------------------------------------
    @contextmanager
    def _torch_glue_threads(self) -> Iterator[None]:
        """torch at `glue_threads` for one call (see `OWN_POOL_BACKENDS`), the caller's count restored."""
        if self.glue_threads is None:
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(self.glue_threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def infer(self, obs: Any, noise: Tensor | None = None) -> Any:
        """Actions (B, chunk, A) in model space for a policy artifact; {output name: tensor} for an ONNX one.

        `noise` defaults to zeros in deterministic mode, else a fresh N(0, 1) draw. Returned tensors are
        the engine's buffers: copy them before the next call if you keep them.
        """
        if self.kind == "onnx" and self._onnx_runner.host_buffers:
            # The path compile's final check timed (`Runner.run_from`): numpy checks and copy, then the run.
            arrays = self._onnx_arrays(obs)
            with self._lock, self.memory.call(), self._torch_glue_threads():
                runner = self._onnx_runner
                return dict(zip(runner.output_names, runner.run_from(arrays), strict=True))
        checked = self.validate(obs, noise)
        with self._lock, self.memory.call(), self._torch_glue_threads():
            if self.kind == "onnx":
                runner = self._onnx_runner
                outs = runner(*checked)
                return dict(zip(runner.output_names, outs, strict=True))
            if noise is None:
                shape = self.family.noise_shape(self.cfg, self.shape, self.shape.batch)
                noise = torch.zeros(shape) if self.deterministic else torch.randn(shape)
            return self.pipeline.sample(checked, noise)

    def sample(self, obs: Any, noise: Tensor, timer: Any = None) -> Tensor:
        """`infer` with stage timing (for `hotloop bench ART`)."""
        checked = self.validate(obs, noise)
        with self._lock, self.memory.call(), self._torch_glue_threads():
            return self.pipeline.sample(checked, noise, timer=timer)

    def submit(self, obs: Any, noise: Tensor | None = None) -> Future[Any]:
        """Queue `infer` on the engine's worker thread; the result is copied out of the buffers."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hotloop-engine")

        def run() -> Any:
            out = self.infer(obs, noise)
            return {k: v.clone() for k, v in out.items()} if isinstance(out, dict) else out.clone()

        return self._executor.submit(run)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def describe(self) -> dict[str, Any]:
        return {
            "artifact": str(self.path),
            "target": self.manifest.get("target"),
            "plan": {n: f"{r.backend} {r.precision}" for n, r in self.runners.items()},
            "torch_threads_in_call": self.glue_threads,  # None: the process's own setting
            "memory": self.memory.to_dict(),
            "load_s": self.load_s,
            "layout": self.kind if self.kind == "onnx" else self.manifest.get("layout", "weights"),
            **({"prompt_buckets": list(self.pipelines)} if len(self.pipelines) > 1 else {}),
            **({"compiled_blobs": blobs} if (blobs := self._blobs()) else {}),
        }

    def _blobs(self) -> dict[str, str]:
        """Per OpenVINO sub-engine: its compiled blob imported from hotloop's cache, or compiled at this
        load (`hotloop.runtime.blob_cache`)."""
        found = {n: getattr(r, "blob", None) for n, r in self.runners.items()}
        return {n: str(b) for n, b in found.items() if b}


def check_cap_fits_plan(root: Path, manifest: dict[str, Any], cap_mb: float | None) -> None:
    """Refuse, before anything is loaded, a cap below what the plan's graph files hold: the engine cannot
    run in less than its weights (`memory.weights_mb`, written at compile)."""
    from hotloop.errors import MemoryCapError
    from hotloop.targets import CAP_FLAG

    need = float(manifest.get("memory", {}).get("weights_mb", 0))
    if cap_mb is not None and need > cap_mb:
        raise MemoryCapError(
            f"{root}: the plan's weights alone take {need:.0f} MiB (its graph files), above {CAP_FLAG} "
            f"{cap_mb:g}; raise {CAP_FLAG} to at least {need:.0f} plus the buffers, or compile a smaller "
            "plan (--precisions int8,int4-weight)"
        )


def link_runners(runners: dict[str, Runner]) -> list[str]:
    """Bind each consumer input to the producer output of the same name when they agree (no copies)."""
    linked = []
    for consumer_name, consumer in runners.items():
        for producer_name, producer in runners.items():
            if producer is consumer:
                continue
            for j, out_name in enumerate(producer.output_names):
                if out_name in consumer.input_names:
                    i = consumer.input_names.index(out_name)
                    if consumer.bind_input(i, producer.outputs[j]):
                        linked.append(f"{producer_name}.{out_name} -> {consumer_name}")
    return linked


def _graph_file(backend: str, files: list[str]) -> str:
    for f in files:
        if f.endswith((".onnx", ".xml", ".plan")):
            return f
    return files[0] if files else ""
