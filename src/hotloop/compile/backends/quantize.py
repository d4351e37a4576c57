"""Post-training quantization of one sub-engine graph on real libraries, as backend precisions.

| precision    | openvino (NNCF)                                  | onnxruntime                     | eager (torchao)          |
|--------------|--------------------------------------------------|---------------------------------|--------------------------|
| int8         | nncf.quantize: int8 weights per channel, static  | quantize_static, QDQ, weights   |                          |
|              | activation ranges from the calibration set (or,  | per channel, calibration reader |                          |
|              | where NNCF's copy would not fit, `lean_int8`)    |                                 |                          |
| int8-dynamic | nncf.compress_weights INT8_SYM + the CPU plugin's| quantize_dynamic (MatMulInteger)| Int8DynamicActivation-   |
|              | dynamic activation quantization                  |                                 | Int8Weight               |
| int8-weight  |                                                  |                                 | Int8WeightOnly           |
| int4-weight  | nncf.compress_weights INT4_SYM, groups of 32     |                                 |                          |

Layers named in `fp32_layers` (the mixed-precision plan, names inside the sub-engine module) and the
protected ones (`fake_quant.PROTECTED`: action projections, time MLPs) stay float32; the integrator
and the time conditioning are outside these graphs (float32 tables, float32 Euler update) or, in the
unrolled loop, element-wise ops no quantizer touches.

Options a quantizing backend reads: `calibration` (a list of input tuples for the graph; runtime only,
never saved) and `fp32_layers` (saved in the manifest).
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from hotloop.log_levels import errors_only
from hotloop.nn.fake_quant import PROTECTED

QUANT_PRECISIONS = ("int8", "int8-dynamic", "int8-weight", "int4-weight")
STATIC = ("int8",)  # precisions that need calibration data
CALIBRATION = "calibration"
FP32_LAYERS = "fp32_layers"
INT4_GROUP = 32


def kept_fp32(options: dict[str, Any]) -> list[str]:
    """Layer names (inside the graph's module) that stay fp32: the plan's and the protected ones."""
    return [str(n) for n in options.get(FP32_LAYERS, [])]


def _protected(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in PROTECTED


def calibration_inputs(options: dict[str, Any], graph_name: str, backend: str) -> list[tuple[Tensor, ...]]:
    from hotloop.compile.backends.base import BackendError

    data = options.get(CALIBRATION)
    if not data:
        raise BackendError(
            f"backend {backend}: static int8 of graph {graph_name!r} needs calibration data; "
            "pass --calibration DIR (recorded episodes) or use int8-dynamic"
        )
    return list(data)


# ---- OpenVINO + NNCF ---------------------------------------------------------------------------------


def _ov_ignored(model: Any, fp32_layers: Sequence[str]) -> Any:
    """NNCF IgnoredScope naming the MatMuls of the fp32 layers (OpenVINO names them `__module.NAME/...`)."""
    import nncf

    names = [f"__module.{n}/" for n in fp32_layers]
    patterns = [rf".*__module\.(.*\.)?({'|'.join(PROTECTED)})/.*"]
    patterns += [rf".*{re.escape(n)}.*" for n in names]
    return nncf.IgnoredScope(patterns=patterns, validate=False)


def quantize_openvino(model: Any, precision: str, options: dict[str, Any], graph_name: str) -> Any:
    """The OpenVINO model quantized by NNCF for `precision` (a new model; `model` may be changed)."""
    import nncf

    ignored = _ov_ignored(model, kept_fp32(options))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if precision == "int8":
            data = calibration_inputs(options, graph_name, "openvino")
            dataset = nncf.Dataset([tuple(x.numpy() for x in inputs) for inputs in data])
            from nncf.quantization.advanced_parameters import (
                AdvancedQuantizationParameters,
                AdvancedSmoothQuantParameters,
            )

            return nncf.quantize(
                model,
                dataset,
                model_type=nncf.ModelType.TRANSFORMER,
                subset_size=len(data),
                ignored_scope=ignored,
                # SmoothQuant rescales weights by activation statistics; off, so a plan's weights
                # are the model's own weights quantized (and the run stays fast).
                advanced_parameters=AdvancedQuantizationParameters(
                    smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1)
                ),
            )
        if precision == "int8-dynamic":
            return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_SYM, ignored_scope=ignored)
        if precision == "int4-weight":
            return nncf.compress_weights(
                model,
                mode=nncf.CompressWeightsMode.INT4_SYM,
                group_size=INT4_GROUP,
                ratio=1.0,
                all_layers=True,
                ignored_scope=ignored,
            )
    raise ValueError(f"openvino has no precision {precision!r}")


# ---- ONNX Runtime ------------------------------------------------------------------------------------


def _onnx_excluded(path: Path, fp32_layers: Sequence[str]) -> list[str]:
    """Node names of the MatMul/Gemm nodes of fp32 layers. The exporter names a node by its module
    path (`/blocks.1/down_proj/MatMul`), so a layer matches when the node's scope ends with its parts."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    layers = [n.split(".") for n in fp32_layers]
    out = []
    for node in model.graph.node:
        if node.op_type not in ("MatMul", "Gemm"):
            continue
        scope = re.split(r"[/.]", node.name.strip("/"))[:-1]
        if (scope and _protected(scope[-1])) or any(scope[-len(p) :] == p for p in layers if p):
            out.append(node.name)
    return out


class CalibrationRows:
    """ONNX Runtime's CalibrationDataReader over prepared feeds: one {input name: array} dict per row."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.i = 0

    def get_next(self) -> dict[str, Any] | None:
        if self.i >= len(self.rows):
            return None
        self.i += 1
        return self.rows[self.i - 1]

    def rewind(self) -> None:
        self.i = 0


def quantize_onnx(
    src: Path, dst: Path, precision: str, options: dict[str, Any], input_names: Sequence[str], graph_name: str
) -> Path:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    from hotloop.compile.cpu_features import cpu_flags

    exclude = _onnx_excluded(src, kept_fp32(options))
    # Without VNNI, u8 x s8 products can saturate in the AVX2 kernels; a 7-bit weight range avoids it.
    reduce_range = not ({"avx512_vnni", "avx_vnni"} & cpu_flags())
    with quiet_ort_quantization(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if precision == "int8":
            data = calibration_inputs(options, graph_name, "onnxruntime")
            quantize_static(
                str(src),
                str(dst),
                CalibrationRows(  # captured sub-engine inputs
                    [
                        {n: x.detach().cpu().numpy() for n, x in zip(input_names, row, strict=True)}
                        for row in data
                    ]
                ),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                reduce_range=reduce_range,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                op_types_to_quantize=["MatMul", "Gemm"],
                nodes_to_exclude=exclude,
            )
        elif precision == "int8-dynamic":
            quantize_dynamic(
                str(src),
                str(dst),
                per_channel=True,
                reduce_range=reduce_range,
                weight_type=QuantType.QInt8,
                op_types_to_quantize=["MatMul", "Gemm"],
                nodes_to_exclude=exclude,
            )
        else:
            raise ValueError(f"onnxruntime has no precision {precision!r}")
    return dst


# ---- torchao (eager) ---------------------------------------------------------------------------------


def quantize_torchao(module: nn.Module, precision: str, options: dict[str, Any]) -> nn.Module:
    """A copy of `module` with its linears quantized by torchao (the graph's module is shared, so never
    quantized in place)."""
    import copy

    from torchao.quantization import (
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
        quantize_,
    )

    configs = {"int8-dynamic": Int8DynamicActivationInt8WeightConfig, "int8-weight": Int8WeightOnlyConfig}
    if precision not in configs:
        raise ValueError(f"eager (torchao) has no precision {precision!r}")
    keep = set(kept_fp32(options))
    out = copy.deepcopy(module)

    def wanted(mod: nn.Module, fqn: str) -> bool:
        return isinstance(mod, nn.Linear) and fqn not in keep and not _protected(fqn)

    quantize_(out, configs[precision](), filter_fn=wanted)
    return out


def quiet_ort_quantization() -> contextlib.AbstractContextManager[None]:
    """ONNX Runtime's quantizer logs a pre-processing hint on the root logger for every model."""
    return errors_only()
