"""`hotloop serve TARGET --port P`: serve a policy to openpi-compatible robot clients, or with `--protocol
lerobot` to LeRobot's stock async robot client (`hotloop.serve.lerobot`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from hotloop.cli_errors import register
from hotloop.cli_options import DeadlineMs, Device, FlowSteps, MemoryCap, Seed
from hotloop.errors import ConfigError


def add_commands(app: typer.Typer) -> None:
    register(app, {"serve": serve})


def serve(
    target: Annotated[str, typer.Argument(help="a policy target, e.g. demo:conveyor or toy:mlp")],
    port: Annotated[
        int | None,
        typer.Option(help="TCP port for websocket, /healthz and /metrics [default: 8000; 8080 for lerobot]"),
    ] = None,
    host: Annotated[
        str, typer.Option(help="address to listen on; 0.0.0.0 to accept robots on the network")
    ] = "127.0.0.1",
    api_key_file: Annotated[
        Path | None,
        typer.Option(help="file holding a token clients must send (openpi-client's api_key)"),
    ] = None,
    max_message_mb: Annotated[
        float,
        typer.Option(help="largest observation accepted, in MiB; a bigger one closes its connection (1009)"),
    ] = 16.0,
    max_connections: Annotated[
        int, typer.Option(help="clients connected at once; more are refused (503) until one closes")
    ] = 16,
    steps: FlowSteps = None,
    device: Device = "cpu",
    seed: Seed = 0,
    deadline_ms: DeadlineMs = None,
    fallback: Annotated[
        str | None,
        typer.Option(
            help="engine:TARGET: a smaller policy that answers when the main one misses --deadline-ms or fails"
        ),
    ] = None,
    stall_limit_ms: Annotated[
        float | None, typer.Option(help="/healthz answers 503 while an inference runs longer than this")
    ] = None,
    memory_cap_mb: MemoryCap = None,
    protocol: Annotated[
        str, typer.Option(help="openpi (websocket + msgpack) or lerobot (LeRobot's async gRPC robot client)")
    ] = "openpi",
    strategy: Annotated[
        str,
        typer.Option(
            help="lerobot: chunk (LeRobot's server) or rtc-soft (chunks continue the client's queue)"
        ),
    ] = "chunk",
    skip_similar: Annotated[
        float | None,
        typer.Option(
            help="lerobot: skip observations whose joint state is within ATOL of the last (LeRobot: 1.0)"
        ),
    ] = None,
    fps: Annotated[float, typer.Option(help="lerobot: the robot client's control rate (its --fps)")] = 30.0,
    metrics_port: Annotated[
        int | None, typer.Option(help="lerobot: HTTP port of /metrics [default: --port + 1]")
    ] = None,
) -> None:
    """Serve TARGET over websocket + msgpack, wire-compatible with openpi-client, or over LeRobot's async
    inference gRPC (`--protocol lerobot`); Ctrl-C stops it."""
    import asyncio
    import logging

    from hotloop.serve.policies import load_served_policy
    from hotloop.serve.server import LOOPBACK_HOSTS, MAX_MESSAGE_MB, PolicyServer, ServeConfig
    from hotloop.targets import ARTIFACT_ENTRY, TargetOptions, check_cap, check_device, find_target

    check_cap(memory_cap_mb)  # the flag's own bounds first, whatever the target
    check_device(device)
    if protocol not in ("openpi", "lerobot"):
        raise ConfigError(f"--protocol {protocol!r} is not known; use openpi or lerobot")
    if protocol == "lerobot":
        from hotloop.serve.lerobot.commands import check_lerobot_options

        lerobot_options = check_lerobot_options(strategy, skip_similar, fps, port, metrics_port)
        if stall_limit_ms is not None:
            raise ConfigError(
                "--stall-limit-ms sets /healthz, which --protocol lerobot does not serve (gRPC has no "
                "HTTP/1.1 on its port); watch hotloop_inference_running_seconds on /metrics instead"
            )
    elif (strategy, skip_similar, fps, metrics_port) != ("chunk", None, 30.0, None):
        raise ConfigError(
            "--strategy, --skip-similar, --fps and --metrics-port are for --protocol lerobot; an openpi "
            "client runs its own strategy (hotloop.client, docs/realtime.md): drop them"
        )
    if not (math.isfinite(max_message_mb) and 0 < max_message_mb <= MAX_MESSAGE_MB):
        raise ConfigError(
            f"--max-message-mb must be > 0 and at most {MAX_MESSAGE_MB} MiB (got {max_message_mb})"
        )
    if target.startswith("expert:"):
        raise ConfigError(
            f"{target} cannot be served: the scripted expert reads the simulator's own state, which a robot "
            "does not send; run it with `hotloop eval`, or serve a policy (see `hotloop targets`)"
        )
    if memory_cap_mb is not None and find_target(target) is not ARTIFACT_ENTRY:
        raise ConfigError(
            f"--memory-cap-mb caps a compiled artifact's engine; {target!r} is not one: drop the flag"
        )
    engine = _fallback_engine(fallback) if fallback is not None else None
    config = ServeConfig(
        host=host,
        port=port if port is not None else (8080 if protocol == "lerobot" else 8000),
        api_key=_read_key(api_key_file) if api_key_file is not None else None,
        max_message_bytes=int(max_message_mb * 2**20),
        max_connections=max_connections,
        deadline_ms=deadline_ms,
        stall_limit_ms=stall_limit_ms,
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # The websocket library logs every health check and handshake at INFO; the server logs one line per
    # connection itself.
    logging.getLogger("hotloop.serve.websockets").setLevel(logging.WARNING)
    if config.api_key is None and host not in LOOPBACK_HOSTS:
        logging.getLogger("hotloop.serve").warning(
            "serving on %s without --api-key-file: anyone who reaches this port can drive the policy", host
        )
    served = load_served_policy(
        target, TargetOptions(num_steps=steps, device=device, seed=seed, memory_cap_mb=memory_cap_mb)
    )
    small = load_served_policy(engine, TargetOptions(device=device, seed=seed)) if engine else None
    if protocol == "lerobot":
        from hotloop.serve.lerobot.commands import serve_lerobot

        serve_lerobot(target, served, config, lerobot_options, fallback=small)
        return
    server = PolicyServer(served, config, fallback=small)
    try:
        asyncio.run(server.run())
    except KeyboardInterrupt:
        typer.echo("stopped", err=True)


def _fallback_engine(text: str) -> str:
    """`--fallback engine:TARGET` -> TARGET; the robot-side fallbacks are refused with the reason."""
    from hotloop.closedloop.sweep import check_fallback_target
    from hotloop.realtime.watchdog import parse_fallback

    kind, engine = parse_fallback(text)
    if engine is None:
        raise ConfigError(
            f"--fallback {kind}: the server cannot {kind} a robot (its runner does: WallClockRunner, "
            "hotloop.client); `hotloop serve` takes --fallback engine:TARGET"
        )
    check_fallback_target(engine)
    return engine


def _read_key(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            f"--api-key-file {path}: cannot read it ({exc.strerror}); give a readable file"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"--api-key-file {path} is not UTF-8 text; put the token in it as plain text (e.g. from "
            "`openssl rand -hex 32`)"
        ) from None
