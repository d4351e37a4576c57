"""Checks every family's engine runs on what a caller hands it: tensors, kinds, finiteness, named."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from hotloop.errors import ConfigError


def to_tensor(name: str, value: Any) -> Tensor:
    """A tensor from a tensor or a numpy array; anything else is named."""
    if isinstance(value, Tensor):
        return value
    try:
        return torch.from_numpy(np.ascontiguousarray(value))
    except (TypeError, ValueError):
        raise ConfigError(
            f"input {name!r} is a {type(value).__name__}; pass a tensor or a numpy array"
        ) from None


def check_kind(name: str, t: Tensor, kind: str) -> None:
    """`kind`: "float", "bool" or "int" (int64 / int32)."""
    ok = {
        "float": t.is_floating_point(),
        "bool": t.dtype == torch.bool,
        "int": t.dtype in (torch.int64, torch.int32),
    }[kind]
    if not ok:
        raise ConfigError(f"input {name!r} has dtype {t.dtype}; this engine takes {kind}")


def check_finite(name: str, t: Tensor) -> None:
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise ConfigError(f"input {name!r} contains NaN or Inf")


def check_fields(obs: Any, fields: tuple[str, ...], kind: type, what: str) -> dict[str, Any]:
    """{field: value} of a typed observation (dataclass `kind`) or a dict of those fields; unknown keys and
    other types are named."""
    if isinstance(obs, kind):
        return {f: getattr(obs, f) for f in fields}
    if isinstance(obs, dict):
        unknown = sorted(set(obs) - set(fields))
        if unknown:
            raise ConfigError(f"unknown input(s) {', '.join(unknown)}; this engine takes {', '.join(fields)}")
        return {f: obs.get(f) for f in fields}
    raise ConfigError(f"observation must be a {what} or a dict of {', '.join(fields)}")
