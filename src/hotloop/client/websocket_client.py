"""`PolicyClient`: a policy that lives on a `hotloop serve` (or an openpi) server.

Same wire protocol as openpi-client's `WebsocketClientPolicy`: on connect the server sends its metadata;
then each observation (a msgpack-numpy map) gets exactly one reply, an action map or, for a rejected
observation, a text frame holding the error. Unlike openpi's client it waits with bounded timeouts,
raises a typed `ServerError` for a rejected observation (the connection stays usable), and after a lost
connection or a late reply reconnects on the next call, so a robot loop survives a server restart.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import numpy as np
from websockets.sync.client import ClientConnection, connect

from hotloop.client import codec


class ServerError(RuntimeError):
    """The server rejected one observation (bad key, shape, dtype, NaN, size); the connection is still open."""


class PolicyClient:
    """`infer(obs) -> {"actions": ..., "server_timing": ...}` over a websocket; `reset()` is local."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
        reply_timeout_s: float = 30.0,
    ) -> None:
        self.uri = host if host.startswith("ws") else f"ws://{host}"
        if port is not None:
            self.uri += f":{port}"
        self.reply_timeout_s = reply_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        self._packer = codec.Packer()
        self._ws: ClientConnection | None = None
        self.metadata: dict[str, Any] = {}
        self.last_round_trip_s = float("nan")
        self._connect()

    def _connect(self) -> ClientConnection:
        # websockets 17 asks a directly held connection to say so; older versions have no such flag.
        legacy: dict[str, Any] = {"legacy": True} if "legacy" in inspect.signature(connect).parameters else {}
        # max_size=None: the server bounds what it sends; a chunk of actions is small.
        ws = connect(
            self.uri,
            compression=None,
            max_size=None,
            additional_headers=self._headers,
            open_timeout=self.connect_timeout_s,
            **legacy,
        )
        try:
            self.metadata = codec.unpackb(ws.recv(timeout=self.connect_timeout_s))
        except BaseException:
            ws.close()
            raise
        self._ws = ws
        return ws

    def _drop(self) -> None:
        """Forget a connection in an unknown state: a late reply must never answer the next observation."""
        if self._ws is not None:
            self._ws.close()
            self._ws = None

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        """One observation -> one reply. A lost connection or a late reply raises and the next call
        reconnects (to a restarted server, too); a rejected observation raises `ServerError`."""
        from websockets.exceptions import ConnectionClosed

        payload = self._packer.pack(obs)  # a bad type fails here, before anything is sent
        ws = self._ws if self._ws is not None else self._connect()
        limit = self.metadata.get("max_message_bytes")
        if isinstance(limit, int) and len(payload) > limit:
            # The server would close the connection on it (code 1009, before reading it): say so here.
            raise ServerError(
                f"error: the observation is {len(payload)} bytes, over the server's limit of {limit} "
                "(--max-message-mb); not sent: send smaller images"
            )
        start = time.perf_counter()
        try:
            ws.send(payload)
            reply = ws.recv(timeout=self.reply_timeout_s)
        except TimeoutError:
            self._drop()
            raise TimeoutError(
                f"no reply from {self.uri} within {self.reply_timeout_s} s; the next call reconnects"
            ) from None
        except ConnectionClosed as exc:
            self._drop()
            raise ConnectionError(
                f"connection to {self.uri} lost ({exc}); the next call reconnects"
            ) from None
        self.last_round_trip_s = time.perf_counter() - start
        if isinstance(reply, str):
            raise ServerError(reply)
        out: dict[str, Any] = codec.unpackb(reply)
        return out

    def reset(self) -> None:
        """Episode state lives with the caller; the server's policy is shared by every client."""

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def observation_spec(self) -> dict[str, dict[str, Any]]:
        return dict(self.metadata.get("observation_spec", {}))

    @property
    def action_spec(self) -> dict[str, dict[str, Any]]:
        return dict(self.metadata.get("action_spec", {}))

    @property
    def strategy_defaults(self) -> dict[str, Any]:
        """How the served policy is meant to be executed, e.g. {"ensemble_coeff": 0.01} (a hotloop
        server's metadata; {} from others): `hotloop.realtime.strategies.policy_strategy(name, client)`
        uses it, as the evaluator uses a local policy's."""
        return dict(self.metadata.get("strategy_defaults", {}))

    def zero_observation(self) -> dict[str, Any]:
        """An observation of zeros holding the spec's required entries (warm-up, connectivity checks)."""
        flat = {
            key: "" if s["dtype"] == "str" else np.zeros(tuple(s["shape"]), dtype=np.dtype(s["dtype"]))
            for key, s in self.observation_spec.items()
            if not s.get("optional", False)
        }
        return unflatten(flat)


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """{"images/top": x, "state": y} -> {"images": {"top": x}, "state": y} (spec keys use "/" for nesting)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out
