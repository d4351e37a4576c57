"""Export a sub-engine to ONNX with fixed shapes (KV cache and masks are explicit tensors).

The TorchScript-based exporter is used because it needs nothing beyond torch (the dynamo exporter needs
onnxscript). Shapes are static: the engine never sees another shape, and static shapes let every
backend plan memory once.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from hotloop.compile.backends.base import Graph, op_errors

OPSET = 17


def export_onnx(graph: Graph, path: Path) -> Path:
    """Write `graph` (a torch module with fixed example inputs) to `path` as ONNX; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad(), op_errors("onnx export", graph.name):
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer warnings
        torch.onnx.export(
            graph.module,
            tuple(graph.example_inputs),
            str(path),
            input_names=list(graph.input_names),
            output_names=list(graph.output_names),
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    return path


def onnx_io(path: Path) -> tuple[list[tuple[str, list[int | str], str]], list[str]]:
    """([(input name, shape with symbolic dims as str, element type name)], [output names]) of a file.

    Raises ConfigError naming the file when it does not parse.
    """
    import onnx

    from hotloop.errors import ConfigError

    try:
        model = onnx.load(str(path), load_external_data=False)
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - onnx raises several types for a bad file
        raise ConfigError(f"{path} is not a valid ONNX model: {str(exc).splitlines()[0][:200]}") from None
    from hotloop.finite import check_finite_onnx

    check_finite_onnx(model, path)  # NaN / inf weights: every output would be NaN
    initializers = {i.name for i in model.graph.initializer}
    inputs = []
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        tt = vi.type.tensor_type
        dims: list[int | str] = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim
        ]
        inputs.append((vi.name, dims, onnx.TensorProto.DataType.Name(tt.elem_type).lower()))
    return inputs, [o.name for o in model.graph.output]
