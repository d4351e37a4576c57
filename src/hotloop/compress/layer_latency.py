"""Measured latency gain of quantizing one linear layer at its real input shape (ONNX Runtime kernels).

A layer's gain is what the int8 kernel saves over fp32 on this machine, per inference: one MatMul of
(M, K) x (K, N) timed as float32 and as the quantized kernel the mode runs (dynamic int8 MatMulInteger
for the int8 modes, 4-bit MatMulNBits for int4-weight), times the calls per inference (a denoise layer
runs once per step). Small layers often gain nothing or lose (quantizing the input costs more than the
smaller matmul saves): the mixed-precision search keeps those in fp32 first.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

_CACHE: dict[tuple[int, int, int, str, int], float] = {}


def _matmul_model(k: int, n: int, path: Path, seed: int) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = (np.random.default_rng(seed).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _time(path: Path, x: np.ndarray, iterations: int, threads: int) -> float:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, {"x": x})
    best = float("inf")
    for _ in range(3):  # the best of three means: the least disturbed by other work on the machine
        t0 = time.perf_counter_ns()
        for _ in range(iterations):
            sess.run(None, {"x": x})
        best = min(best, (time.perf_counter_ns() - t0) / 1e6 / iterations)
    return best


def matmul_gain_ms(m: int, k: int, n: int, mode: str, threads: int = 1, iterations: int = 20) -> float | None:
    """fp32 time minus quantized time (ms) of one (m, k) x (k, n) product, cached per shape; None when
    this ONNX Runtime has no kernel to measure the mode with (4-bit needs the `onnx_ir` package)."""
    if mode == "int4-weight":
        try:
            import onnx_ir  # noqa: F401
        except ImportError:
            return None
    key = (m, k, n, mode, threads)
    if key in _CACHE:
        return _CACHE[key]
    with tempfile.TemporaryDirectory(prefix="hotloop-layer-") as tmp:
        fp32, quant = Path(tmp) / "fp32.onnx", Path(tmp) / "q.onnx"
        _matmul_model(k, n, fp32, seed=m * 31 + k)
        if mode == "int4-weight":
            import onnx
            from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

            quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), block_size=32, is_symmetric=True)
            quantizer.process()
            quantizer.model.save_model_to_file(str(quant))
        else:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            from hotloop.compile.backends.quantize import quiet_ort_quantization

            with quiet_ort_quantization():
                quantize_dynamic(str(fp32), str(quant), weight_type=QuantType.QInt8, per_channel=True)
        x = np.random.default_rng(0).standard_normal((m, k)).astype(np.float32)
        gain = _time(fp32, x, iterations, threads) - _time(quant, x, iterations, threads)
    _CACHE[key] = gain
    return gain
