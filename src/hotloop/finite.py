"""Non-finite values (NaN, +-inf): refused in weights at load, stopped in outputs before they are used.

A checkpoint whose training diverged, or a file damaged in a conversion, holds NaN or inf weights; every
action computed from them is NaN, which a robot must never get and which no latency or success figure
can describe. So:

- weights: every loader (the families' checkpoint folders, an artifact's weight file, an ONNX file's
  initializers, normaliser statistics, the learned detector) calls `check_finite_weights` on what it read
  and refuses the file in one `CheckpointError` naming the file and the first bad tensor;
- outputs: `non_finite_output` finds the first non-finite entry of a policy's or engine's output (a
  tensor, an array, or a dict / tuple of them); `hotloop eval` and `hotloop bench` stop on it with a
  `NonFiniteOutputError` (one line, exit 2), and a server answers from its fallback instead
  (`hotloop.serve.guard`).

Tensors are scanned in slices of `SLICE` elements, so checking a 2 GB embedding table needs no 2 GB mask.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import CheckpointError, NonFiniteOutputError

SLICE = 1 << 22  # elements scanned at a time: a bounded temporary mask (4 MiB) whatever the tensor


def _as_flat(value: Any) -> Any:
    """A flat view of a tensor or array (no copy for contiguous ones)."""
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().reshape(-1)
    return np.asarray(value).reshape(-1)


def _is_float(value: Any) -> bool:
    if hasattr(value, "is_floating_point"):
        return bool(value.is_floating_point())
    return np.asarray(value).dtype.kind in "fc"


def _slice_ok(flat: Any) -> bool:
    if hasattr(flat, "detach"):
        import torch

        return bool(torch.isfinite(flat).all())
    return bool(np.isfinite(flat).all())


def count_non_finite(value: Any) -> int:
    """How many entries of a float tensor / array are NaN or inf (0 for integer ones)."""
    if not _is_float(value):
        return 0
    flat = _as_flat(value)
    bad = 0
    for start in range(0, int(flat.shape[0]), SLICE):
        part = flat[start : start + SLICE]
        if not _slice_ok(part):
            if hasattr(part, "detach"):
                import torch

                bad += int((~torch.isfinite(part)).sum())
            else:
                bad += int((~np.isfinite(part)).sum())
    return bad


def is_finite(value: Any) -> bool:
    """True when a tensor / array holds no NaN or inf (integer ones always do)."""
    if not _is_float(value):
        return True
    flat = _as_flat(value)
    return all(_slice_ok(flat[s : s + SLICE]) for s in range(0, int(flat.shape[0]), SLICE))


def check_finite_weights(tensors: Iterable[tuple[str, Any]], file: str | Path) -> None:
    """Refuse the weights read from `file` if any (name, tensor) holds NaN or inf, naming the first one."""
    for name, tensor in tensors:
        if not is_finite(tensor):
            bad = count_non_finite(tensor)
            size = int(_as_flat(tensor).shape[0])
            raise CheckpointError(
                f"{file}: tensor {name!r} holds {bad} non-finite value(s) (NaN or inf) of {size}; the weights "
                "are damaged (a diverged training run or a bad conversion): retrain, or restore a good copy"
            )


def assign_finite(model: Any, state: dict[str, Any], file: str | Path, prefix: str = "") -> Any:
    """`model` (built on meta) with `state` assigned strictly, once no tensor of it is non-finite
    (`check_finite_weights`; `prefix` + name is each tensor's key in `file`), in eval mode."""
    check_finite_weights(((prefix + k, v) for k, v in state.items()), file)
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def check_finite_onnx(model: Any, file: str | Path) -> None:
    """Refuse an ONNX model (an `onnx.ModelProto`) whose float initializers hold NaN or inf."""
    from onnx import numpy_helper

    def initializers() -> Iterable[tuple[str, Any]]:
        for init in model.graph.initializer:
            if init.data_location == 1:  # EXTERNAL: its data is not in this file (not loaded here)
                continue
            yield init.name, numpy_helper.to_array(init)

    check_finite_weights(initializers(), file)


def non_finite_output(value: Any, name: str = "output") -> str | None:
    """Where the first NaN or inf of an output is ("actions: 80 of 80 values"), or None when it has
    none. Walks dicts, lists and tuples; non-numeric leaves (strings, flags) are not looked at."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            found = non_finite_output(item, str(key))
            if found is not None:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = non_finite_output(item, f"{name}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{name}: {value}"
    array = hasattr(value, "detach") or isinstance(value, (np.ndarray, np.generic))
    if array and not is_finite(value):
        return f"{name}: {count_non_finite(value)} of {int(_as_flat(value).shape[0])} values"
    return None


__all__ = [
    "NonFiniteOutputError",
    "check_finite_onnx",
    "check_finite_weights",
    "count_non_finite",
    "is_finite",
    "non_finite_output",
]
