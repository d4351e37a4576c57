"""`onnxruntime`: the sub-engine exported to ONNX, run by ONNX Runtime with IO binding into our buffers.

Execution providers: CPU always; CUDA and TensorRT when the installed build has them and the buffers live
on a GPU. Precision fp32 only (ONNX Runtime's CPU EP has no bf16 kernels for most ops).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hotloop.compile.backends.base import (
    BackendError,
    Graph,
    PreparedFiles,
    Runner,
    input_buffers,
    op_errors,
)
from hotloop.compile.backends.defaults import BackendDefaults

MODEL_FILE = "model.onnx"
_NP = {
    torch.float32: np.float32,
    torch.float16: np.float16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.bool: np.bool_,
}
_TORCH = {
    "tensor(float)": torch.float32,
    "tensor(float16)": torch.float16,
    "tensor(int64)": torch.int64,
    "tensor(int32)": torch.int32,
    "tensor(bool)": torch.bool,
}


def _providers(device: torch.device) -> list[str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    if device.type == "cuda":
        wanted = ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
        picked = [p for p in wanted if p in available]
        if not picked:
            raise BackendError(
                "onnxruntime: buffers are on CUDA but this build has no CUDA execution provider"
            )
        return [*picked, "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


class OnnxRuntimeRunner(Runner):
    backend = "onnxruntime"

    def __init__(self, graph: Graph, precision: str, model_path: Path, options: dict[str, Any]) -> None:
        import onnxruntime as ort

        self.model_path = model_path
        self.options = dict(options)
        inputs = input_buffers(graph.example_inputs)
        device = inputs[0].device if inputs else torch.device("cpu")
        self.providers = _providers(device)
        with op_errors(self.backend, graph.name):
            self.session = self._session(ort)
            outs = self.session.get_outputs()
            probe = self.session.run(
                None, {n: _to_numpy(x) for n, x in zip(graph.input_names, inputs, strict=True)}
            )
        outputs = tuple(
            torch.empty(tuple(p.shape), dtype=_TORCH.get(o.type, torch.float32), device=device)
            for o, p in zip(outs, probe, strict=True)
        )
        super().__init__(graph, precision, inputs, outputs)
        self.output_names = tuple(o.name for o in outs)
        self.binding = self._bind(self.session)

    def _session(self, ort: Any, profile_prefix: str | None = None) -> Any:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if self.options.get("threads"):
            so.intra_op_num_threads = int(self.options["threads"])
        so.inter_op_num_threads = 1
        if profile_prefix is not None:
            so.enable_profiling = True
            so.profile_file_prefix = profile_prefix
        return ort.InferenceSession(str(self.model_path), so, providers=self.providers)

    def _bind(self, session: Any) -> Any:
        binding = session.io_binding()
        for name, x in zip(self.input_names, self.inputs, strict=True):
            binding.bind_input(
                name, x.device.type, x.device.index or 0, _NP[x.dtype], tuple(x.shape), x.data_ptr()
            )
        for name, y in zip(self.output_names, self.outputs, strict=True):
            binding.bind_output(
                name, y.device.type, y.device.index or 0, _NP[y.dtype], tuple(y.shape), y.data_ptr()
            )
        return binding

    def _run(self) -> None:
        self.session.run_with_iobinding(self.binding)

    def _rebind(self) -> None:
        self.binding = self._bind(self.session)

    def save(self, folder: Path) -> PreparedFiles:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.model_path, folder / MODEL_FILE)
        return PreparedFiles(
            files=[MODEL_FILE], options={k: v for k, v in self.options.items() if k != "threads"}
        )

    def profile(self, iterations: int) -> list[tuple[str, float]]:
        import onnxruntime as ort

        with tempfile.TemporaryDirectory() as tmp:
            session = self._session(ort, profile_prefix=str(Path(tmp) / "ort"))
            binding = self._bind(session)
            session.run_with_iobinding(binding)  # warm-up: its events are skipped below
            for _ in range(iterations):
                session.run_with_iobinding(binding)
            trace = Path(session.end_profiling())
            events = json.loads(trace.read_text())
        runs = sorted((ev["ts"] + ev.get("dur", 0)) for ev in events if ev.get("name") == "model_run")
        start = runs[0] if len(runs) > iterations else 0  # end of the warm-up run
        rows: dict[str, float] = {}
        for ev in events:
            if ev.get("ts", 0) < start:
                continue
            if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time"):
                op = ev.get("args", {}).get("op_name", "?")
                rows[op] = rows.get(op, 0.0) + float(ev.get("dur", 0)) / 1e3
        return sorted(rows.items(), key=lambda kv: -kv[1])


def _to_numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


class OnnxRuntimeBackend(BackendDefaults):
    name = "onnxruntime"
    precisions = ("fp32", "int8", "int8-dynamic")
    module = "onnxruntime"

    def precision_reason(self, precision: str) -> str | None:
        if precision not in self.precisions:
            return f"onnxruntime runs fp32 and int8 only here (no {precision} CPU kernels)"
        return None

    def prepare(self, graph: Graph, precision: str, options: dict[str, Any]) -> Runner:
        calibration = options.get("calibration")
        options = {k: v for k, v in options.items() if k != "calibration"}  # runtime only, never saved
        if graph.module is None and precision == "fp32":
            return OnnxRuntimeRunner(graph, precision, Path(graph.path), options)  # type: ignore[attr-defined]
        from hotloop.compile.export import export_onnx

        # The export lives as long as the runner (tests and the planner never keep these directories).
        self._tmp = tempfile.TemporaryDirectory(prefix="hotloop-onnx-")
        keep: list[Any] = [self._tmp]
        cache = getattr(graph, "conversions", None)  # a sub-engine is exported once, for every precision
        if graph.module is None:
            path = Path(graph.path)  # type: ignore[attr-defined]
        elif cache is not None and "onnxruntime" in cache:
            exported, path = cache["onnxruntime"]
            keep.append(exported)  # the cached export's folder lives while this runner does
        else:
            exported = tempfile.TemporaryDirectory(prefix="hotloop-onnx-export-")
            path = export_onnx(graph, Path(exported.name) / MODEL_FILE)
            keep.append(exported)
            if cache is not None:
                cache["onnxruntime"] = (exported, path)
        if precision != "fp32":
            from hotloop.compile.backends.quantize import quantize_onnx

            with op_errors(self.name, graph.name):
                path = quantize_onnx(
                    path,
                    Path(self._tmp.name) / f"quantized-{MODEL_FILE}",
                    precision,
                    {**options, "calibration": calibration},
                    graph.input_names,
                    graph.name,
                )
        runner = OnnxRuntimeRunner(graph, precision, path, options)
        runner._tmp = keep  # type: ignore[attr-defined]
        return runner

    def load(self, graph: Graph, precision: str, folder: Path, files: PreparedFiles) -> Runner:
        return OnnxRuntimeRunner(graph, precision, folder / MODEL_FILE, files.options)
