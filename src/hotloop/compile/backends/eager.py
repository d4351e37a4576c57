"""`eager`: the PyTorch module as written, in the graph's own dtype (fp32 is the reference)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from hotloop.compile.backends.base import (
    BackendError,
    Graph,
    PreparedFiles,
    Runner,
    input_buffers,
    module_dtype,
    op_errors,
    output_buffers,
)
from hotloop.compile.backends.defaults import BackendDefaults


class TorchRunner(Runner):
    """Runs a callable on the input buffers and copies its result into the output buffers."""

    backend = "eager"

    def __init__(self, graph: Graph, precision: str, fn: Any) -> None:
        self.options: dict[str, Any] = {}  # what `save` records (a quantized plan's fp32 layers)
        if graph.module is None:
            raise BackendError(
                f"backend {self.backend} needs a PyTorch module; graph {graph.name!r} is an ONNX file "
                "(use --backends onnxruntime,openvino)"
            )
        self.fn = fn
        inputs = input_buffers(graph.example_inputs)
        with torch.no_grad(), op_errors(self.backend, graph.name):
            first = fn(*inputs)
        super().__init__(graph, precision, inputs, output_buffers(first))

    def save(self, folder: Path) -> PreparedFiles:
        # A torchao plan is rebuilt from the source weights at load; its fp32 layers travel as options.
        return PreparedFiles(options=dict(self.options))

    def _run(self) -> None:
        with torch.no_grad():
            result = self.fn(*self.inputs)
        outs = result if isinstance(result, tuple | list) else (result,)
        for buf, out in zip(self.outputs, outs, strict=True):
            buf.copy_(out)

    def profile(self, iterations: int) -> list[tuple[str, float]]:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(iterations):
                self._run()
        rows = []
        for event in prof.key_averages():
            # Self time, so nested aten ops are not counted twice.
            rows.append((event.key, event.self_cpu_time_total / 1e3))
        return rows


class EagerBackend(BackendDefaults):
    name = "eager"
    precisions = ("fp32", "bf16", "int8-dynamic", "int8-weight")

    def graph_dtype(self, precision: str) -> torch.dtype:
        return torch.float32 if precision.startswith("int") else module_dtype(precision)

    def prepare(self, graph: Graph, precision: str, options: dict[str, Any]) -> Runner:
        if precision.startswith("int"):
            from hotloop.compile.backends.quantize import quantize_torchao

            with op_errors(self.name, graph.name):
                module = quantize_torchao(graph.module, precision, options)
            runner = TorchRunner(graph, precision, module)
            runner.options = {k: v for k, v in options.items() if k == "fp32_layers"}
            return runner
        return TorchRunner(graph, precision, graph.module)

    def load(self, graph: Graph, precision: str, folder: Path, files: PreparedFiles) -> Runner:
        return self.prepare(graph, precision, files.options)
