"""`hotloop serve TARGET --protocol lerobot`: the options checked before any work, then the server run."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from hotloop.errors import ConfigError
from hotloop.serve.lerobot.execution import ExecutionConfig

DEFAULT_PORT = 8080  # LeRobot's policy_server's


@dataclass(frozen=True)
class LeRobotOptions:
    execution: ExecutionConfig
    metrics_port: int


def check_lerobot_options(
    strategy: str, skip_similar: float | None, fps: float, port: int | None, metrics_port: int | None
) -> LeRobotOptions:
    execution = ExecutionConfig(strategy=strategy, fps=fps, skip_similar=skip_similar)
    grpc_port = DEFAULT_PORT if port is None else port
    chosen = metrics_port if metrics_port is not None else (grpc_port + 1 if grpc_port else 0)
    if not 0 <= chosen <= 65535:
        raise ConfigError(
            f"--metrics-port {chosen} is out of range; pick a port in 1-65535 (0: any free one)"
        )
    if chosen and chosen == grpc_port:
        raise ConfigError(f"--metrics-port {chosen} is the gRPC --port too; pick another")
    try:
        import grpc  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--protocol lerobot needs grpcio: pip install 'hotloop[lerobot]' (or grpcio)"
        ) from None
    return LeRobotOptions(execution, chosen)


def check_strategy_fits(options: LeRobotOptions, served: Any) -> None:
    """rtc-soft sends the executing actions to the policy: it must take them (its spec lists the keys)."""
    from hotloop.realtime.rtc import PREV_ACTIONS_KEY

    if options.execution.strategy == "rtc-soft" and PREV_ACTIONS_KEY not in served.observation_spec:
        raise ConfigError(
            f"--strategy rtc-soft: {served.name} has no real-time chunking sampler (ACT, Diffusion and "
            "compiled artifacts have none; pi0/pi0.5 and SmolVLA in PyTorch do); use --strategy chunk"
        )


def serve_lerobot(
    target: str, served: Any, config: Any, options: LeRobotOptions, fallback: Any = None
) -> None:
    """Serve until Ctrl-C. `config` is the command's `ServeConfig` (host, port, key, limits, deadline)."""
    import typer

    from hotloop.measure.live_metrics import LiveMetrics
    from hotloop.serve.lerobot.instructions import served_target
    from hotloop.serve.lerobot.server import LeRobotServer
    from hotloop.serve.lerobot.servicer import LeRobotServeConfig

    check_strategy_fits(options, served)
    lerobot_config = LeRobotServeConfig(
        host=config.host,
        port=config.port,
        api_key=config.api_key,
        max_message_bytes=config.max_message_bytes,
        max_sessions=config.max_connections,
        execution=options.execution,
    )
    metrics = LiveMetrics()
    server = LeRobotServer(
        served_target(target, served),
        lerobot_config,
        deadline_ms=config.deadline_ms,
        fallback=fallback,
        metrics=metrics,
    )
    http = metrics.serve_http(options.metrics_port, host=config.host) if options.metrics_port else None
    if http is not None:
        logging.getLogger("hotloop.serve.lerobot").info(
            "/metrics on http://%s:%d/metrics", config.host, http.server_port
        )

    async def run() -> None:
        await server.start()
        await server.wait_closed()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        typer.echo("stopped", err=True)
    finally:
        if http is not None:
            http.shutdown()
