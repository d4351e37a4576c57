"""Every backend available here runs the pi05:tiny sub-engines with the fp32 outputs within its
precision's tolerance; unavailable ones are skipped with the backend's own reason."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hotloop.compile.backends import backend_names, get_backend
from hotloop.compile.backends.base import BackendError
from hotloop.compile.validate import compare_outputs
from hotloop.families.pi.engines import PiEngineShape, build_pi_subengines
from hotloop.families.pi.targets import build_model
from hotloop.models.configs import get_pi_config

# Minimum output cosine per precision (bf16 keeps ~3 significant digits).
COS = {"fp32": 0.99999, "bf16": 0.99}
FAST = [b for b in backend_names() if b != "inductor"]  # inductor compiles for minutes here: below
# TensorRT runs only on a GPU: its cases are the GPU test tier's (`pytest -m gpu`, benchmarks/gpu_check.sh).
FAST_PARAMS = [pytest.param(b, marks=pytest.mark.gpu) if b == "tensorrt" else b for b in FAST]


@pytest.fixture(scope="module")
def engines() -> dict[str, dict[torch.dtype, dict]]:
    torch.set_num_threads(1)
    cfg = get_pi_config("pi05:tiny")
    model = build_model(cfg, torch.float32, "cpu", 0)
    # Two flow-matching steps: the loop engine is unrolled once per step, and a loop of two checks the
    # same conversion as one of ten (OpenVINO took 15 s on the ten-step loop).
    shape = dataclasses.replace(PiEngineShape.of(cfg), num_steps=2)
    return {dtype: build_pi_subengines(model, shape, dtype) for dtype in (torch.float32, torch.bfloat16)}


def _check(backend_name: str, precision: str, sub: str, engines: dict) -> None:
    backend = get_backend(backend_name)
    reason = backend.unavailable_reason() or backend.precision_reason(precision)
    if precision not in backend.precisions:
        reason = f"{backend_name} has no {precision}"
    if reason:
        pytest.skip(reason)
    ref = engines[torch.float32][sub]
    graph = engines[backend.graph_dtype(precision)][sub]
    runner = backend.prepare(graph, precision, {})
    want = ref.module(*ref.example_inputs)
    want = want if isinstance(want, tuple) else (want,)
    got = runner(*ref.example_inputs)  # fp32 inputs are cast into the runner's own buffers
    assert runner.output_names == ref.output_names
    for agreement in compare_outputs(ref.output_names, want, got):
        assert agreement.cosine >= COS[precision], (backend_name, precision, sub, agreement)
    # The outputs are the runner's buffers: a second call writes the same tensors.
    again = runner(*ref.example_inputs)
    assert all(a is b for a, b in zip(again, got, strict=True))


@pytest.mark.parametrize("sub", ["vision", "prefix", "denoise_step", "denoise_loop"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("backend_name", FAST_PARAMS)
def test_backend_matches_eager_fp32(backend_name: str, precision: str, sub: str, engines: dict) -> None:
    _check(backend_name, precision, sub, engines)


@pytest.mark.slow
def test_inductor_matches_eager_fp32_on_vision(engines: dict) -> None:
    _check("inductor", "fp32", "vision", engines)


class _Eigh(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigh(x @ x.transpose(-1, -2)).eigenvalues


def test_unsupported_op_is_reported_by_name() -> None:
    from hotloop.compile.backends.base import OnnxGraph

    graph = OnnxGraph("eig", None, (torch.randn(2, 3, 3),), ("x",), ("y",))  # type: ignore[arg-type]
    graph.module = _Eigh()
    with pytest.raises(BackendError, match="onnx export.*'eig'.*aten::linalg_eigh"):
        get_backend("onnxruntime").prepare(graph, "fp32", {})


def test_eager_refuses_an_onnx_file() -> None:
    from hotloop.compile.backends.base import OnnxGraph

    graph = OnnxGraph("m", None, (torch.zeros(1),), ("x",), ("y",))  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="eager needs a PyTorch module"):
        get_backend("eager").prepare(graph, "fp32", {})


def test_unknown_backend_lists_the_known_ones() -> None:
    from hotloop.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="openvino"):
        get_backend("openvin")


def test_tensorrt_is_skipped_with_a_reason_without_a_gpu() -> None:
    backend = get_backend("tensorrt")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: tensorrt may be usable")
    assert backend.unavailable_reason()
