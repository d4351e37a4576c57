"""Loading an artifact for LeRobot: the compiled plan through hotloop's runtime (never the source model),
checked against what LeRobot asks of it; or, opted in with `fallback: eager`, the source checkpoint with
LeRobot's own policy class when the plan cannot run here.

What refuses, each with one line (`ArtifactRefused`): a folder that is not a hotloop artifact, a file whose
sha256 differs from the manifest's (config.json and the processor files included), an artifact of another
hotloop version, a CPU without the plan's features or of another machine class, a plan of another family
than config.json says, an environment whose action is not the plan's. The fallback never covers a changed
LeRobot-facing file: LeRobot reads the processors from the artifact, so those must be the compiled ones.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from lerobot_policy_hotloop.errors import ArtifactRefused

_log = logging.getLogger(__name__)


def check_folder(folder: Path) -> None:
    """A local artifact folder: hotloop plans are compiled for the machine they run on, never downloaded."""
    if not (folder / "manifest.json").is_file():
        raise ArtifactRefused(
            f"{folder} is not a hotloop artifact (no manifest.json); make one with `hotloop compile CKPT -o ART` "
            "and pass --policy.path=ART"
        )


def check_lerobot_files(folder: Path) -> None:
    """config.json and the processor files LeRobot reads are the ones the manifest's sha256 lists."""
    from hotloop.compile.artifact import sha256_file
    from hotloop.errors import HotloopError
    from hotloop.lerobot.plugin_files import CONFIG_FILE, processor_files

    try:
        listed = json.loads((folder / "manifest.json").read_text()).get("files", {})
    except (OSError, ValueError, AttributeError) as exc:
        raise ArtifactRefused(
            f"{folder / 'manifest.json'} is unreadable ({exc}); recompile the artifact"
        ) from None
    try:
        names = [CONFIG_FILE, *(str(p) for p in processor_files(folder))]
    except HotloopError as exc:
        raise ArtifactRefused(str(exc)) from None
    for rel in names:
        path = folder / rel
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            key = str(f.relative_to(folder))
            if not f.is_file():
                raise ArtifactRefused(
                    f"{f} is missing: an artifact compiled from a LeRobot checkpoint holds it; recompile "
                    "(`hotloop compile CKPT -o ART`)"
                )
            if key not in listed:
                raise ArtifactRefused(f"{f} is not listed in the manifest (added after compiling); recompile")
            if sha256_file(f) != listed[key]:
                raise ArtifactRefused(
                    f"{f}: sha256 does not match the manifest (changed or truncated); recompile"
                )


def load_engine(folder: Path) -> Any:
    """hotloop's Engine of the artifact, every check of `Engine.load` passed (or one line naming the first
    that failed)."""
    from hotloop.errors import HotloopError
    from hotloop.runtime.engine import Engine

    try:
        return Engine.load(folder)
    except HotloopError as exc:
        raise ArtifactRefused(str(exc)) from None


def check_plan_matches(folder: Path, config: Any, engine: Any) -> None:
    """The plan is of the family config.json names, and returns the action LeRobot's environment takes
    (`make_policy` replaces `output_features` by the environment's before loading)."""
    if config.source_type not in engine.family.lerobot_types:
        raise ArtifactRefused(
            f"{folder / 'config.json'}: source_type {config.source_type!r}, but the plan is a {engine.family.name} "
            "plan; recompile the artifact"
        )
    check_action(folder, config)


def check_action(folder: Path, config: Any) -> None:
    compiled = json.loads((folder / "config.json").read_text())["output_features"]["action"]["shape"]
    action = (config.output_features or {}).get("action")
    if action is None:
        raise ArtifactRefused(f"{folder}: the policy config has no 'action' output feature")
    if tuple(action.shape) != tuple(compiled):
        raise ArtifactRefused(
            f"the environment's action has shape {tuple(action.shape)}, but {folder} was compiled from a "
            f"checkpoint whose action has shape {tuple(compiled)}; evaluate it on the environment it was trained for"
        )


def load_source_policy(config: Any, reason: str) -> Any:
    """LeRobot's own policy of the source checkpoint (`fallback: eager`), said once in the log."""
    from lerobot.policies.factory import get_policy_class

    path = config.source_checkpoint
    if not path or not (Path(path) / "config.json").is_file():
        raise ArtifactRefused(
            f"{reason}; and fallback 'eager' needs the source checkpoint, but {path!r} is not a checkpoint "
            "folder here"
        )
    _log.warning(
        "lerobot_policy_hotloop: %s; running the source checkpoint %s with LeRobot's own %s policy instead "
        "(fallback: eager)",
        reason,
        path,
        config.source_type,
    )
    policy = get_policy_class(config.source_type).from_pretrained(path)
    return policy


def load(folder: Path, config: Any) -> tuple[Any, Any]:
    """(engine, None) for the compiled plan, or (None, LeRobot's source policy) under `fallback: eager`."""
    check_folder(folder)
    check_lerobot_files(folder)  # before any fallback: LeRobot reads these files whichever runs
    check_action(folder, config)
    try:
        engine = load_engine(folder)
        check_plan_matches(folder, config, engine)
    except ArtifactRefused as refused:
        if config.fallback != "eager":
            raise
        return None, load_source_policy(config, refused.reason)
    return engine, None


__all__ = ["load"]
