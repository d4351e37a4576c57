"""A loaded SmolVLA artifact behind the `Policy` protocol: `SmolVLAPolicy` (same preprocessing, noise
stream and postprocessing) with the sampling done by the compiled engine. The checkpoint's processors
are re-read from the folder the manifest names; a named target's policy needs none."""

from __future__ import annotations

from typing import Any

from hotloop.errors import CheckpointError
from hotloop.families.smolvla.policy import PolicySettings, SmolVLAPolicy


def settings_from_info(info: dict[str, Any]) -> PolicySettings:
    """The policy settings the manifest's `policy` entry describes."""
    checkpoint = info.get("checkpoint")
    if checkpoint:
        from pathlib import Path

        from hotloop.families.smolvla.settings import checkpoint_settings

        folder = Path(checkpoint)
        if not folder.is_dir():
            raise CheckpointError(
                f"the artifact's policy reads its processors from the checkpoint folder {folder}, which is "
                "gone; compile again from a checkpoint that stays in place"
            )
        return checkpoint_settings(folder)
    try:
        sizes = {str(k): (int(v[0]), int(v[1])) for k, v in dict(info["camera_sizes"]).items()}
        return PolicySettings(
            camera_sizes=sizes,
            default_prompt_tokens=tuple(int(i) for i in info.get("default_prompt_tokens") or ()),
            action_meaning=str(info.get("action_meaning", "any")),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CheckpointError(f"the artifact's SmolVLA policy entry is malformed ({exc})") from None


def engine_policy(engine: Any, info: dict[str, Any], seed: int = 0) -> SmolVLAPolicy:
    import dataclasses

    # `zero-noise` (a recipe step) is the artifact's, not the checkpoint's: read from the manifest either way
    settings = dataclasses.replace(settings_from_info(info), zero_noise=bool(info.get("zero_noise", False)))
    return SmolVLAPolicy(engine.model, engine.cfg, settings, seed=seed, engine=engine)
