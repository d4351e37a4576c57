"""The allow-list unpickler: a client's pickle becomes plain data or is refused, never code.

LeRobot's own server calls `pickle.loads` on whatever arrives on its port, so any client can make it run
any command (a pickle may name any importable callable). Here `find_class`, the only door through which a
pickle reaches Python objects, opens to a fixed list: LeRobot's `RemotePolicyConfig` and
`TimedObservation` (resolved to hotloop's stand-ins, `standins`), and numpy's array, dtype and scalar
reconstruction in both the `numpy.core` and `numpy._core` spellings (resolved to checked builders,
`numpy_standins`). Plain containers, strings and numbers need no global. Everything else — `os.system`,
`builtins.eval`, torch's storage loaders, object arrays, any other class — is refused by name before it is
looked up, as are persistent ids and extension codes. Payloads are bounded by the caller (the chunk
assembler's limit) before they get here.
"""

from __future__ import annotations

import io
import pickle
from types import MappingProxyType
from typing import Any, TypeVar

from hotloop.serve.lerobot.numpy_standins import NUMPY_GLOBALS, Refused
from hotloop.serve.lerobot.standins import STANDIN_GLOBALS, RemotePolicyConfig, TimedObservation

__all__ = ["Refused", "load_policy_config", "load_timed_observation", "ALLOWED_GLOBALS"]

ALLOWED_GLOBALS = MappingProxyType({**STANDIN_GLOBALS, **NUMPY_GLOBALS})
NAME_CHARS = 120  # how much of a refused global's name a message repeats

T = TypeVar("T")


class _AllowListUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = ALLOWED_GLOBALS.get((module, name))
        if found is None:
            raise Refused(
                f"the pickle names {f'{module}.{name}'[:NAME_CHARS]!r}, which this server does not load "
                "(it accepts LeRobot's RemotePolicyConfig and TimedObservation holding numbers, text and "
                "numeric numpy arrays)"
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise Refused("the pickle uses persistent ids, which this server does not load")


def _load(payload: bytes, expected: type[T]) -> T:
    try:
        value = _AllowListUnpickler(io.BytesIO(payload)).load()
    except Refused:
        raise
    except RecursionError:
        raise Refused("the pickle nests too deeply") from None
    except Exception as exc:  # malformed bytes, a stand-in refused by type, a truncated stream
        raise Refused(
            f"the payload is not a readable pickle ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    if not isinstance(value, expected):
        raise Refused(f"expected a pickled {expected.__name__}, got {type(value).__name__}")
    return value


def load_policy_config(payload: bytes) -> RemotePolicyConfig:
    """`SendPolicyInstructions`' payload; `Refused` names what is not admitted."""
    return _load(payload, RemotePolicyConfig)


def load_timed_observation(payload: bytes) -> TimedObservation:
    """`SendObservations`' reassembled payload; `Refused` names what is not admitted."""
    return _load(payload, TimedObservation)
