"""What a served policy accepts and returns: key -> {shape, dtype}, and the check of each observation.

Keys of nested maps are joined with "/" ({"images": {"top": x}} is key "images/top"), the convention
openpi's own observation keys use. Shapes are fixed (everything right of the observation is
fixed-shape) except an axis marked -1, such as the rows of RTC guidance; a mismatch is an error here,
with a message naming the key, rather than deep inside a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hotloop.policy_spec import ArraySpec

__all__ = ["ArraySpec", "ObservationError", "check_observation", "flatten", "spec_to_wire"]


class ObservationError(ValueError):
    """One observation does not match the served spec; the message is sent back to the client."""


Spec = Mapping[str, ArraySpec]


def flatten(obs: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obs.items():
        if not isinstance(key, str):
            raise ObservationError(f"observation key {key!r} is not a string")
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}/"))
        else:
            out[name] = value
    return out


def spec_to_wire(spec: Spec) -> dict[str, dict[str, Any]]:
    return {key: s.to_wire() for key, s in spec.items()}


def spec_of(arrays: Mapping[str, Any]) -> dict[str, ArraySpec]:
    """The spec of a (nested) dict of arrays, e.g. one action reply; non-array values are left out."""
    return {
        key: ArraySpec(tuple(v.shape), v.dtype.name)
        for key, v in flatten(arrays).items()
        if isinstance(v, np.ndarray)
    }


def zero_observation(spec: Spec) -> dict[str, Any]:
    """A nested observation of zeros holding the required entries of `spec` (the warm-up input)."""
    out: dict[str, Any] = {}
    for key, s in spec.items():
        if s.optional:
            continue
        node = out
        *parents, leaf = key.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = "" if s.dtype == "str" else np.zeros(s.shape, dtype=s.dtype)
    return out


def check_observation(obs: Any, spec: Spec) -> dict[str, Any]:
    """Return `obs` with every array cast to its spec dtype, or raise ObservationError naming the problem.

    Accepted: exactly the spec's keys; arrays (or nested lists of numbers) of exactly the spec's shape,
    whose dtype casts to the spec's within its kind (float64 state -> float32 is fine, float -> uint8
    image is not); finite values only.
    """
    if not isinstance(obs, Mapping):
        raise ObservationError(f"an observation must be a map of key -> array, got {type(obs).__name__}")
    flat = flatten(obs)
    unknown = sorted(set(flat) - set(spec))
    missing = sorted(k for k in set(spec) - set(flat) if not spec[k].optional)
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"unknown key(s) {', '.join(map(repr, unknown))}")
        if missing:
            parts.append(f"missing key(s) {', '.join(map(repr, missing))}")
        raise ObservationError(f"{'; '.join(parts)}; this policy takes {', '.join(map(repr, spec))}")
    checked = {key: _check_value(key, flat[key], spec[key]) for key in spec if key in flat}
    return _rebuild(obs, checked)


def _check_value(key: str, value: Any, spec: ArraySpec) -> Any:
    if spec.dtype == "str":
        if not isinstance(value, str):
            raise ObservationError(f"{key!r} is a {type(value).__name__}; send a string")
        return value
    expected = np.dtype(spec.dtype)
    if isinstance(value, np.ndarray | np.generic):
        arr = np.asarray(value)
    elif isinstance(value, list | tuple | int | float | bool) and not isinstance(value, str):
        try:
            arr = np.asarray(value)
        except ValueError:
            raise ObservationError(
                f"{key!r} is a ragged list; send a numpy array of shape {spec.shape}"
            ) from None
    else:
        raise ObservationError(
            f"{key!r} is a {type(value).__name__}; send a numpy array of shape {spec.shape} and dtype {spec.dtype}"
        )
    if arr.dtype.kind not in "biuf" or not np.can_cast(arr.dtype, expected, casting="same_kind"):
        raise ObservationError(f"{key!r} has dtype {arr.dtype}; send {spec.dtype}")
    if not spec.matches(arr.shape):
        raise ObservationError(f"{key!r} has shape {arr.shape}; this policy takes {spec.shape}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ObservationError(f"{key!r} holds NaN or infinite values; send finite numbers")
    return arr.astype(expected, copy=False)


def _rebuild(obs: Mapping[str, Any], checked: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obs.items():
        name = f"{prefix}{key}"
        out[key] = _rebuild(value, checked, f"{name}/") if isinstance(value, Mapping) else checked[name]
    return out
