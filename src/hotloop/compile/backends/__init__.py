"""Backends behind one protocol (`base.Backend`), chosen through one table; each imported only when used.

| name        | precisions | runs                                                               |
|-------------|------------|--------------------------------------------------------------------|
| eager       | fp32, bf16 | the PyTorch module as is (the reference); int8-dynamic, int8-weight|
|             |            | through torchao                                                    |
| inductor    | fp32, bf16 | torch.compile with freezing (mode default or max-autotune)         |
| onnxruntime | fp32       | the graph exported to ONNX; CPU EP, CUDA / TensorRT EPs when there;|
|             |            | int8 (static, calibrated), int8-dynamic (hotloop.compile.backends.quantize)|
| openvino    | fp32, bf16 | OpenVINO IR; bf16 through INFERENCE_PRECISION_HINT, f32 pinned;    |
|             |            | int8, int8-dynamic, int4-weight through NNCF                       |
| tensorrt    | fp32, bf16 | TensorRT engine from the ONNX export (only where installed + GPU)  |
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from hotloop.errors import ConfigError
from hotloop.registry import Registry

if TYPE_CHECKING:
    from hotloop.compile.backends.base import Backend

_TABLE: tuple[tuple[str, str], ...] = (
    ("eager", "hotloop.compile.backends.eager:EagerBackend"),
    ("inductor", "hotloop.compile.backends.inductor:InductorBackend"),
    ("onnxruntime", "hotloop.compile.backends.onnxruntime:OnnxRuntimeBackend"),
    ("openvino", "hotloop.compile.backends.openvino:OpenVinoBackend"),
    ("tensorrt", "hotloop.compile.backends.tensorrt:TensorRtBackend"),
)
PRECISION_NAMES = ("fp32", "bf16", "int8", "int8-dynamic", "int8-weight", "int4-weight")
# Backends whose loaded runners run from the artifact's files alone, never the torch module (eager runs
# the module; inductor recompiles it at load).
FILE_BACKENDS = ("onnxruntime", "openvino", "tensorrt")


def backend_names() -> list[str]:
    return [name for name, _ in _TABLE]


def _registry() -> Registry[str]:
    return Registry.of("backend", _TABLE)


def get_backend(name: str) -> Backend:
    """The backend called `name` (unknown names list the known ones); its module is imported here."""
    path = _registry().get(name)
    module, attr = path.split(":")
    return importlib.import_module(module).__dict__[attr]()  # type: ignore[no-any-return]


def check_backend_names(names: list[str], flag: str = "--backends") -> list[str]:
    registry = _registry()
    for name in names:
        if name not in registry:
            raise ConfigError(f"{flag}: {registry.unknown_message(name)}")
    return names


def check_precision_names(names: list[str], flag: str = "--precisions") -> list[str]:
    for name in names:
        if name not in PRECISION_NAMES:
            raise ConfigError(f"{flag}: unknown precision {name!r}; use one of {', '.join(PRECISION_NAMES)}")
    return names
