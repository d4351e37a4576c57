"""`HotloopConfig` (type "hotloop"): what `ART/config.json` of a hotloop artifact holds for LeRobot.

`hotloop compile CKPT -o ART` writes it (`hotloop.lerobot.plugin_files.plugin_config`): the source
checkpoint's features and the numbers its action-queue semantics need. Every key is a field here, so
LeRobot's parser reads it like any policy config, and `--policy.<field>=...` overrides work beside
`--policy.path=ART` (for example `--policy.fallback=eager`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lerobot.configs.policies import PreTrainedConfig

from hotloop.lerobot.plugin_files import PLUGIN_FAMILIES, PLUGIN_TYPE
from lerobot_policy_hotloop.errors import ArtifactRefused

FALLBACKS = ("none", "eager")


@PreTrainedConfig.register_subclass(PLUGIN_TYPE)
@dataclass
class HotloopConfig(PreTrainedConfig):
    """A compiled hotloop plan of a LeRobot checkpoint (`input_features` / `output_features` are the
    source checkpoint's; `n_obs_steps` its observation history)."""

    # The source checkpoint's LeRobot type: picks the action-queue semantics (act, diffusion, smolvla).
    source_type: str = ""
    # Where the checkpoint was compiled from: what `fallback: eager` runs with LeRobot's own policy class.
    source_checkpoint: str | None = None
    # Actions one inference returns (ACT / SmolVLA chunk_size, Diffusion horizon) and how many run.
    chunk_size: int = 1
    n_action_steps: int = 1
    # ACT's temporal ensembling (LeRobot's ACTTemporalEnsembler); None: the n_action_steps queue.
    temporal_ensemble_coeff: float | None = None
    # The hotloop release that compiled the artifact (the manifest's check names a mismatch).
    hotloop_version: str = ""
    # "none": a plan that cannot run here stops the command with one line. "eager": run the source
    # checkpoint with LeRobot's own policy class instead, said once in the log.
    fallback: str = "none"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.fallback not in FALLBACKS:
            raise ArtifactRefused(
                f"field 'fallback' is {self.fallback!r}; use 'none' (refuse) or 'eager' (run the source "
                "checkpoint with LeRobot's own policy), e.g. --policy.fallback=eager"
            )
        if self.source_type not in PLUGIN_FAMILIES:
            raise ArtifactRefused(
                f"field 'source_type' is {self.source_type!r}; the plugin runs plans of "
                f"{', '.join(PLUGIN_FAMILIES)} checkpoints (recompile with `hotloop compile CKPT -o ART`)"
            )
        for name in ("chunk_size", "n_action_steps", "n_obs_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArtifactRefused(f"field {name!r} must be an integer >= 1 (got {value!r})")
        if self.n_action_steps > self.chunk_size:
            raise ArtifactRefused(
                f"field 'n_action_steps' is {self.n_action_steps}, more than chunk_size {self.chunk_size}"
            )

    # ---- what LeRobot's training asks of a config: a compiled plan is for inference only -------------
    @property
    def observation_delta_indices(self) -> list[int] | None:
        return None

    @property
    def action_delta_indices(self) -> list[int]:
        return list(range(self.chunk_size))

    @property
    def reward_delta_indices(self) -> None:
        return None

    def get_optimizer_preset(self) -> Any:
        raise ArtifactRefused(
            "a hotloop artifact is a compiled plan for inference; train the source checkpoint "
            f"({self.source_checkpoint}) and compile it again"
        )

    def get_scheduler_preset(self) -> Any:
        return self.get_optimizer_preset()

    def validate_features(self) -> None:
        if not self.output_features or "action" not in self.output_features:
            raise ArtifactRefused("field 'output_features' has no 'action'; recompile the artifact")


__all__ = ["HotloopConfig"]
