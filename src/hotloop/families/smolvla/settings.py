"""What a SmolVLA checkpoint folder's policy needs beside its model, read once from the folder: the saved
processors, the cameras' raw sizes, the RTC settings."""

from __future__ import annotations

from pathlib import Path

from hotloop.errors import CheckpointError
from hotloop.families.smolvla.policy import PolicySettings


def checkpoint_settings(folder: Path) -> PolicySettings:
    """Processors (a missing or corrupt tokenizer folder is a CheckpointError naming it), raw camera sizes
    from config.json's input_features, its rtc_config; LeRobot checkpoints act in raw robot units."""
    from hotloop.families.smolvla.rtc import read_rtc_settings
    from hotloop.lerobot.processors import read_policy_processors
    from hotloop.lerobot.steps import Tokenize
    from hotloop.models.checkpoint_meta import Fields, read_json_object
    from hotloop.models.smolvla_config import read_smolvla_config

    folder = Path(folder)
    cfg = read_smolvla_config(folder)
    pre, post = read_policy_processors(folder)
    if not pre.find(Tokenize):
        raise CheckpointError(
            f"{pre.file}: no tokenizer_processor step; SmolVLA's prompt needs the checkpoint's tokenizer"
        )
    meta = Fields(read_json_object(folder / "config.json"), folder / "config.json")
    features = meta.obj("input_features")
    sizes: dict[str, tuple[int, int]] = {}
    for key in cfg.camera_keys:
        feature = features.obj(key) if features is not None else None
        shape = feature.numbers("shape") if feature is not None else None
        if shape is None or len(shape) != 3:
            raise CheckpointError(f"{meta.file}: field 'input_features.{key}.shape' must be [C, H, W]")
        sizes[key] = (int(shape[1]), int(shape[2]))
    return PolicySettings(sizes, (pre, post), read_rtc_settings(meta), (), "absolute")
