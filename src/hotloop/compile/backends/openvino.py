"""`openvino`: OpenVINO IR compiled for the CPU plugin, reading and writing our buffers in place.

fp32 pins INFERENCE_PRECISION_HINT=f32 (the plugin would otherwise pick bf16 on a CPU with native bf16 and
break parity); bf16 asks for it explicitly and is only offered where the plugin reports BF16 capability,
so a "bf16" plan never silently runs f32.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from hotloop.compile.backends.base import BackendCrash, Graph, PreparedFiles, Runner, input_buffers, op_errors
from hotloop.compile.backends.defaults import BackendDefaults
from hotloop.compile.backends.lean_int8 import FLOAT_PRECISION, LEAN, QUANTIZER
from hotloop.compile.cpu_features import NATIVE_BF16
from hotloop.process_memory import release_mapped_files

XML_FILE, BIN_FILE = "model.xml", "model.bin"
_TORCH = {
    "f32": torch.float32,
    "i64": torch.int64,
    "i32": torch.int32,
    "boolean": torch.bool,
    "f16": torch.float16,
}


def openvino_config(precision: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """CPU plugin settings: quantized graphs (hotloop.compile.backends.quantize) run their float parts in f32,
    unless their options say bf16 (`lean_int8.FLOAT_PRECISION`, saved with the plan); int8-dynamic asks the
    plugin to quantize activations per group of 32 at run time."""
    bf16 = precision == "bf16" or (options or {}).get(FLOAT_PRECISION) == "bf16"
    config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32"}
    if precision == "int8-dynamic":
        config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = 32
    return config


def _has_bf16() -> bool:
    return "BF16" in _core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def _lean_int8(graph: Graph, model: Any, precision: str, options: dict[str, Any], calibration: Any) -> Any:
    """`model` in static int8 by hotloop's lean quantizer (`hotloop.compile.backends.lean_int8`), its float
    parts in bf16 where the plugin has it (recorded in `options`, which the plan saves)."""
    from hotloop.compile.backends.base import BackendError
    from hotloop.compile.backends.lean_int8 import lean_static_int8
    from hotloop.compile.backends.quantize import calibration_inputs, kept_fp32

    if precision != "int8":
        raise BackendError(f"backend openvino: the lean quantizer makes static int8 only, not {precision}")
    if graph.module is None:
        raise BackendError(
            f"backend openvino: the lean quantizer calibrates the torch graph; {graph.name!r} is a file"
        )
    data = calibration_inputs({"calibration": calibration}, graph.name, "openvino")
    model = lean_static_int8(model, graph.module, data, kept_fp32(options))
    if _has_bf16():
        options[FLOAT_PRECISION] = "bf16"
    return model


def _core() -> Any:
    import openvino as ov

    return ov.Core()


def _reshape(model: Any, examples: Any, names: Any = None) -> None:
    """Fix every input of `model` to its example's shape (by name when the graph names its inputs)."""
    import openvino as ov

    if names:
        by_name = dict(zip(names, examples, strict=True))
        shapes = {
            port: ov.PartialShape(list(by_name[port.get_any_name()].shape))
            for port in model.inputs
            if port.get_any_name() in by_name
        }
    else:
        shapes = {
            port: ov.PartialShape(list(x.shape)) for port, x in zip(model.inputs, examples, strict=True)
        }
    model.reshape(shapes)


# Runtime option (never saved): compile the graph and run it once in a child process first, so that a
# plugin crash (a signal, not an exception) refuses this candidate instead of killing the planner.
PROBE = "probe"


def _holds_files(folder: Path | None) -> bool:
    return folder is not None and folder.is_dir() and any(folder.iterdir())


def _has_group_norm(model: Any, source: Path | None) -> bool:
    if model is not None:
        return any(op.get_type_name() == "GroupNormalization" for op in model.get_ops())
    return source is not None and 'type="GroupNormalization"' in source.read_text(errors="replace")


def _discard(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def _probe(source: Path, config: dict[str, Any], inputs: Any, what: str) -> float:
    """Compile the saved graph `source` and run it once on `inputs` in a child process
    (`openvino_probe_child.py` through `hotloop.compile.crash_probe`); the child's seconds, or BackendCrash
    naming the signal. With `CACHE_DIR` in `config` the child exports the compiled blob there, and the
    caller's own compile with the same settings imports it (pi05:small's unrolled loop: 0.9 s against
    3.0 s to compile), so the probe costs about one compile, not two. The child's inputs go to a temporary
    folder of their own (never the blob folder, which another process loading the same plan may read)."""
    import json
    import sys
    import tempfile

    import numpy as np

    from hotloop.compile.crash_probe import ProbeFailure, run_child

    child = Path(__file__).with_name("openvino_probe_child.py")
    try:
        with tempfile.TemporaryDirectory(prefix="hotloop-probe-") as held:
            workdir = Path(held)
            np.savez(workdir / "inputs.npz", **{str(i): x.numpy() for i, x in enumerate(inputs)})
            spec = {"xml": str(source), "config": config, "inputs": str(workdir / "inputs.npz")}
            (workdir / "probe.json").write_text(json.dumps(spec))
            # -P: the script's folder (this one, which holds a module named openvino) stays off sys.path.
            return run_child([sys.executable, "-P", str(child), str(workdir / "probe.json")], what)
    except ProbeFailure as exc:
        threads = config.get("INFERENCE_NUM_THREADS")
        raise BackendCrash(
            f"backend openvino: {exc}"
            + (f" with INFERENCE_NUM_THREADS={threads}" if threads else "")
            + "; not used"
        ) from None


class OpenVinoRunner(Runner):
    """A compiled OpenVINO graph bound to our buffers. Made from an `ov.Model` (the planner), or from a
    saved graph's path (`source`) with a compiled-blob folder (`blob_dir`, `hotloop.runtime.blob_cache`):
    OpenVINO then imports the blob it exported at an earlier load instead of compiling, and reads the
    graph itself only when it is saved or profiled. `first_call`: run it once now (its one-time costs);
    an engine's own warm-up does that at load."""

    backend = "openvino"

    def __init__(
        self,
        graph: Graph,
        precision: str,
        model: Any,
        options: dict[str, Any],
        source: Path | None = None,
        blob_dir: Path | None = None,
        first_call: bool = True,
    ) -> None:

        self._model, self._source = model, source
        self.blob: str | None = None  # with a blob folder: imported, or compiled (and cached)
        self.options = dict(options)
        config: dict[str, Any] = {
            **openvino_config(precision, self.options),
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
        }
        if self.options.get("threads"):
            config["INFERENCE_NUM_THREADS"] = int(self.options["threads"])
        if _has_group_norm(model, source):
            # OpenVINO 2026.4's CPU snippets crash the process (SIGSEGV) compiling a GroupNorm ResNet block
            # under the f32 hint (Diffusion Policy's encoder); without snippets the same graph runs.
            config["SNIPPETS_MODE"] = "DISABLE"
        if self.options.get("profile"):
            config["PERF_COUNT"] = True
        inputs = input_buffers(graph.example_inputs)
        self.probe_s: float | None = None
        self.probe_blob_imported: bool | None = None  # the planner's probe only
        self.loaded_from_cache: bool | None = None  # compiled through a blob folder: did OpenVINO import
        held = _holds_files(blob_dir)  # a blob from an earlier load
        what = f"OpenVINO {precision} of graph {graph.name!r}"
        if self.options.pop(PROBE, False) and model is not None:
            # The planner's candidate: saved to a temporary folder, compiled there by the probe's child,
            # whose blob this process's compile of the same file imports; the folder goes after.
            import tempfile

            import openvino as ov

            from hotloop.io import cache_root

            # In hotloop's cache folder, not /tmp: the graph is as large as its weights (a full-size
            # prefix is gigabytes), and /tmp is often a RAM-backed tmpfs.
            probes = cache_root() / "openvino-probe"
            probes.mkdir(parents=True, exist_ok=True)
            handoff = Path(tempfile.mkdtemp(prefix="candidate-", dir=probes))
            try:
                ov.save_model(model, str(handoff / XML_FILE), compress_to_fp16=False)
                blobs = handoff / "blobs"
                self.probe_s = _probe(handoff / XML_FILE, {**config, "CACHE_DIR": str(blobs)}, inputs, what)
                self._compile(graph, handoff / XML_FILE, blobs, False, config, inputs, first_call)
            finally:
                _discard(handoff)
            # Whether the compile here imported the child's blob (else it compiled the graph a second time).
            self.probe_blob_imported = self.loaded_from_cache
            self.blob = None  # a planner's blob is not kept: nothing to report at load
        else:
            if model is None and blob_dir is not None and not held:
                # A first load (nothing in the blob folder yet): compiled in a child, which exports the blob
                # this process then imports; a later load imports a blob that compiled and ran here.
                assert source is not None
                self.probe_s = _probe(source, {**config, "CACHE_DIR": str(blob_dir)}, inputs, what)
            self._compile(
                graph,
                source if model is None else model,
                blob_dir if model is None else None,
                held,
                config,
                inputs,
                first_call,
            )
        super().__init__(graph, precision, inputs, self._outputs)

    def _compile(
        self,
        graph: Graph,
        what: Any,
        blob_dir: Path | None,
        held: bool,
        config: dict[str, Any],
        inputs: tuple[torch.Tensor, ...],
        first_call: bool,
    ) -> None:
        """Compile `what` (an `ov.Model`, or a saved graph's path), through `blob_dir` when given:
        `self.blob` then says whether this load imported an earlier load's blob (`held`) or compiled (and
        cached) one; `self.loaded_from_cache` whether OpenVINO imported a blob at all."""
        import openvino as ov

        with op_errors(self.backend, graph.name):
            if isinstance(what, Path):
                cached = {"CACHE_DIR": str(blob_dir)} if blob_dir is not None else {}
                self.compiled = _core().compile_model(str(what), "CPU", {**config, **cached})
                if blob_dir is not None:
                    self.loaded_from_cache = bool(self.compiled.get_property("LOADED_FROM_CACHE"))
                    # Imported: a blob from an earlier load; a first load's blob was compiled here (the
                    # probe's child compiled it, this process imported it): "compiled, cached".
                    cached_now = "compiled, cached" if _holds_files(blob_dir) else "compiled"
                    self.blob = "imported" if held else cached_now
                # The plugin repacked the weights into its own memory: the mapped file's pages are not read
                # again but would stay resident (a second copy of the model; `release_mapped_files`).
                release_mapped_files([what.parent] + ([blob_dir] if blob_dir is not None else []))
            else:
                self.compiled = _core().compile_model(what, "CPU", config)
            self.request = self.compiled.create_infer_request()
            outputs = []
            for port in self.compiled.outputs:
                shape = tuple(int(d) for d in port.get_shape())
                dtype = _TORCH.get(port.get_element_type().get_type_name(), torch.float32)
                outputs.append(torch.empty(shape, dtype=dtype))
            for i, x in enumerate(inputs):
                self.request.set_input_tensor(i, ov.Tensor(x.numpy(), shared_memory=True))
            for i, y in enumerate(outputs):
                self.request.set_output_tensor(i, ov.Tensor(y.numpy(), shared_memory=True))
            if first_call:
                self.request.infer()
        self._outputs = outputs

    @property
    def model(self) -> Any:
        """The graph (`ov.Model`); a runner made from a file reads it on first use."""
        if self._model is None:
            assert self._source is not None
            self._model = _core().read_model(str(self._source), str(self._source.with_suffix(".bin")))
        return self._model

    def _run(self) -> None:
        self.request.infer()

    def _rebind(self) -> None:
        import openvino as ov

        for i, x in enumerate(self.inputs):
            self.request.set_input_tensor(i, ov.Tensor(x.numpy(), shared_memory=True))

    def save(self, folder: Path) -> PreparedFiles:
        import openvino as ov

        folder.mkdir(parents=True, exist_ok=True)
        ov.save_model(self.model, str(folder / XML_FILE), compress_to_fp16=False)
        opts = {k: v for k, v in self.options.items() if k not in ("threads", "profile", PROBE)}
        return PreparedFiles(files=[XML_FILE, BIN_FILE], options=opts)

    def profile(self, iterations: int) -> list[tuple[str, float]]:
        import openvino as ov

        compiled = _core().compile_model(
            self.model, "CPU", {**openvino_config(self.precision, self.options), "PERF_COUNT": True}
        )
        request = compiled.create_infer_request()
        for i, x in enumerate(self.inputs):
            request.set_input_tensor(i, ov.Tensor(x.numpy(), shared_memory=True))
        request.infer()  # the first run pays one-time costs: not an operator's time
        rows: dict[str, float] = {}
        for _ in range(iterations):
            request.infer()
            for info in request.profiling_info:
                key = f"{info.node_type} ({info.exec_type})"
                rows[key] = rows.get(key, 0.0) + info.real_time.total_seconds() * 1e3
        return sorted(rows.items(), key=lambda kv: -kv[1])


class OpenVinoBackend(BackendDefaults):
    """The graph stays f32 at every precision (`graph_dtype`): the precision is the plugin's hint."""

    name = "openvino"
    precisions = ("fp32", "bf16", "int8", "int8-dynamic", "int4-weight")
    module = "openvino"

    def precision_reason(self, precision: str) -> str | None:
        if precision == "bf16" and not _has_bf16():
            caps = _core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
            return f"this CPU has no native bf16 (OpenVINO CPU capabilities: {', '.join(caps)})"
        return None

    def required_features(self, precision: str, options: dict[str, Any] | None = None) -> list[str]:
        bf16 = precision == "bf16" or (options or {}).get(FLOAT_PRECISION) == "bf16"
        return ["|".join(NATIVE_BF16)] if bf16 else []

    def prepare(self, graph: Graph, precision: str, options: dict[str, Any]) -> Runner:
        import openvino as ov

        calibration = options.get("calibration")
        options = {k: v for k, v in options.items() if k != "calibration"}  # runtime only, never saved
        with op_errors(self.name, graph.name):
            cache = getattr(graph, "conversions", None)  # pi sub-engines: converted once, any precision
            if graph.module is None:
                model = _core().read_model(str(graph.path))  # type: ignore[attr-defined]
                # An ONNX file's dynamic axes (batch, height, width) take the shapes --input states:
                # OpenVINO's CPU plugin cannot compile some dynamic graphs ("to_shape was called on a
                # dynamic shape"), and a static one is planned once.
                _reshape(model, graph.example_inputs, getattr(graph, "input_names", None))
            elif cache is not None and "openvino" in cache:
                model = cache["openvino"].clone()
            else:
                with warnings.catch_warnings(), torch.no_grad():
                    warnings.simplefilter("ignore")
                    model = ov.convert_model(graph.module, example_input=tuple(graph.example_inputs))
                # Traced shapes stay dynamic; fix them so the plugin plans memory once.
                _reshape(model, graph.example_inputs)
                if cache is not None:
                    cache["openvino"] = model.clone()
            if precision == "bf16":
                # Weights stored as fp16 (more mantissa than the bf16 the plugin computes in, so the
                # actions do not move: pi05:small cos 0.9999968 -> 0.9999964 against fp32), halving the
                # artifact's graph files and what the loaded engine keeps of them (pi05:small bf16:
                # 1.16 -> 0.83 GiB resident). Done here, not at save, so the planner checks what ships.
                from openvino._offline_transformations import compress_model_transformation

                compress_model_transformation(model)  # in place: `model` is this candidate's own copy
            if precision not in ("fp32", "bf16") and options.get(QUANTIZER) == LEAN:
                model = _lean_int8(graph, model, precision, options, calibration)
            elif precision not in ("fp32", "bf16"):
                from hotloop.compile.backends.quantize import quantize_openvino

                model = quantize_openvino(
                    model, precision, {**options, "calibration": calibration}, graph.name
                )
        return OpenVinoRunner(graph, precision, model, options)

    def load(self, graph: Graph, precision: str, folder: Path, files: PreparedFiles) -> Runner:
        """The saved graph compiled for this CPU; with a blob key in the options (`Engine.load` sets it,
        `hotloop.runtime.blob_cache`), through a compiled-blob folder and without a warm-up call here."""
        from hotloop.runtime.blob_cache import BLOB_KEY, blob_folder, mark_used

        options = {k: v for k, v in files.options.items() if k != BLOB_KEY}
        key = files.options.get(BLOB_KEY)
        if key is not None:
            config = {"threads": options.get("threads"), **openvino_config(precision, options)}
            blobs = blob_folder(str(key), precision, config)
            mark_used(blobs)
            return OpenVinoRunner(graph, precision, None, options, folder / XML_FILE, blobs, first_call=False)
        with op_errors(self.name, graph.name):
            model = _core().read_model(str(folder / XML_FILE), str(folder / BIN_FILE))
        return OpenVinoRunner(graph, precision, model, options)
