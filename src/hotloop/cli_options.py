"""Typer options several commands declare alike (the same flag, type and help), declared once here so their
help cannot drift apart. Light on purpose (typer only): every commands module imports it at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hotloop.output_dir import OVERWRITE_HELP

Quiet = Annotated[bool, typer.Option("--quiet", help="no progress bar")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help=OVERWRITE_HELP)]
Device = Annotated[str, typer.Option(help="cpu or cuda")]
FlowSteps = Annotated[int | None, typer.Option(help="flow-matching steps (VLA targets)")]

# The simulated task an episode runs (hotloop eval, hotloop record).
Task = Annotated[
    str, typer.Option(help="conveyor-pick, reach, gym:ENV_ID (any gymnasium env) or a hotloop.tasks plugin")
]
TaskKwargs = Annotated[
    str | None,
    typer.Option(help="JSON keyword arguments for gym:/plugin tasks, e.g. '{\"max_episode_steps\": 100}'"),
]
Difficulty = Annotated[str | None, typer.Option(help="easy, medium or hard (conveyor-pick)")]

# A run kept in the history and judged against a baseline (hotloop bench, hotloop eval).
History = Annotated[
    Path | None,
    typer.Option(envvar="HOTLOOP_HISTORY", help="append this run to a history folder (see hotloop history)"),
]
ForceJudge = Annotated[
    bool, typer.Option("--force", help="with --fail-on-regression: judge on a busy machine anyway")
]
