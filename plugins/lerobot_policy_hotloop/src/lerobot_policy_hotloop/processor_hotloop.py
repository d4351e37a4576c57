"""The processors of a hotloop artifact are the source checkpoint's, copied verbatim into ART by
`hotloop compile` (`policy_preprocessor.json`, `policy_postprocessor.json` and their state files).

LeRobot loads them itself whenever it has a pretrained path (`make_pre_post_processors(cfg,
pretrained_path=ART, preprocessor_overrides=...)`, as `lerobot-eval` does, with its `device_processor` and
`rename_observations_processor` overrides). It calls this factory only without one: then the artifact the
config was loaded from is that path, and the same files are read the same way.
"""

from __future__ import annotations

from typing import Any

from lerobot_policy_hotloop.configuration_hotloop import HotloopConfig
from lerobot_policy_hotloop.errors import ArtifactRefused


def make_hotloop_pre_post_processors(
    config: HotloopConfig, dataset_stats: dict[str, Any] | None = None
) -> tuple[Any, Any]:
    from lerobot.processor import PolicyProcessorPipeline
    from lerobot.processor.converters import (
        batch_to_transition,
        policy_action_to_transition,
        transition_to_batch,
        transition_to_policy_action,
    )
    from lerobot.utils.constants import POLICY_POSTPROCESSOR_DEFAULT_NAME, POLICY_PREPROCESSOR_DEFAULT_NAME

    if config.pretrained_path is None:
        raise ArtifactRefused(
            "a hotloop policy's processors are its source checkpoint's, saved in the artifact: load the "
            "policy with --policy.path=ART"
        )
    if dataset_stats is not None:
        raise ArtifactRefused(
            "a hotloop artifact normalises with the statistics compiled into it; dataset statistics are for "
            "training the source checkpoint"
        )
    pre = PolicyProcessorPipeline.from_pretrained(
        pretrained_model_name_or_path=str(config.pretrained_path),
        config_filename=f"{POLICY_PREPROCESSOR_DEFAULT_NAME}.json",
        to_transition=batch_to_transition,
        to_output=transition_to_batch,
    )
    post = PolicyProcessorPipeline.from_pretrained(
        pretrained_model_name_or_path=str(config.pretrained_path),
        config_filename=f"{POLICY_POSTPROCESSOR_DEFAULT_NAME}.json",
        to_transition=policy_action_to_transition,
        to_output=transition_to_policy_action,
    )
    return pre, post


__all__ = ["make_hotloop_pre_post_processors"]
