"""An openpi-compatible policy server: websocket + msgpack-numpy, `/healthz` and `/metrics` on the same port.

Protocol (openpi's `WebsocketPolicyServer`, which robot code written for openpi already speaks): on connect
the server sends its metadata map (here with `observation_spec` and `action_spec`, key -> {shape, dtype}, and
`strategy_defaults`, how the policy is meant to be executed);
then each observation map gets an action map holding `actions` and `server_timing` (milliseconds), or, when
the observation is rejected, a text frame `error: ...` — openpi-client raises it as a RuntimeError and the
connection stays open for the next observation.

Under load the newest observation wins: each connection has one pending slot; an observation that arrives
while an older one still waits for the model replaces it, the older one gets no reply and is counted in
`hotloop_dropped_observations_total`. Every reply carries `request_id` (the connection's message count) so
a client that streams observations can tell which one it answers. One model serves every connection, one
inference at a time, on a worker thread, so the event loop keeps receiving, answering `/healthz` and
rejecting bad input while the model runs.

Nothing a client sends can end the server or log a traceback: bad input is a one-line error reply, a
vanished client is a one-line info log. Nor can one client hurt the others: an observation is checked in
full at the wire (serve/spec.py), so bad input is never an engine fault; a policy that refuses an input
itself (a `ConfigError`) answers that client with an error and is not counted as a fault either; a message
over `--max-message-mb` is refused by the websocket layer while its header is read, before its payload is
buffered; at most `--max-connections` clients are connected at once, and when they are all taken a newcomer
evicts the connection open longest without one accepted observation (close code 1013), so clients that
only answer pings never keep a robot out (only when every connection has sent observations is a newcomer
refused, 503); error replies and log lines repeat at most `ERROR_CHARS` characters of what a client sent.

Memory a client can make the server hold: a message is read only up to `max_message_bytes` (the frame
header declares its length; fragments are counted as they come); once more than `MAX_QUEUE` received
messages wait, the server stops reading that socket; one decoded observation waits in the connection's
slot. So a connection holds at most about `HELD_MESSAGES` x `--max-message-mb` (the queue, the message
being read, the one being checked, the slot's), and the server `--max-connections` times that, which it
logs at start.

Per-connection state: a policy that keeps episode state of its own (Diffusion Policy's observation
history) exposes `new_session()`, a view of it with that state fresh and the model shared; each connection
then talks to its own session (so does the fallback engine's policy when it has one), and two robots never
see each other's observations. Other policies are shared as they are.
"""

from __future__ import annotations

import asyncio
import hmac
import http
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hotloop.client import codec
from hotloop.errors import ConfigError, MemoryCapError
from hotloop.measure.live_metrics import LiveMetrics
from hotloop.policy import Policy
from hotloop.serve.guard import UnsafeActionsError, action_fault
from hotloop.serve.loop_thread import LoopThread
from hotloop.serve.spec import ArraySpec, ObservationError, check_observation, clip, spec_to_wire

log = logging.getLogger("hotloop.serve")

# Received messages that may wait per connection before the server stops reading its socket (websockets'
# max_queue, counted in frames): a client that floods while its replies are not read holds no more.
MAX_QUEUE = 2
HELD_MESSAGES = MAX_QUEUE + 4  # the most messages of one connection in memory at once (module docstring)
MAX_MESSAGE_MB = 1024  # the largest --max-message-mb: an observation bigger than 1 GiB is a mistake
ERROR_CHARS = 1000  # the longest error reply or log line that carries a client's words
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000  # 0: the OS picks a free port (tests, benchmarks)
    api_key: str | None = None  # clients send header `Authorization: Api-Key <key>` (openpi-client's api_key)
    max_message_bytes: int = 16 * 2**20
    max_connections: int = 16  # more are refused at the handshake (503); bounds memory with the above
    open_timeout_s: float = 10.0  # a TCP client that never completes the websocket handshake is closed
    deadline_ms: float | None = None  # the watchdog's deadline per inference (serve/watchdog.py)
    stall_limit_ms: float | None = None  # /healthz answers 503 while an inference runs longer than this

    def __post_init__(self) -> None:
        from hotloop.serve.watchdog import check_limit_ms

        check_limit_ms("--deadline-ms", self.deadline_ms)
        check_limit_ms("--stall-limit-ms", self.stall_limit_ms)
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port {self.port} is out of range; pick a port in 1-65535")
        if not self.host.strip():
            # asyncio reads an empty host as "every interface": never what an empty value meant.
            raise ConfigError(
                "--host is empty, which would listen on every interface; give 127.0.0.1 (this machine "
                "only) or 0.0.0.0 (every interface, with --api-key-file)"
            )
        if self.max_message_bytes < 1024:
            raise ConfigError(
                f"--max-message-mb gives {self.max_message_bytes} bytes; allow at least 1 KiB per observation"
            )
        if self.max_message_bytes > MAX_MESSAGE_MB * 2**20:
            raise ConfigError(
                f"--max-message-mb gives {self.max_message_bytes} bytes, over {MAX_MESSAGE_MB} MiB; "
                "send smaller observations (resize the images)"
            )
        if self.max_connections < 1:
            raise ConfigError(f"--max-connections must be >= 1 (got {self.max_connections})")
        if self.api_key is not None and not self.api_key.strip():
            raise ConfigError("--api-key-file holds an empty key; put the token in it or drop the flag")
        if self.open_timeout_s <= 0:
            raise ConfigError(f"open timeout must be > 0 s (got {self.open_timeout_s})")


@dataclass(frozen=True)
class ServedPolicy:
    """A policy with the spec its observations are checked against and the spec of its replies."""

    name: str
    policy: Policy
    observation_spec: Mapping[str, ArraySpec]
    action_spec: Mapping[str, ArraySpec] = field(default_factory=dict)
    # How the policy is meant to be executed (`hotloop.realtime.strategies.apply_defaults`: an ACT
    # checkpoint's n_action_steps, its temporal ensembling coefficient), sent in the metadata so that the
    # robot-side runner, which executes the chunks, can use them.
    strategy_defaults: Mapping[str, Any] = field(default_factory=dict)
    # Seconds from the start of loading to ready (an artifact: Engine.load and the warm-up inference),
    # shown by /healthz; None for a policy built in this process some other way.
    load_s: float | None = None


@dataclass
class _Client:
    """One open connection, as eviction sees it."""

    opened: float = field(default_factory=time.perf_counter)
    observations: int = 0  # observations that passed the check (refused ones do not count)


@dataclass
class _Pending:
    request_id: int
    obs: dict[str, Any]
    received: float  # perf_counter when the last byte arrived
    decode_s: float


class _LatestSlot:
    """One pending observation per connection; a newer one replaces it (newest wins)."""

    def __init__(self) -> None:
        self._item: _Pending | None = None
        self._ready = asyncio.Event()

    def put(self, item: _Pending) -> bool:
        """Store `item`; True when it superseded one that never reached the model."""
        replaced = self._item is not None
        self._item = item
        self._ready.set()
        return replaced

    async def take(self) -> _Pending:
        await self._ready.wait()
        self._ready.clear()
        item, self._item = self._item, None
        assert item is not None
        return item


class PolicyServer:
    """Serve one policy to any number of clients; `run()` in an event loop, or `ServerThread` for a thread."""

    def __init__(
        self,
        served: ServedPolicy,
        config: ServeConfig,
        metrics: LiveMetrics | None = None,
        fallback: ServedPolicy | None = None,
    ) -> None:
        """`fallback`: the smaller engine that answers when the main policy misses its deadline or fails
        (`--fallback engine:TARGET`); with it or with `config.deadline_ms` a watchdog runs."""
        from hotloop.serve.watchdog import ServerWatchdog

        self.served = served
        self.config = config
        self.metrics = metrics or LiveMetrics()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hotloop-infer")
        self.fallback = fallback
        if fallback is not None:
            check_fallback_engine(served, fallback)
        self._fallback_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hotloop-fallback")
        # Always on: even without a deadline or a fallback, a failed or non-finite answer is a fault,
        # counted, and never sent (hotloop.serve.guard).
        self.watchdog = ServerWatchdog(config.deadline_ms, "engine" if fallback else "hold", self.metrics)
        self._running_since: float | None = None  # perf_counter when the model started on the current request
        # Set when the engine went over its --memory-cap-mb: every later call raises too (memory.py), so
        # /healthz reports it until the process is restarted.
        self._over_cap: str | None = None
        # A main inference whose request the fallback answered (it may still be running).
        self._stale: asyncio.Future[Any] | None = None
        self._infer_lock: asyncio.Lock | None = None  # one guarded inference at a time (made in the loop)
        self.metrics.watch_inference(self.inference_running_s)
        self._metadata = codec.packb(
            {
                "server": "hotloop",
                "policy": served.name,
                "observation_spec": spec_to_wire(served.observation_spec),
                "action_spec": spec_to_wire(served.action_spec),
                "strategy_defaults": dict(served.strategy_defaults),
                "max_message_bytes": config.max_message_bytes,
            }
        )
        self._ws_server: Any = None
        self.port: int | None = None
        # Per open connection: when it opened and how many observations it sent (`_evict_idle`).
        self._clients: dict[Any, _Client] = {}
        self._evicting: set[Any] = set()
        self._closing: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        from websockets.asyncio.server import serve

        try:
            self._ws_server = await serve(
                self._handle,
                self.config.host,
                self.config.port,
                compression=None,  # images do not compress; deflate would cost milliseconds
                max_size=self.config.max_message_bytes,  # checked on each frame header, before reading
                max_queue=MAX_QUEUE,
                process_request=self._process_request,
                open_timeout=self.config.open_timeout_s,
                logger=logging.getLogger("hotloop.serve.websockets"),
            )
            self._infer_lock = asyncio.Lock()
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {self.config.host}:{self.config.port} ({exc.strerror}); "
                "pick another --port or --host, or stop the process holding it"
            ) from None
        self.port = int(self._ws_server.sockets[0].getsockname()[1])
        log.info("serving %s on ws://%s:%d", self.served.name, self.config.host, self.port)
        per_connection = HELD_MESSAGES * self.config.max_message_bytes
        log.info(
            "client messages: at most %.1f MiB each, %d connections, about %.0f MiB in all at worst",
            self.config.max_message_bytes / 2**20,
            self.config.max_connections,
            per_connection * self.config.max_connections / 2**20,
        )

    async def run(self) -> None:
        await self.start()
        try:
            await self._ws_server.serve_forever()
        finally:
            self._shutdown_executors()

    def _shutdown_executors(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._fallback_executor.shutdown(wait=False, cancel_futures=True)

    def inference_running_s(self) -> float:
        """How long the main model has been on its current request (0 when idle)."""
        since = self._running_since
        return 0.0 if since is None else max(0.0, time.perf_counter() - since)

    def close(self) -> None:
        if self._ws_server is not None:
            self._ws_server.close()

    async def wait_closed(self) -> None:
        if self._ws_server is not None:
            await self._ws_server.wait_closed()
        self._shutdown_executors()

    # -- HTTP on the same port -------------------------------------------------------------------------
    def _process_request(self, connection: Any, request: Any) -> Any:
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            if self._over_cap is not None:
                return connection.respond(
                    http.HTTPStatus.SERVICE_UNAVAILABLE,
                    f"unhealthy: the engine is over its memory cap: {self._over_cap}\n",
                )
            running_s, limit_ms = self.inference_running_s(), self.config.stall_limit_ms
            if limit_ms is not None and running_s * 1e3 > limit_ms:
                return connection.respond(
                    http.HTTPStatus.SERVICE_UNAVAILABLE,
                    f"unhealthy: an inference has been running for {running_s * 1e3:.0f} ms, over the "
                    f"--stall-limit-ms of {limit_ms:g} ms\n",
                )
            if self.served.load_s is not None:
                return connection.respond(http.HTTPStatus.OK, f"OK load_s={self.served.load_s:.3f}\n")
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if path == "/metrics":
            self.watchdog.export()  # the time in fallback grows between events
            body, content_type = self.metrics.exposition()
            response = connection.respond(http.HTTPStatus.OK, body.decode())
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = content_type
            return response
        if self.config.api_key is not None:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Api-Key {self.config.api_key}".encode()):
                self.metrics.request("unauthorized")
                log.info("refused a connection: missing or wrong API key")
                return connection.respond(
                    http.HTTPStatus.UNAUTHORIZED,
                    "error: missing or wrong API key; connect with api_key=<the server's key> "
                    "(header 'Authorization: Api-Key <key>')\n",
                )
        if len(self._ws_server.connections) >= self.config.max_connections and not self._evict_idle():
            # No await between this check and the handshake's completion: a burst cannot slip past it.
            self.metrics.request("refused")
            log.info("refused a connection: %d already open (--max-connections)", self.config.max_connections)
            return connection.respond(
                http.HTTPStatus.SERVICE_UNAVAILABLE,
                f"error: the server is at its --max-connections of {self.config.max_connections}; "
                "retry later or close an idle client\n",
            )
        return None

    def _evict_idle(self) -> bool:
        """At --max-connections, make room for a new client by closing the connection that has been open
        longest without sending one accepted observation (code 1013, try again later); False when every
        open connection has sent one (they are robots: the newcomer is refused instead). Idle clients that
        only answer pings can so never keep a robot out."""
        open_now = [ws for ws in self._ws_server.connections if ws not in self._evicting]
        idle = [ws for ws in open_now if self._clients.get(ws, _Client()).observations == 0]
        if not idle:
            return False
        victim = min(idle, key=lambda ws: self._clients.get(ws, _Client()).opened)
        self._evicting.add(victim)
        self.metrics.request("evicted")
        idle_s = time.perf_counter() - self._clients.get(victim, _Client()).opened
        log.info(
            "evicted connection %s: open %.1f s without an observation, the server at its --max-connections "
            "of %d and another client connecting",
            _peer(victim),
            idle_s,
            self.config.max_connections,
        )
        task = asyncio.get_running_loop().create_task(
            victim.close(1013, "evicted: connected without sending an observation while the server was full")
        )
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        return True

    # -- one websocket connection ----------------------------------------------------------------------
    async def _handle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        peer = _peer(ws)
        log.info("connection %s opened", peer)
        self.metrics.connections.inc()
        client = self._clients[ws] = _Client()
        slot = _LatestSlot()
        fallback = session_of(self.fallback.policy) if self.fallback is not None else None
        sessions = _Sessions(session_of(self.served.policy), fallback)
        worker = asyncio.create_task(self._infer_loop(ws, slot, sessions))
        try:
            await ws.send(self._metadata)
            request_id = 0
            async for message in ws:
                if await self._accept(ws, message, request_id, slot):
                    client.observations += 1
                request_id += 1
        except ConnectionClosed:
            pass
        except Exception as exc:  # a bug here must not kill the server nor print a traceback
            log.warning(
                "connection %s ended by %s: %s", peer, type(exc).__name__, clip(str(exc), ERROR_CHARS)
            )
        finally:
            worker.cancel()
            self._clients.pop(ws, None)
            self._evicting.discard(ws)
            self.metrics.connections.dec()
            log.info("connection %s closed (%s)", peer, _close_reason(ws))

    async def _accept(self, ws: Any, message: bytes | str, request_id: int, slot: _LatestSlot) -> bool:
        """Check one message and put it in the slot; False (and an error reply) when it is refused."""
        received = time.perf_counter()
        try:
            if isinstance(message, str):
                raise ObservationError("send the observation as msgpack bytes, not a text frame")
            # (A message over --max-message-mb never gets here: the websocket layer closed the
            # connection with code 1009 when its header announced the size.)
            obs = codec.unpackb(message)
            with np.errstate(all="ignore"):  # a client's values must not print numpy warnings in the log
                checked = check_observation(obs, self.served.observation_spec)
        except (ObservationError, codec.WireError) as exc:
            self.metrics.request("rejected")
            await ws.send(clip(f"error: request {request_id}: {exc}", ERROR_CHARS))
            return False
        except Exception as exc:  # input no check foresaw: still this request's error, not the connection's
            self.metrics.request("rejected")
            log.warning(
                "request %d unreadable: %s: %s", request_id, type(exc).__name__, clip(str(exc), ERROR_CHARS)
            )
            await ws.send(
                f"error: request {request_id}: the observation could not be read ({type(exc).__name__})"
            )
            return False
        decode_s = time.perf_counter() - received
        self.metrics.observe_stage("decode", decode_s)
        if slot.put(_Pending(request_id, checked, received, decode_s)):
            self.metrics.dropped_observation()
        return True

    async def _infer_loop(self, ws: Any, slot: _LatestSlot, sessions: _Sessions) -> None:
        from websockets.exceptions import ConnectionClosed

        packer = codec.Packer()
        prev_total_ms: float | None = None
        try:
            while True:
                item = await slot.take()
                start = time.perf_counter()
                try:
                    payload, source = await self._answer(item, packer, prev_total_ms, sessions)
                except _Refused as refused:  # the policy named what is wrong with this input
                    self.metrics.request("rejected")
                    text = str(refused.__cause__)
                    log.info("request %d refused by the policy: %s", item.request_id, clip(text, ERROR_CHARS))
                    await ws.send(clip(f"error: request {item.request_id}: {text}", ERROR_CHARS))
                    continue
                except Exception as exc:  # the policy's failure is this request's error, not the server's
                    packer = codec.Packer()  # never reuse a buffer a failed encode may have left dirty
                    self.metrics.request("policy_error")
                    what = f"{type(exc).__name__}: {exc}"
                    log.warning("request %d failed: %s", item.request_id, clip(what, ERROR_CHARS))
                    await ws.send(
                        clip(f"error: request {item.request_id}: the policy failed: {what}", ERROR_CHARS)
                    )
                    continue
                encoded = time.perf_counter()
                await ws.send(payload)
                sent = time.perf_counter()
                self.metrics.observe_stage("queue", start - item.received - item.decode_s)
                self.metrics.observe_stage("send", sent - encoded)
                self.metrics.observe_stage("server_total", sent - item.received)
                self.metrics.request("fallback" if source == "fallback" else "ok")
                prev_total_ms = (sent - item.received) * 1e3
        except ConnectionClosed:
            pass

    async def _answer(
        self,
        item: _Pending,
        packer: codec.Packer,
        prev_total_ms: float | None,
        sessions: _Sessions,
    ) -> tuple[bytes, str]:
        """Run the policy on the worker thread and encode its reply with openpi's `server_timing`;
        returns (reply, source): "policy", or "fallback" when the fallback engine answered."""
        start = time.perf_counter()
        action, source = await self._guarded_infer(item.obs, sessions)
        done = time.perf_counter()
        timing = {
            "infer_ms": (done - start) * 1e3,
            "decode_ms": item.decode_s * 1e3,
            "queue_ms": (start - item.received - item.decode_s) * 1e3,
        }
        if prev_total_ms is not None:
            timing["prev_total_ms"] = prev_total_ms
        extra = {"fallback": self.fallback.name} if source == "fallback" and self.fallback else {}
        payload = packer.pack({**action, "server_timing": timing, "request_id": item.request_id, **extra})
        self.metrics.observe_stage("infer", done - start)
        self.metrics.observe_stage("encode", time.perf_counter() - done)
        return payload, source

    def new_sessions(self) -> _Sessions:
        """What one client talks to: its own session of the policy (and of the fallback engine)."""
        fallback = session_of(self.fallback.policy) if self.fallback is not None else None
        return _Sessions(session_of(self.served.policy), fallback)

    async def infer(self, obs: dict[str, Any], sessions: _Sessions) -> tuple[Any, str]:
        """One checked observation through the policy, under the watchdog and the non-finite guard (as a
        websocket client's), for a front end other than the websocket (`hotloop.serve.lerobot`): (output,
        "policy" or "fallback"). The policy refusing the input raises its `ConfigError`."""
        try:
            if self._infer_lock is None:
                self._infer_lock = asyncio.Lock()
            return await self._guarded_infer(obs, sessions)
        except _Refused as refused:
            raise refused.__cause__ or ConfigError("the policy refused the observation") from None

    def _run_policy(self, obs: dict[str, Any], policy: Any) -> Any:
        """On the worker thread: the main policy (the connection's session of it), with the start time
        /healthz and the gauge read. A `ConfigError` is the policy refusing this input (the families
        raise it for a bad observation): raised as `_Refused`, the client's error, not an engine fault."""
        self._running_since = time.perf_counter()
        try:
            return policy.infer(obs)
        except MemoryCapError as exc:
            self._over_cap = str(exc)
            raise
        except ConfigError as exc:
            raise _Refused() from exc
        finally:
            self._running_since = None

    async def _guarded_infer(self, obs: dict[str, Any], sessions: _Sessions) -> tuple[Any, str]:
        """The main policy under the watchdog (serve/watchdog.py): a miss or a fault switches to the
        fallback engine when there is one; without one a late reply still goes out and a fault is
        raised (an error reply)."""
        assert self._infer_lock is not None
        watchdog = self.watchdog
        loop = asyncio.get_running_loop()
        async with self._infer_lock:
            if self._stale is not None and not self._stale.done():
                # The model is still on a request the fallback answered: it cannot take this one in time.
                return await self._fallback_infer(obs, sessions)
            watchdog.started()
            future = loop.run_in_executor(self._executor, self._run_policy, obs, sessions.policy)
            try:
                wait_s = watchdog.seconds_left()
                if wait_s is not None:
                    done, _ = await asyncio.wait({future}, timeout=wait_s)
                    if not done:
                        watchdog.missed()
                        if self.fallback is not None:
                            self._stale = future
                            future.add_done_callback(_discard_late_result)
                            return await self._fallback_infer(obs, sessions)
                action = await future  # no fallback engine: the late reply still goes out
            except _Refused:
                # Neither a fault nor a chunk: the engine named what is wrong with this input (the fallback,
                # reading the same spec, would too). The mode stays as it was; the next start resets the
                # deadline.
                raise
            except Exception as exc:
                watchdog.fault(clip(f"{type(exc).__name__}: {exc}", ERROR_CHARS))  # kept as an event
                if self.fallback is not None:
                    return await self._fallback_infer(obs, sessions)
                raise
            fault = action_fault(action)  # no 'actions', not numbers, NaN or inf: never sent to a robot
            if fault is not None:
                watchdog.fault(fault)
                if self.fallback is not None:
                    return await self._fallback_infer(obs, sessions)
                raise UnsafeActionsError(f"{fault}; not sent (no --fallback engine to answer instead)")
            watchdog.fresh()
            return action, "policy"

    async def _fallback_infer(self, obs: dict[str, Any], sessions: _Sessions) -> tuple[Any, str]:
        assert self.fallback is not None and sessions.fallback is not None
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        action = await loop.run_in_executor(self._fallback_executor, _refusing, sessions.fallback, obs)
        self.metrics.observe_stage("fallback_infer", time.perf_counter() - start)
        fault = action_fault(action)
        if fault is not None:
            raise UnsafeActionsError(f"the fallback engine failed too: {fault}; not sent")
        return action, "fallback"


class _Refused(Exception):
    """The policy refused an observation (its `ConfigError` is the `__cause__`)."""


def _refusing(policy: Any, obs: dict[str, Any]) -> Any:
    """`policy.infer(obs)` with a `ConfigError` raised as `_Refused` (the fallback engine's)."""
    try:
        return policy.infer(obs)
    except ConfigError as exc:
        raise _Refused() from exc


@dataclass(frozen=True)
class _Sessions:
    """What one connection talks to: its session of the main policy and of the fallback engine's."""

    policy: Any
    fallback: Any = None


def session_of(policy: Any) -> Any:
    """`policy.new_session()` for a policy with per-connection state (see the module docstring), else the
    policy itself (shared by every connection, as before)."""
    new_session = getattr(policy, "new_session", None)
    return new_session() if callable(new_session) else policy


def check_fallback_engine(served: ServedPolicy, fallback: ServedPolicy) -> None:
    """The fallback engine answers the main policy's requests: it must read the same observation and
    answer actions of the same width (its horizon may differ)."""
    if dict(fallback.observation_spec) != dict(served.observation_spec):
        raise ConfigError(
            f"--fallback engine:{fallback.name} reads observations {spec_to_wire(fallback.observation_spec)} "
            f"but {served.name} reads {spec_to_wire(served.observation_spec)}; pick an engine with the same inputs"
        )
    mine, theirs = served.action_spec.get("actions"), fallback.action_spec.get("actions")
    if mine is None or theirs is None or mine.shape[-1:] != theirs.shape[-1:]:
        raise ConfigError(
            f"--fallback engine:{fallback.name} answers actions {theirs} but {served.name} answers {mine}; "
            "pick an engine with the same action width"
        )


def _discard_late_result(future: asyncio.Future[Any]) -> None:
    """A main result that came after the fallback answered its request: retrieved (so asyncio logs no
    'exception never retrieved') and dropped."""
    exc = None if future.cancelled() else future.exception()
    if exc is not None:
        cause = exc.__cause__ if isinstance(exc, _Refused) else exc
        log.info("a late inference failed after the fallback answered: %s", clip(str(cause), ERROR_CHARS))


def _peer(ws: Any) -> str:
    address = getattr(ws, "remote_address", None)
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else "?"


def _close_reason(ws: Any) -> str:
    code = getattr(ws, "close_code", None)
    return f"code {code}" if code is not None else "no close frame"


class ServerThread(LoopThread):
    """Run a `PolicyServer` on its own event loop in a daemon thread (tests, benchmarks, embedding)."""

    def __init__(self, server: PolicyServer, start_timeout_s: float = 30.0) -> None:
        self.server = server
        super().__init__("hotloop-serve", start_timeout_s)

    async def start(self) -> None:
        await self.server.start()

    def serve(self) -> None:
        self._loop.run_until_complete(self.server.wait_closed())

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self.server.close)

    @property
    def port(self) -> int:
        assert self.server.port is not None
        return self.server.port

    @property
    def url(self) -> str:
        return f"ws://{self.server.config.host}:{self.port}"
