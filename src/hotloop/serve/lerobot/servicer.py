"""The four `transport.AsyncInference` methods as generic gRPC handlers on an asyncio server.

Requests arrive as raw bytes (no deserializer: a malformed message is this module's error to report, not
a traceback in grpc's log) and replies leave as bytes. Every method ends in a gRPC status and at most one
log line: bad input is `INVALID_ARGUMENT` (or `RESOURCE_EXHAUSTED`, `FAILED_PRECONDITION`,
`UNAUTHENTICATED`) with the reason in the details, which the stock client logs; a failure of the policy
is `INTERNAL` for that request only. Nothing a client sends ends the server.

Clients are told apart by their connection (`context.peer()`: the stock client makes one channel and
sends all four methods over it). `Ready` starts a fresh session for its peer (LeRobot's server resets
its one global state; here the others are untouched); at most `max_sessions` exist at once, an idle one
(no call for `IDLE_EVICT_S`) makes room for a new client, else `Ready` is refused.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.realtime.rtc import MODE_KEY
from hotloop.serve.lerobot import wire
from hotloop.serve.lerobot.execution import ClientSession, ExecutionConfig, Pending
from hotloop.serve.lerobot.features import Mismatch
from hotloop.serve.lerobot.instructions import ServedTarget, check_instructions
from hotloop.serve.lerobot.metrics import LeRobotMetrics
from hotloop.serve.lerobot.reply import encode_actions
from hotloop.serve.lerobot.unpickle import Refused, load_policy_config, load_timed_observation
from hotloop.serve.server import ERROR_CHARS, PolicyServer
from hotloop.serve.spec import ObservationError, check_observation, clip

log = logging.getLogger("hotloop.serve.lerobot")

IDLE_EVICT_S = 60.0
INSTRUCTIONS_BYTES = 2**20  # a RemotePolicyConfig is a few KiB (its robot's feature names)


@dataclass(frozen=True)
class LeRobotServeConfig:
    host: str = "127.0.0.1"
    port: int = 8080  # LeRobot's policy_server default; 0: the OS picks (tests)
    api_key: str | None = None  # gRPC metadata `authorization: Api-Key <key>`
    max_message_bytes: int = 16 * 2**20  # one reassembled observation
    max_sessions: int = 16
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)


class _Status(Exception):
    """End this call with a gRPC status (a name of `grpc.StatusCode`) and its details."""

    def __init__(self, code: str, details: str, reason: str | None = None) -> None:
        super().__init__(details)
        self.code, self.details, self.reason = code, details, reason


class AsyncInferenceServicer:
    def __init__(
        self, target: ServedTarget, core: PolicyServer, config: LeRobotServeConfig, metrics: LeRobotMetrics
    ) -> None:
        self.target = target
        self.core = core  # the policy, its watchdog and fallback (the websocket server's, not started)
        self.config = config
        self.metrics = metrics
        self.sessions: dict[str, ClientSession] = {}
        # Unpickling and resizing a client's frames (MBs) off the event loop, so GetActions of other
        # clients are answered meanwhile; the policy has its own worker thread (the core's).
        self._decoder = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hotloop-lerobot-decode")

    def shutdown(self) -> None:
        self._decoder.shutdown(wait=False, cancel_futures=True)

    def handler(self) -> Any:
        import grpc

        def unary(fn: Callable[[bytes, Any], Awaitable[bytes]]) -> Any:
            return grpc.unary_unary_rpc_method_handler(fn)

        return grpc.method_handlers_generic_handler(
            wire.SERVICE,
            {
                "Ready": unary(self._rpc("Ready", self._ready)),
                "SendPolicyInstructions": unary(self._rpc("SendPolicyInstructions", self._instructions)),
                "SendObservations": grpc.stream_unary_rpc_method_handler(
                    self._rpc("SendObservations", self._observations)
                ),
                "GetActions": unary(self._rpc("GetActions", self._get_actions)),
            },
        )

    # -- one call: auth, status, metrics ------------------------------------------------------------
    def _rpc(
        self, name: str, body: Callable[[Any, Any], Awaitable[bytes]]
    ) -> Callable[[Any, Any], Awaitable[bytes]]:
        async def call(request: Any, context: Any) -> bytes:
            import grpc

            start = time.perf_counter()
            code = "OK"
            try:
                self._authorize(context)
                return await body(request, context)
            except _Status as status:
                code = status.code
                if status.reason is not None:
                    self.metrics.reject(status.reason)
                log.info("%s from %s: %s", name, context.peer(), clip(status.details, ERROR_CHARS))
                context.set_code(getattr(grpc.StatusCode, status.code))
                context.set_details(clip(status.details, ERROR_CHARS))
                return b""
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except Exception as exc:  # a bug here must not end the server nor print a traceback
                code = "INTERNAL"
                what = clip(f"{type(exc).__name__}: {exc}", ERROR_CHARS)
                log.warning("%s from %s failed: %s", name, context.peer(), what)
                context.set_code(grpc.StatusCode.INTERNAL)
                context.set_details(f"the server failed on this call: {what}")
                return b""
            finally:
                self.metrics.rpc(name, code, time.perf_counter() - start)

        return call

    def _authorize(self, context: Any) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = dict(context.invocation_metadata() or ()).get("authorization", "")
        if not hmac.compare_digest(str(given).encode(), f"Api-Key {key}".encode()):
            raise _Status(
                "UNAUTHENTICATED",
                "missing or wrong API key: send gRPC metadata 'authorization: Api-Key <the server's key>'",
                "unauthenticated",
            )

    def _session(self, context: Any) -> ClientSession | None:
        session = self.sessions.get(context.peer())
        if session is not None:
            session.last_used = time.perf_counter()
        return session

    # -- Ready ----------------------------------------------------------------------------------------
    async def _ready(self, request: bytes, context: Any) -> bytes:
        wire.decode_empty(request)
        peer = context.peer()
        self._end(peer)
        now = time.perf_counter()
        if len(self.sessions) >= self.config.max_sessions:
            idle = [p for p, s in self.sessions.items() if now - s.last_used > IDLE_EVICT_S]
            if not idle:
                raise _Status(
                    "RESOURCE_EXHAUSTED",
                    f"the server has {self.config.max_sessions} clients (its --max-connections); retry when one "
                    "stops, or raise the limit",
                    "sessions",
                )
            self._end(min(idle, key=lambda p: self.sessions[p].last_used))
        session = ClientSession(peer, self.config.execution, self.core.new_sessions())
        session.last_used = now
        self.sessions[peer] = session
        self.metrics.sessions.set(len(self.sessions))
        log.info("client %s ready", peer)
        return wire.encode_empty()

    def end_all(self) -> None:
        """End every session (the server stops): an observation still waiting is counted unanswered."""
        for peer in list(self.sessions):
            self._end(peer)

    def _end(self, peer: str) -> None:
        old = self.sessions.pop(peer, None)
        if old is not None:
            self.metrics.observation("unanswered", old.close())
            self.metrics.sessions.set(len(self.sessions))

    # -- SendPolicyInstructions -------------------------------------------------------------------------
    async def _instructions(self, request: bytes, context: Any) -> bytes:
        payload = _decode(wire.decode_bytes_message, request)
        if len(payload) > INSTRUCTIONS_BYTES:
            raise _Status("RESOURCE_EXHAUSTED", "the policy instructions exceed 1 MiB", "too_large")
        try:
            config = load_policy_config(payload)
        except Refused as exc:
            raise _Status("INVALID_ARGUMENT", f"policy instructions refused: {exc}", "pickle") from None
        try:
            setup = check_instructions(config, self.target)
        except Mismatch as exc:
            raise _Status("INVALID_ARGUMENT", f"policy instructions refused: {exc}", "instructions") from None
        session = self._session(context)
        if session is None:  # instructions without Ready: LeRobot's server accepts them too
            await self._ready(b"", context)
            session = self.sessions[context.peer()]
        session.setup = setup
        log.info(
            "client %s: %s, %d actions per chunk, %d motors, cameras %s%s",
            context.peer(),
            config.policy_type,
            setup.actions_per_chunk,
            len(setup.features.state_names),
            ", ".join(c.robot_key for c in setup.features.cameras) or "none",
            f" (asked for device {config.device!r}; the server runs on its own --device)"
            if config.device != "cpu"
            else "",
        )
        return wire.encode_empty()

    # -- SendObservations -------------------------------------------------------------------------------
    async def _observations(self, request_iterator: AsyncIterator[bytes], context: Any) -> bytes:
        received_wall = time.time()
        assembler = wire.ChunkAssembler(self.config.max_message_bytes)
        payload = None
        try:
            async for raw in request_iterator:
                payload = assembler.add(wire.decode_chunk(raw))
                if payload is not None:
                    break
        except wire.TooLarge as exc:
            self.metrics.observation("rejected")
            raise _Status("RESOURCE_EXHAUSTED", str(exc), "too_large") from None
        except wire.WireError as exc:
            self.metrics.observation("rejected")
            raise _Status("INVALID_ARGUMENT", f"observation stream: {exc}", "wire") from None
        if payload is None:
            self.metrics.observation("rejected")
            raise _Status("INVALID_ARGUMENT", "the observation stream ended before TRANSFER_END", "wire")
        received = time.perf_counter()
        session = self._session(context)
        if session is None or session.setup is None:
            self.metrics.observation("rejected")
            raise _Status(
                "FAILED_PRECONDITION",
                "no policy instructions from this client: call Ready and SendPolicyInstructions first "
                "(RobotClient.start)",
                "observation",
            )
        loop = asyncio.get_running_loop()
        try:
            item = await loop.run_in_executor(
                self._decoder, self._prepare, payload, session, received, received_wall
            )
        except Refused as exc:
            self.metrics.observation("rejected")
            raise _Status("INVALID_ARGUMENT", f"observation refused: {exc}", "pickle") from None
        except ObservationError as exc:
            self.metrics.observation("rejected")
            raise _Status("INVALID_ARGUMENT", f"observation refused: {exc}", "observation") from None
        except Exception as exc:  # input no check foresaw: still this observation's error, not the server's
            self.metrics.observation("rejected")
            raise _Status(
                "INVALID_ARGUMENT", f"the observation could not be read ({type(exc).__name__})", "observation"
            ) from None
        item.decode_s = time.perf_counter() - received
        for outcome in session.admit(item):
            self.metrics.observation(outcome)
            if outcome == "superseded":
                self.metrics.live.dropped_observation()
        self.metrics.live.observe_stage("decode", item.decode_s)
        return wire.encode_empty()

    def _prepare(
        self, payload: bytes, session: ClientSession, received: float, received_wall: float
    ) -> Pending:
        """On the decode thread: the payload unpickled (allow-list), mapped and checked."""
        timed = load_timed_observation(payload)
        obs = session.setup.features.observation(timed.observation)
        with np.errstate(all="ignore"):  # a client's values must not print numpy warnings in the log
            checked = check_observation(obs, self.target.served.observation_spec)
        state = checked.get("state")
        return Pending(
            timed.timestep,
            timed.timestamp,
            timed.must_go,
            checked,
            None if state is None else np.asarray(state, dtype=np.float64),
            received,
            received_wall,
        )

    # -- GetActions -----------------------------------------------------------------------------------
    async def _get_actions(self, request: bytes, context: Any) -> bytes:
        wire.decode_empty(request)
        session = self._session(context)
        if session is None or session.setup is None:
            # The stock client asks in a loop from its own thread: make it wait as for an observation.
            await asyncio.sleep(self.config.execution.obs_wait_s)
            return wire.encode_empty()
        item = await session.take()
        if item is None:
            return wire.encode_empty()  # no observation in time: the stock client asks again
        start = time.perf_counter()
        try:
            actions, source = await self._infer(item, session)
        except _Status:
            session.failed(item)
            self.metrics.observation("failed")
            raise
        except asyncio.CancelledError:  # the client went away while its chunk was being made
            self.metrics.observation("unanswered")
            raise
        inferred = time.perf_counter()
        chunk = actions[: session.setup.actions_per_chunk]
        dt = 1.0 / self.config.execution.fps
        data = wire.encode_bytes_message(encode_actions(chunk, item.timestep, item.timestamp, dt))
        sent = time.perf_counter()
        session.delivered(item, chunk, sent)
        self.metrics.observation("inferred")
        self.metrics.live.request("fallback" if source == "fallback" else "ok")
        self.metrics.live.observe_stage("queue", start - item.received - item.decode_s)
        self.metrics.live.observe_stage("encode", sent - inferred)
        self.metrics.live.observe_stage("server_total", sent - item.received)
        # The server's own work on this chunk, its wait for the model excluded (benchmarks read it).
        log.debug(
            "chunk #%d: %.3f ms of server work (decode %.3f, infer %.3f, encode %.3f ms)",
            item.timestep,
            (item.decode_s + sent - start) * 1e3,
            item.decode_s * 1e3,
            (inferred - start) * 1e3,
            (sent - inferred) * 1e3,
        )
        return data

    async def _infer(self, item: Pending, session: ClientSession) -> tuple[np.ndarray, str]:
        guidance = session.guidance(item)
        start = time.perf_counter()
        try:
            output, source = await self.core.infer({**item.obs, **guidance}, session.sessions)
        except ConfigError as exc:
            self.metrics.live.request("rejected")
            raise _Status(
                "INVALID_ARGUMENT", f"observation #{item.timestep} refused by the policy: {exc}"
            ) from None
        except Exception as exc:
            self.metrics.live.request("policy_error")
            raise _Status(
                "INTERNAL", f"observation #{item.timestep}: the policy failed: {type(exc).__name__}: {exc}"
            ) from None
        self.metrics.live.observe_stage("infer", time.perf_counter() - start)
        actions = _actions(output)
        if actions is None:
            self.metrics.live.request("policy_error")
            raise _Status(
                "INTERNAL", f"observation #{item.timestep}: the policy answered no finite (H, D) actions"
            )
        if guidance and source == "policy":
            if output.get(MODE_KEY) != "soft-prefix":
                self.metrics.live.request("policy_error")
                raise _Status(
                    "INTERNAL", "--strategy rtc-soft: the policy did not condition on the executing actions"
                )
            self.metrics.conditioned.inc()
        return actions, source


def _decode(fn: Callable[[bytes], Any], raw: bytes) -> Any:
    try:
        return fn(raw)
    except wire.WireError as exc:
        raise _Status("INVALID_ARGUMENT", f"malformed message: {exc}", "wire") from None


def _actions(output: Any) -> np.ndarray | None:
    if not isinstance(output, Mapping) or "actions" not in output:
        return None
    actions = np.asarray(output["actions"])
    if actions.ndim == 3 and actions.shape[0] == 1:
        actions = actions[0]
    if actions.ndim != 2 or actions.dtype.kind not in "biuf" or not np.all(np.isfinite(actions)):
        return None
    return actions.astype(np.float32)
