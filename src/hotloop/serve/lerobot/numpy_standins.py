"""What the allow-list unpickler gives numpy's pickle opcodes: checked stand-ins, never numpy's own hooks.

A pickled numpy array is `_reconstruct(ndarray, (0,), b"b")` followed by BUILD with
`(version, shape, dtype, is_fortran, raw bytes)`; a dtype is `dtype("f4", False, True)` + BUILD with its
byte order; a numpy scalar is `scalar(dtype, raw bytes)`; protocol 5 writes an array as
`_frombuffer(buffer, dtype, shape, order)`. numpy 1 names these under `numpy.core`, numpy 2 under
`numpy._core`. Here each is a small function or class that accepts only plain numeric dtypes (bool, ints,
floats) with no fields, sub-arrays or objects, checks that the bytes match the shape, and builds the array
with `np.frombuffer`: numpy's own `__setstate__`/`__reduce__` code never sees a client's arguments.
Anything else raises `Refused`.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

import numpy as np

# numpy's dtype pickle names for the plain numeric types (bool, signed, unsigned, float).
NUMERIC_CODES = frozenset(["b1", "?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"])
BYTE_ORDERS = frozenset("<>|=")
MAX_DIMS = 8


class Refused(ValueError):
    """The payload holds something the allow-list does not admit; the text names it."""


class Sealed:
    """A stand-in whose state a pickle cannot set (BUILD on it is refused)."""

    def __setstate__(self, state: Any) -> None:
        raise Refused(f"a pickled state for {type(self).__name__}")


class DtypeStandIn:
    """`numpy.dtype(code, align, copy)`: a plain numeric dtype; BUILD may set its byte order."""

    dtype: np.dtype[Any] | None = None  # None: made by NEWOBJ without its code, unusable

    def __init__(self, code: Any, align: Any = False, copy: Any = True) -> None:
        if not isinstance(code, str) or code not in NUMERIC_CODES:
            raise Refused(
                f"numpy dtype {str(code)[:40]!r}: only bool, int, uint and float arrays are accepted"
            )
        self.dtype = np.dtype(code)

    def __setstate__(self, state: Any) -> None:
        # (version, byteorder, subarray, names, fields, elsize, alignment, flags) for a plain dtype.
        if not isinstance(state, tuple) or len(state) < 5:
            raise Refused("a numpy dtype with an unexpected pickled state")
        order, subarray, names, fields = state[1], state[2], state[3], state[4]
        if subarray is not None or names is not None or fields is not None:
            raise Refused("a structured or sub-array numpy dtype: only plain numeric arrays are accepted")
        if not isinstance(order, str) or order not in BYTE_ORDERS:
            raise Refused(f"a numpy dtype with byte order {str(order)[:10]!r}")
        if self.dtype is None:
            raise Refused("a numpy dtype without its type code")
        if order == "<":
            self.dtype = self.dtype.newbyteorder("<")
        elif order == ">":
            self.dtype = self.dtype.newbyteorder(">")


class ArrayTypeMarker(Sealed):
    """What `numpy.ndarray` resolves to: only usable as `_reconstruct`'s first argument."""


def _dtype_of(value: Any) -> np.dtype[Any]:
    dtype = value.dtype if isinstance(value, DtypeStandIn) else None
    if dtype is None:
        raise Refused("a numpy array whose dtype is not a plain numeric dtype")
    return dtype


def _shape_of(value: Any) -> tuple[int, ...]:
    if not isinstance(value, tuple) or len(value) > MAX_DIMS:
        raise Refused(f"a numpy array shape must be a tuple of at most {MAX_DIMS} sizes")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value):
        raise Refused("a numpy array shape holds something other than sizes >= 0")
    return value


def _from_bytes(data: Any, dtype: np.dtype[Any], shape: tuple[int, ...], fortran: bool) -> np.ndarray:
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise Refused("a numpy array whose data is not raw bytes (an object array?)")
    count = math.prod(shape)
    if count * dtype.itemsize != len(data):
        raise Refused(f"a numpy array of shape {shape} and dtype {dtype} with {len(data)} bytes of data")
    flat = np.frombuffer(data, dtype=dtype, count=count)
    return flat.reshape(shape, order="F" if fortran else "C")


class ArrayStandIn:
    """`_reconstruct(ndarray, (0,), b"b")`; BUILD gives it its data. `array` holds the result. (An
    array is never handed to the pickle itself: BUILD on it would reach numpy's own __setstate__.)"""

    array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) != 5:
            raise Refused("a numpy array with an unexpected pickled state")
        _version, shape, dtype, fortran, data = state
        if not isinstance(fortran, bool):
            raise Refused("a numpy array with an unexpected pickled state")
        self.array = _from_bytes(data, _dtype_of(dtype), _shape_of(shape), fortran)


def reconstruct(subtype: Any, shape: Any = (0,), code: Any = b"b") -> ArrayStandIn:
    if subtype is not ArrayTypeMarker:
        raise Refused("numpy's _reconstruct is accepted for plain numpy.ndarray only")
    return ArrayStandIn()


class ScalarStandIn(Sealed):
    """`scalar(dtype, raw bytes)`: a numpy scalar, held until `finished` unwraps it."""

    def __init__(self, value: Any) -> None:
        self.value = value


def scalar(dtype: Any, data: Any = b"") -> ScalarStandIn:
    return ScalarStandIn(_from_bytes(data, _dtype_of(dtype), (), False)[()])


def frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any = "C") -> ArrayStandIn:
    if order not in ("C", "F"):
        raise Refused(f"a numpy array with order {str(order)[:10]!r}")
    out = ArrayStandIn()
    out.array = _from_bytes(buffer, _dtype_of(dtype), _shape_of(shape), order == "F")
    return out


def finished(value: Any) -> Any:
    """The array or scalar behind a stand-in (one that never got its data is refused); other values
    as they are."""
    if isinstance(value, ArrayStandIn):
        if value.array is None:
            raise Refused("a numpy array without its data")
        return value.array
    if isinstance(value, ScalarStandIn):
        if not hasattr(value, "value"):
            raise Refused("a numpy scalar without its data")
        return value.value
    return value


def _numpy_globals() -> dict[tuple[str, str], Any]:
    out: dict[tuple[str, str], Any] = {
        ("numpy", "dtype"): DtypeStandIn,
        ("numpy", "ndarray"): ArrayTypeMarker,
    }
    for core in ("numpy.core", "numpy._core"):  # numpy 1 and numpy 2 spellings
        out[(f"{core}.multiarray", "_reconstruct")] = reconstruct
        out[(f"{core}.multiarray", "scalar")] = scalar
        out[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return out


NUMPY_GLOBALS = MappingProxyType(_numpy_globals())
