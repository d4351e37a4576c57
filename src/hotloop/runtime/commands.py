"""`hotloop profile`: per-operator time per sub-engine, registered on the app by `add_commands`."""

from __future__ import annotations

from typing import Annotated

import typer

from hotloop.cli_errors import register
from hotloop.cli_options import JsonOut, write_json
from hotloop.io import check_output_file


def profile_cmd(
    target: Annotated[str, typer.Argument(help="an artifact folder, or a pi target (profiled eager fp32)")],
    top: Annotated[int, typer.Option(help="rows per sub-engine")] = 10,
    iters: Annotated[int, typer.Option("--iters", help="profiled runs per sub-engine")] = 5,
    json_path: JsonOut = None,
) -> None:
    """Per-operator time per sub-engine (torch profiler, ONNX Runtime profiling, OpenVINO counters)."""
    from hotloop.errors import ConfigError
    from hotloop.runtime.profiler import print_profile, profile_target

    if top < 1 or iters < 1:
        raise ConfigError("--top and --iters must be >= 1")
    if json_path is not None:
        check_output_file(json_path, "--json")
    report = profile_target(target, iters, top)
    print_profile(report)
    if json_path is not None:
        write_json(json_path, report)


def add_commands(app: typer.Typer) -> None:
    register(app, {"profile": profile_cmd})
