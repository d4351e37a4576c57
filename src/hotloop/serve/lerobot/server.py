"""The gRPC server process for `--protocol lerobot`: the servicer on `grpc.aio`, `/metrics` beside it.

The policy, its watchdog (`--deadline-ms`), fallback engine and per-client sessions are the websocket
server's (`hotloop.serve.server.PolicyServer`, used here without its websocket: `infer`, `new_sessions`),
so both protocols run one policy the same way. gRPC has no HTTP/1.1 endpoint on its port: Prometheus'
`/metrics` is served on `--metrics-port` (default the gRPC port + 1).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from hotloop.errors import ConfigError
from hotloop.measure.live_metrics import LiveMetrics
from hotloop.serve.lerobot import wire
from hotloop.serve.lerobot.instructions import ServedTarget
from hotloop.serve.lerobot.metrics import LeRobotMetrics
from hotloop.serve.lerobot.servicer import AsyncInferenceServicer, LeRobotServeConfig
from hotloop.serve.loop_thread import LoopThread
from hotloop.serve.server import PolicyServer, ServeConfig, ServedPolicy

log = logging.getLogger("hotloop.serve.lerobot")


class LeRobotServer:
    """`start()` / `wait_closed()` in an event loop, or `LeRobotServerThread` for a thread."""

    def __init__(
        self,
        target: ServedTarget,
        config: LeRobotServeConfig,
        *,
        deadline_ms: float | None = None,
        fallback: ServedPolicy | None = None,
        metrics: LiveMetrics | None = None,
    ) -> None:
        self.live = metrics or LiveMetrics()
        core_config = ServeConfig(
            host=config.host, port=config.port, api_key=config.api_key, deadline_ms=deadline_ms
        )  # its checks of --host, --port and the key apply to this protocol too
        self.core = PolicyServer(target.served, core_config, self.live, fallback=fallback)
        self.metrics = LeRobotMetrics(self.live)
        self.config = config
        self.servicer = AsyncInferenceServicer(target, self.core, config, self.metrics)
        self._grpc: Any = None
        self.port: int | None = None

    async def start(self) -> None:
        import grpc

        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", wire.MAX_GRPC_MESSAGE_BYTES),
                ("grpc.max_send_message_length", wire.MAX_GRPC_MESSAGE_BYTES),
            ]
        )
        server.add_generic_rpc_handlers((self.servicer.handler(),))
        address = f"{self.config.host}:{self.config.port}"
        try:
            port = server.add_insecure_port(address)
        except RuntimeError:
            port = 0
        if not port:
            raise ConfigError(
                f"cannot listen on {address}; pick another --port or --host, or stop the process holding it"
            )
        await server.start()
        self._grpc, self.port = server, port
        log.info(
            "serving %s to LeRobot robot clients (gRPC transport.AsyncInference) on %s:%d, --strategy %s",
            self.servicer.target.name,
            self.config.host,
            port,
            self.config.execution.strategy,
        )

    async def wait_closed(self) -> None:
        if self._grpc is not None:
            await self._grpc.wait_for_termination()
        self.servicer.shutdown()

    async def stop(self, grace_s: float = 0.5) -> None:
        self.servicer.end_all()
        if self._grpc is not None:
            await self._grpc.stop(grace_s)


class LeRobotServerThread(LoopThread):
    """Run `LeRobotServer`s on one event loop in a daemon thread (tests, benchmarks). grpc's asyncio
    support polls one event loop per process: several servers in one process share this thread's."""

    def __init__(self, *servers: LeRobotServer, start_timeout_s: float = 30.0) -> None:
        self.servers = servers
        super().__init__("hotloop-lerobot", start_timeout_s)

    async def start(self) -> None:
        for server in self.servers:
            await server.start()

    def serve(self) -> None:
        self._loop.run_forever()  # until `stop` has stopped the servers

    def stop(self) -> None:
        async def stop_all() -> None:
            for server in self.servers:
                await server.stop()
                await server.wait_closed()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(stop_all(), self._loop).result(timeout=10.0)
            self._loop.call_soon_threadsafe(self._loop.stop)

    @property
    def server(self) -> LeRobotServer:
        return self.servers[0]

    def address(self, index: int = 0) -> str:
        server = self.servers[index]
        assert server.port is not None
        return f"{server.config.host}:{server.port}"
