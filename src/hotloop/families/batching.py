"""Observations batched, sliced and moved, for every family: an observation is a dataclass whose fields are
tensors with the batch first, tuples of them (one per camera), or None (an input the checkpoint lacks).

The family protocol's `stack`, `select` and `batch_size` (`hotloop.families.adapter.FamilyAdapter`) are
these; calibration sets, distillation batches and the recipe's checks are built with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

from hotloop.errors import ConfigError

Obs = TypeVar("Obs")


def _fields(obs: Any) -> dict[str, Any]:
    return {f.name: getattr(obs, f.name) for f in dataclasses.fields(obs)}


def stack(observations: list[Obs]) -> Obs:
    """Batch-1 observations (of one kind) -> one batch; an input any of them lacks is left out (None)."""
    if not observations:
        raise ConfigError("cannot batch an empty list of observations")
    first = observations[0]
    batched: dict[str, Any] = {}
    for name, value in _fields(first).items():
        parts = [getattr(o, name) for o in observations]
        if any(p is None for p in parts):
            batched[name] = None
        elif isinstance(value, tuple):
            batched[name] = tuple(torch.cat([p[i] for p in parts]) for i in range(len(value)))
        else:
            batched[name] = torch.cat(parts)
    return type(first)(**batched)


def select(obs: Obs, index: slice | list[int]) -> Obs:
    """Rows `index` of a batched observation."""
    return type(obs)(**{name: _each(value, lambda t: t[index]) for name, value in _fields(obs).items()})


def to_device(obs: Obs, device: torch.device | str) -> Obs:
    """`obs` with every tensor on `device`."""
    return type(obs)(**{name: _each(value, lambda t: t.to(device)) for name, value in _fields(obs).items()})


def batch_size(obs: Any) -> int:
    """How many observations `obs` holds: the first dimension of its first input."""
    for value in _fields(obs).values():
        for tensor in value if isinstance(value, tuple) else (value,):
            if tensor is not None:
                return int(tensor.shape[0])
    raise ConfigError(f"the {type(obs).__name__} holds no input")


def _each(value: Tensor | tuple[Tensor, ...] | None, apply: Callable[[Tensor], Tensor]) -> Any:
    """`apply` on a field's tensor, or on each of its tuple's; None stays None."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(apply(t) for t in value)
    return apply(value)
