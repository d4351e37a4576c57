"""What a served policy accepts and returns: key -> {shape, dtype}, and the check of each observation.

Keys of nested maps are joined with "/" ({"images": {"top": x}} is key "images/top"), the convention
openpi's own observation keys use. Shapes are fixed (everything right of the observation is
fixed-shape) except an axis marked -1, such as the rows of RTC guidance; a mismatch is an error here,
with a message naming the key, rather than deep inside a model.

Everything a policy could only fail on is checked here, so that a bad request is that client's error
reply and never an engine fault (which would switch a server with `--fallback` to its fallback engine):
values must lie in the range of the spec's dtype (a uint16 256 would wrap to a uint8 0, a float64 1e300
would become a float32 inf), floats must be finite, and the real-time chunking keys
(`hotloop.realtime.rtc`) must hold what the RTC samplers accept, within the bounds `guidance_problem` states
(a guidance clip of at most 1000, actions of at most 1e6 in size, a delay and rows of at most 1000). A value the client sent is echoed in a
message only clipped to `ECHO_CHARS` (a 1 MB key must not become a 1 MB reply and log line).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hotloop.policy_spec import ArraySpec

__all__ = ["ArraySpec", "ObservationError", "check_observation", "clip", "flatten", "spec_to_wire"]

ECHO_CHARS = 200  # the most of one client value a message repeats
LISTED_KEYS = 5  # unknown or missing keys named in one message; the rest are counted


class ObservationError(ValueError):
    """One observation does not match the served spec; the message is sent back to the client."""


Spec = Mapping[str, ArraySpec]


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """`text` cut to at most `limit` characters, saying how long it was: how a client's value is echoed."""
    if len(text) <= limit:
        return text
    suffix = f"... ({len(text):,} characters)"
    return text[: max(0, limit - len(suffix))] + suffix


def _show(value: Any) -> str:
    return clip(repr(value))


def _listed(keys: list[str]) -> str:
    shown = ", ".join(_show(k) for k in keys[:LISTED_KEYS])
    return shown if len(keys) <= LISTED_KEYS else f"{shown} and {len(keys) - LISTED_KEYS} more"


def flatten(obs: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obs.items():
        if not isinstance(key, str):
            raise ObservationError(f"observation key {_show(key)} is not a string")
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
    image is not) and whose values lie in the spec dtype's range; finite values only; RTC keys as the
    samplers take them (`_check_rtc`).
    """
    if not isinstance(obs, Mapping):
        raise ObservationError(f"an observation must be a map of key -> array, got {type(obs).__name__}")
    flat = flatten(obs)
    unknown = sorted(set(flat) - set(spec))
    missing = sorted(k for k in set(spec) - set(flat) if not spec[k].optional)
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"unknown key(s) {_listed(unknown)}")
        if missing:
            parts.append(f"missing key(s) {_listed(missing)}")
        raise ObservationError(f"{'; '.join(parts)}; this policy takes {', '.join(map(repr, spec))}")
    checked = {key: _check_value(key, flat[key], spec[key]) for key in spec if key in flat}
    _check_rtc(checked)
    return _rebuild(obs, checked)


def _check_value(key: str, value: Any, spec: ArraySpec) -> Any:
    name = _show(key)
    if spec.dtype == "str":
        if not isinstance(value, str):
            raise ObservationError(f"{name} is a {type(value).__name__}; send a string")
        return value
    expected = np.dtype(spec.dtype)
    if isinstance(value, np.ndarray | np.generic):
        arr = np.asarray(value)
    elif isinstance(value, list | tuple | int | float | bool) and not isinstance(value, str):
        try:
            arr = np.asarray(value)
        except (ValueError, OverflowError):
            raise ObservationError(
                f"{name} is a ragged list; send a numpy array of shape {spec.shape}"
            ) from None
    else:
        raise ObservationError(
            f"{name} is a {type(value).__name__}; send a numpy array of shape {spec.shape} and dtype {spec.dtype}"
        )
    if arr.dtype.kind not in "biuf" or not np.can_cast(arr.dtype, expected, casting="same_kind"):
        raise ObservationError(f"{name} has dtype {arr.dtype}; send {spec.dtype}")
    if not spec.matches(arr.shape):
        raise ObservationError(f"{name} has shape {arr.shape}; this policy takes {spec.shape}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ObservationError(f"{name} holds NaN or infinite values; send finite numbers")
    _check_range(name, arr, expected)
    with np.errstate(all="ignore"):  # checked above: nothing is left to overflow
        return arr.astype(expected, copy=False)


def _check_range(name: str, arr: np.ndarray, expected: np.dtype[Any]) -> None:
    """Refuse values the cast to `expected` would wrap (ints) or turn into inf (floats): a same-kind
    cast is not a safe one."""
    if arr.size == 0 or np.can_cast(arr.dtype, expected, casting="safe"):
        return
    if expected.kind == "f":
        top = float(np.finfo(expected).max)
        peak = max(abs(float(arr.min())), abs(float(arr.max())))  # finite here: checked before
        if peak > top:
            raise ObservationError(
                f"{name} holds {peak:g}, beyond the range of {expected} (±{top:g}); send values within it"
            )
        return
    info = np.iinfo(expected)
    low, high = arr.min(), arr.max()  # compared as Python ints: exact for every integer dtype
    if int(low) < info.min or int(high) > info.max:
        raise ObservationError(
            f"{name} holds values in [{low}, {high}], beyond the range of {expected} "
            f"[{info.min}, {info.max}]; send values within it"
        )


def _check_rtc(checked: Mapping[str, Any]) -> None:
    """The real-time chunking keys (`hotloop.realtime.rtc`), as the samplers take them: at least one row
    of previous actions, a delay of zero or more periods, a guidance clip of zero or more, a known
    mode. The spec already fixed their dtypes and the action width."""
    from hotloop.realtime.rtc import (
        DELAY_KEY,
        MAX_GUIDANCE_WEIGHT_KEY,
        MODE_KEY,
        MODES,
        PREV_ACTIONS_KEY,
        guidance_problem,
    )

    prev = checked.get(PREV_ACTIONS_KEY)
    delay = checked.get(DELAY_KEY)
    beta = checked.get(MAX_GUIDANCE_WEIGHT_KEY)
    problem = guidance_problem(
        None if prev is None else np.asarray(prev),
        None if delay is None else int(delay),
        None if beta is None else float(beta),
    )
    if problem is not None:
        raise ObservationError(problem)
    mode = checked.get(MODE_KEY)
    if mode is not None and mode not in MODES:
        raise ObservationError(f"{MODE_KEY!r} is {_show(mode)}; send one of {', '.join(MODES)}")
    from hotloop.errors import ConfigError
    from hotloop.realtime.draft import TOLERANCE_KEY, tolerance_of

    if TOLERANCE_KEY in checked:
        try:
            tolerance_of(dict(checked))
        except ConfigError as e:
            raise ObservationError(str(e).removeprefix("observation ")) from None


def _rebuild(obs: Mapping[str, Any], checked: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obs.items():
        name = f"{prefix}{key}"
        out[key] = _rebuild(value, checked, f"{name}/") if isinstance(value, Mapping) else checked[name]
    return out
