"""The files that let LeRobot's own loop load an artifact (`--policy.path=ART`, the `lerobot_policy_hotloop`
plugin in `plugins/`): written into every artifact compiled or compressed from a LeRobot checkpoint.

    ART/config.json                  {"type": "hotloop", ...}: every key a field of the plugin's HotloopConfig
    ART/policy_preprocessor*.json    the checkpoint's processor pipelines and their state files, verbatim,
    ART/policy_postprocessor*...     so that LeRobot normalises (and tokenises) exactly as before
    ART/<artifact folders>           folders a pipeline names as its `artifacts` (LeRobot >= 0.5: the tokenizer)

They are ordinary artifact files: the manifest lists each with its sha256, so the plugin's load refuses a
changed one like any other. hotloop itself never reads them (its own commands read the manifest), and an
artifact stays an artifact: `hotloop.targets.find_target` looks for `manifest.json` before `config.json`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import hotloop
from hotloop.errors import CheckpointError
from hotloop.models.checkpoint_meta import read_json_object

PLUGIN_TYPE = "hotloop"
CONFIG_FILE = "config.json"
# The families whose LeRobot queue semantics the plugin reproduces (lerobot_policy_hotloop.families).
PLUGIN_FAMILIES = ("act", "diffusion", "smolvla")
# The checkpoint's field that holds the length of the chunk one inference returns, per family.
_CHUNK_FIELD = {"act": "chunk_size", "diffusion": "horizon", "smolvla": "chunk_size"}


def checkpoint_of(policy: dict[str, Any]) -> Path | None:
    """The LeRobot checkpoint folder a policy entry was built from (None: not a checkpoint target)."""
    folder = policy.get("checkpoint")
    if not isinstance(folder, str) or not folder:
        return None
    path = Path(folder)
    return path if (path / CONFIG_FILE).is_file() else None


def plugin_config(family: str, checkpoint: Path) -> dict[str, Any]:
    """ART/config.json for a plan of `family` compiled from `checkpoint`: the source's features and the
    numbers its queue semantics need. The keys are HotloopConfig's fields (the plugin's test checks it)."""
    where = checkpoint / CONFIG_FILE
    source = read_json_object(where)
    missing = [k for k in ("type", "input_features", "output_features") if k not in source]
    if missing:
        raise CheckpointError(f"{where}: field {missing[0]!r} is missing; LeRobot writes it, re-save it")
    chunk = source.get(_CHUNK_FIELD[family])
    n_action_steps = source.get("n_action_steps")
    for key, value in ((_CHUNK_FIELD[family], chunk), ("n_action_steps", n_action_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"{where}: field {key!r} must be an integer >= 1 (got {value!r})")
    return {
        "type": PLUGIN_TYPE,
        "n_obs_steps": int(source.get("n_obs_steps", 1)),
        "input_features": source["input_features"],
        "output_features": source["output_features"],
        # The compiled plan runs on this machine's CPU; LeRobot moves the batch to this device.
        "device": "cpu",
        "source_type": str(source["type"]),
        "source_checkpoint": str(checkpoint.resolve()),
        "chunk_size": chunk,
        "n_action_steps": n_action_steps,
        "temporal_ensemble_coeff": source.get("temporal_ensemble_coeff"),
        "hotloop_version": hotloop.__version__,
        "fallback": "none",
    }


def processor_files(checkpoint: Path) -> list[Path]:
    """The checkpoint's processor pipelines (`policy_*processor*` files: JSON and state files) and the
    folders the pipelines name as artifacts, as paths relative to `checkpoint`."""
    files = sorted(p for p in checkpoint.glob("policy_*processor*") if p.is_file())
    if not any(p.suffix == ".json" for p in files):
        raise CheckpointError(
            f"{checkpoint}: no policy_preprocessor.json / policy_postprocessor.json; LeRobot's loop needs the "
            "checkpoint's processors (save them with the policy)"
        )
    folders: list[Path] = []
    for pipeline in (p for p in files if p.suffix == ".json"):
        for step in read_json_object(pipeline).get("steps", []):
            artifacts = step.get("artifacts") if isinstance(step, dict) else None
            for rel in (artifacts or {}).values():
                path = Path(str(rel))
                if path.is_absolute() or ".." in path.parts or not (checkpoint / path).is_dir():
                    continue  # not a folder inside the checkpoint: LeRobot resolves it as the source did
                folders.append(path)
    return [p.relative_to(checkpoint) for p in files] + sorted(set(folders))


def write_plugin_files(root: Path, family: str, policy: dict[str, Any]) -> list[str]:
    """Write config.json and copy the processor files into the artifact folder `root` being assembled;
    nothing for a family the plugin does not run or a source that is not a LeRobot checkpoint."""
    checkpoint = checkpoint_of(policy)
    if family not in PLUGIN_FAMILIES or checkpoint is None:
        return []
    config = plugin_config(family, checkpoint)
    written = [CONFIG_FILE]
    (root / CONFIG_FILE).write_text(json.dumps(config, indent=4) + "\n")
    for rel in processor_files(checkpoint):
        src, dst = checkpoint / rel, root / rel
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copyfile(src, dst)
        written.append(str(rel))
    return written


__all__ = ["PLUGIN_FAMILIES", "PLUGIN_TYPE", "plugin_config", "processor_files", "write_plugin_files"]
