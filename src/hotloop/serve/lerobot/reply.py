"""The reply the stock client loads: a pickled `list[TimedAction]`, each action a 1-D float32 CPU tensor.

The stock client calls `pickle.loads` on `GetActions`' bytes and expects LeRobot's own
`lerobot.async_inference.helpers.TimedAction` objects (it calls `get_action()`, `get_timestep()`,
`get_timestamp()`, `.to(device)` and `.item()` on the action). The server must write that without
importing LeRobot, and Python's pickler refuses to name a class it cannot import, so the stream is
written here opcode by opcode (protocol 3), as `pickle.dumps` of LeRobot's list builds it: NEWOBJ of
the class, then BUILD with its field dict.

Each action is torch's own tensor pickle, `torch._utils._rebuild_tensor_v2(storage, offset, (D,), (1,),
False, OrderedDict())`, all of them views of one storage holding the whole chunk, which torch pickles
once (`torch.storage._load_from_bytes`, its legacy `torch.save` bytes). LeRobot's server pickles the
whole chunk's storage once per action (50 `torch.save` calls for a 50-action chunk, about 8 ms here);
this is one. The embedded values are pickled by Python in fast mode (no memo opcodes), so the memo
entries written here are the only ones in the stream.
"""

from __future__ import annotations

import io
import pickle
import struct

import numpy as np

from hotloop.serve.lerobot.standins import LEROBOT_HELPERS

_PROTO = b"\x80\x03"
# Memo slots of the stream: the class, the tensor rebuild function, the storage, OrderedDict.
_CLASS, _REBUILD, _STORAGE, _ORDERED_DICT = 0, 1, 2, 3


def _value(obj: object) -> bytes:
    """`obj` pickled alone (protocol 3) without memo opcodes, header or STOP: an embeddable value."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=3)
    pickler.fast = True  # no memo: the embedded opcodes refer to nothing outside themselves
    pickler.dump(obj)
    raw = buffer.getvalue()
    if not (raw.startswith(_PROTO) and raw.endswith(pickle.STOP)):
        raise AssertionError("unexpected pickle framing")  # a Python that changed protocol 3's header
    return raw[len(_PROTO) : -1]


def _put(slot: int) -> bytes:
    return pickle.BINPUT + bytes([slot])


def _get(slot: int) -> bytes:
    return pickle.BINGET + bytes([slot])


def _global(module: str, name: str) -> bytes:
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


def _int(value: int) -> bytes:
    if 0 <= value < 256:
        return pickle.BININT1 + bytes([value])
    if -(2**31) <= value < 2**31:
        return pickle.BININT + struct.pack("<i", value)
    return _value(int(value))


_TIMESTAMP, _TIMESTEP, _ACTION = _value("timestamp"), _value("timestep"), _value("action")


def encode_actions(actions: np.ndarray, first_timestep: int, first_timestamp: float, dt: float) -> bytes:
    """The `Actions.data` bytes for a chunk `actions` (H, D): action i at timestep `first_timestep + i`
    and timestamp `first_timestamp + i * dt` (LeRobot's `_time_action_chunk`)."""
    import torch

    chunk = np.ascontiguousarray(actions, dtype=np.float32)
    if chunk.ndim != 2:
        raise ValueError(f"an action chunk is (horizon, action_dim); got shape {chunk.shape}")
    horizon, width = chunk.shape
    out = [_PROTO, pickle.EMPTY_LIST]
    if horizon:
        flat = torch.from_numpy(chunk.reshape(-1).copy())
        storage = torch.storage.TypedStorage(
            wrap_storage=flat.untyped_storage(), dtype=torch.float32, _internal=True
        )
        size, stride = _value((width,)), _value((1,))
        out += [pickle.MARK]
        for i in range(horizon):
            if i == 0:
                cls = _global(LEROBOT_HELPERS, "TimedAction") + _put(_CLASS)
                rebuild = _global("torch._utils", "_rebuild_tensor_v2") + _put(_REBUILD)
                stored = _value(storage) + _put(_STORAGE)
                hooks = _global("collections", "OrderedDict") + _put(_ORDERED_DICT)
            else:
                cls, rebuild, stored, hooks = (
                    _get(_CLASS),
                    _get(_REBUILD),
                    _get(_STORAGE),
                    _get(_ORDERED_DICT),
                )
            tensor = [
                rebuild,
                pickle.MARK,
                stored,
                _int(i * width),
                size,
                stride,
                pickle.NEWFALSE,
                hooks,
                pickle.EMPTY_TUPLE,
                pickle.REDUCE,
                pickle.TUPLE,
                pickle.REDUCE,
            ]
            out += [
                cls,
                pickle.EMPTY_TUPLE,
                pickle.NEWOBJ,
                pickle.EMPTY_DICT,
                pickle.MARK,
                _TIMESTAMP,
                pickle.BINFLOAT + struct.pack(">d", float(first_timestamp + i * dt)),
                _TIMESTEP,
                _int(first_timestep + i),
                _ACTION,
                *tensor,
                pickle.SETITEMS,
                pickle.BUILD,
            ]
        out += [pickle.APPENDS]
    out += [pickle.STOP]
    return b"".join(out)
