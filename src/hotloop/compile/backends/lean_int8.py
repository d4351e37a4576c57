"""Static int8 for an OpenVINO graph without a copy of its fp32 weights: the quantizer for graphs too large
for NNCF beside the planner's fp32 reference.

Why: NNCF's `quantize` holds 1.5-2.6x a graph's fp32 weights while it collects statistics and quantizes
(measured on four Gemma-2B layers, 1.64 GiB of fp32 weights: +2.5 GiB from the converted model, +4.3 GiB
from a saved IR), so pi05:full's prefix (7.4 GiB in fp32) could not be quantized next to the planner's
fp32 reference in 24 GiB, and its plan fell back to int8 weights with dynamic activations, which runs
at 0.5x eager bf16 on this kind of CPU. Static int8 ran that layer stack at 1.7-1.9x eager bf16.

Here the converted graph is quantized in place, from ranges measured in torch:
- activation ranges: the largest |x| at the input of every linear over the calibration inputs, the torch
  module run as is (one symmetric range per tensor, as NNCF's min-max on a transformer's matmuls);
- each linear's MatMul in the OpenVINO graph (`__module.NAME/aten::linear/MatMul`) then gets its input
  fake-quantized (a `FakeQuantize` node) and its weight replaced by int8 rows per output channel, symmetric
  over [-127, 127], dequantized in the graph (`Convert`, `Multiply`); the rows are made one linear at a
  time from the graph's fp32 constant, which the conversion shares with torch (a quarter of its bytes
  added). The CPU plugin's low-precision transformations run that pattern as an int8 matmul (AMX / VNNI),
  as they do NNCF's graphs. (Making the int8 weights in torch before conversion was tried first: the
  trace kept about twice the fp32 weights.)
The graph's float parts run in bf16 where the plugin has it (`float_precision`): with f32 float parts the
same graph ran 1.3x slower. Only linears are quantized (a vision tower's patch convolution stays float);
the protected layers and a mixed plan's fp32 layers are left alone, as by NNCF.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from hotloop.nn.fake_quant import PROTECTED

QUANTIZER = "quantizer"  # backend option: "nncf" (default) or LEAN
LEAN = "lean"
FLOAT_PRECISION = "float_precision"  # backend option: the plugin's precision for the graph's float parts
INT8_MAX = 127


def quantized_linears(module: nn.Module, fp32_layers: Sequence[str]) -> dict[str, nn.Linear]:
    """The linears of `module` (by name inside it) that are quantized: all but the protected ones and
    those named in `fp32_layers` (a name also covers the layers under it)."""
    kept = [re.compile(rf"^{re.escape(n)}(\.|$)") for n in fp32_layers]
    return {
        name: mod
        for name, mod in module.named_modules()
        if isinstance(mod, nn.Linear)
        and name.rsplit(".", 1)[-1] not in PROTECTED
        and not any(k.match(name) for k in kept)
    }


def input_ranges(
    module: nn.Module, linears: dict[str, nn.Linear], calibration: Sequence[Sequence[Tensor]]
) -> dict[str, float]:
    """The largest |input| of each linear over the calibration inputs (the module run as is, in torch)."""
    ranges = dict.fromkeys(linears, 0.0)

    def hook(name: str) -> Any:
        def record(_mod: nn.Module, args: tuple[Tensor, ...]) -> None:
            ranges[name] = max(ranges[name], float(args[0].detach().abs().max()))

        return record

    handles = [lin.register_forward_pre_hook(hook(name)) for name, lin in linears.items()]
    try:
        with torch.no_grad():
            for inputs in calibration:
                module(*inputs)
    finally:
        for h in handles:
            h.remove()
    return ranges


def _weight_constant(matmul: Any) -> Any:
    """The Constant a MatMul's weight input comes from (through a Convert of stored fp16), or None."""
    node = matmul.input_value(1).get_node()
    if node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return node if node.get_type_name() == "Constant" else None


def int8_rows(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 rows (symmetric over [-127, 127]) and their float32 scales (out, 1) of an (out, in) weight."""
    w = weight.astype(np.float32, copy=False)
    scale = np.maximum(np.abs(w).max(axis=1, keepdims=True) / INT8_MAX, np.finfo(np.float32).tiny)
    return np.clip(np.rint(w / scale), -INT8_MAX, INT8_MAX).astype(np.int8), scale.astype(np.float32)


def quantize_matmuls(model: Any, ranges: dict[str, float]) -> list[str]:
    """Rewrite, in place, the MatMul of every linear named in `ranges` (OpenVINO names a converted linear's
    MatMul `__module.NAME/aten::linear/MatMul`): its input fake-quantized per tensor, its weight int8 rows
    dequantized in the graph. Returns the names rewritten (a linear without such a MatMul is left float)."""
    import openvino as ov
    from openvino import opset13 as ops

    by_node = {f"__module.{name}/aten::linear/MatMul": name for name in ranges}
    done = []
    for node in model.get_ordered_ops():
        name = by_node.get(node.get_friendly_name())
        if name is None or node.get_type_name() != "MatMul" or not node.get_attributes().get("transpose_b"):
            continue
        const = _weight_constant(node)
        if const is None:
            continue
        rows, scale = int8_rows(const.get_data())
        weight = ops.multiply(ops.convert(ops.constant(rows), ov.Type.f32), ops.constant(scale))
        if node.get_output_element_type(0) != ov.Type.f32:
            weight = ops.convert(weight, node.get_output_element_type(0))
        bound = max(ranges[name], 1e-8)
        low = ops.constant(np.float32(-bound * (INT8_MAX + 1) / INT8_MAX))
        high = ops.constant(np.float32(bound))
        x = node.input_value(0)
        node.input(0).replace_source_output(ops.fake_quantize(x, low, high, low, high, 256).output(0))
        node.input(1).replace_source_output(weight.output(0))
        done.append(name)
    model.validate_nodes_and_infer_types()
    return done


def lean_static_int8(
    model: Any, module: nn.Module, calibration: Sequence[Sequence[Tensor]], fp32_layers: Sequence[str] = ()
) -> Any:
    """`model` (the OpenVINO conversion of `module`) with `module`'s linears in static int8, rewritten in
    place (see the module doc); `module` is only run, to calibrate. Its fp32 weights are read one linear
    at a time."""
    linears = quantized_linears(module, fp32_layers)
    quantize_matmuls(model, input_ranges(module, linears, calibration))
    return model
