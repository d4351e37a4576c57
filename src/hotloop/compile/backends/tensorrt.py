"""`tensorrt`: a TensorRT engine built from the ONNX export, run on CUDA buffers (only where installed).

Imported only when chosen; on a machine without TensorRT or without a GPU the planner lists it as
unavailable with the reason and never imports it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from hotloop.compile.backends.base import BackendError, Graph, PreparedFiles, Runner, input_buffers, op_errors
from hotloop.compile.backends.defaults import BackendDefaults

ENGINE_FILE = "model.plan"


class TensorRtRunner(Runner):
    backend = "tensorrt"

    def __init__(self, graph: Graph, precision: str, plan: bytes) -> None:
        import tensorrt as trt

        self.plan = plan
        logger = trt.Logger(trt.Logger.WARNING)
        inputs = tuple(x.cuda() for x in input_buffers(graph.example_inputs))
        with op_errors(self.backend, graph.name):
            self.engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
            self.context = self.engine.create_execution_context()
            outputs = []
            for name in graph.output_names:
                shape = tuple(self.context.get_tensor_shape(name))
                dtype = {
                    trt.float32: torch.float32,
                    trt.bfloat16: torch.bfloat16,
                    trt.float16: torch.float16,
                }.get(self.engine.get_tensor_dtype(name), torch.float32)
                outputs.append(torch.empty(shape, dtype=dtype, device="cuda"))
            for name, x in zip(graph.input_names, inputs, strict=True):
                self.context.set_tensor_address(name, x.data_ptr())
            for name, y in zip(graph.output_names, outputs, strict=True):
                self.context.set_tensor_address(name, y.data_ptr())
        super().__init__(graph, precision, inputs, outputs)
        self.stream = torch.cuda.Stream()

    def _run(self) -> None:
        self.stream.wait_stream(torch.cuda.current_stream())
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise BackendError(f"tensorrt: execution of {self.name!r} failed")
        torch.cuda.current_stream().wait_stream(self.stream)

    def _rebind(self) -> None:
        for name, x in zip(self.input_names, self.inputs, strict=True):
            self.context.set_tensor_address(name, x.data_ptr())

    def save(self, folder: Path) -> PreparedFiles:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ENGINE_FILE).write_bytes(self.plan)
        return PreparedFiles(files=[ENGINE_FILE])


class TensorRtBackend(BackendDefaults):
    name = "tensorrt"
    precisions = ("fp32", "bf16")
    module = "tensorrt"
    install = "it needs an NVIDIA GPU; pip install tensorrt there"

    def unavailable_reason(self) -> str | None:
        missing = super().unavailable_reason()
        if missing is None and not torch.cuda.is_available():
            return "no CUDA GPU is visible"
        return missing

    def prepare(self, graph: Graph, precision: str, options: dict[str, Any]) -> Runner:
        import tensorrt as trt

        from hotloop.compile.export import export_onnx

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(graph.path) if graph.module is None else export_onnx(graph, Path(tmp) / "model.onnx")  # type: ignore[attr-defined]
            logger = trt.Logger(trt.Logger.WARNING)
            builder = trt.Builder(logger)
            network = builder.create_network(0)
            parser = trt.OnnxParser(network, logger)
            if not parser.parse(path.read_bytes()):
                errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
                raise BackendError(f"backend tensorrt cannot parse graph {graph.name!r}: {errors}")
            config = builder.create_builder_config()
            if precision == "bf16":
                config.set_flag(trt.BuilderFlag.BF16)
            with op_errors(self.name, graph.name):
                plan = builder.build_serialized_network(network, config)
            if plan is None:
                raise BackendError(
                    f"backend tensorrt could not build graph {graph.name!r} (see its log above)"
                )
        return TensorRtRunner(graph, precision, bytes(plan))

    def load(self, graph: Graph, precision: str, folder: Path, files: PreparedFiles) -> Runner:
        return TensorRtRunner(graph, precision, (folder / ENGINE_FILE).read_bytes())
