"""`HotloopPolicy`: a hotloop artifact as a LeRobot policy (`--policy.path=ART`).

`from_pretrained(ART)` loads the compiled plan through hotloop's runtime (`hotloop.runtime.engine.Engine`,
which checks every file's sha256, the hotloop version and the CPU), never the source model. The batches it
receives are LeRobot's, after the source checkpoint's own preprocessor (copied into ART), and it answers as
the source family's LeRobot policy does:

- `select_action`: one (B, A) action per call, with the family's queue semantics: ACT's n_action_steps
  queue or temporal ensemble, Diffusion Policy's observation history + n_action_steps queue, SmolVLA's
  chunk queue;
- `predict_action_chunk`: (B, T, A) in normalised units (T: ACT / SmolVLA chunk_size, Diffusion
  n_action_steps from the current step);
- `reset()`: a new episode (queues, history, ensemble cleared).

With `fallback: eager` (config field, `--policy.fallback=eager`) a plan that cannot run here is replaced by
the source checkpoint under LeRobot's own policy class, which then answers every call.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lerobot.policies.pretrained import PreTrainedPolicy
from torch import Tensor

from lerobot_policy_hotloop.configuration_hotloop import HotloopConfig
from lerobot_policy_hotloop.errors import ArtifactRefused
from lerobot_policy_hotloop.queues import ActionQueue, ObservationHistory

ACTION = "action"


class HotloopPolicy(PreTrainedPolicy):
    config_class = HotloopConfig
    name = "hotloop"

    def __init__(self, config: HotloopConfig, plan: Any = None, source: Any = None, **kwargs: Any):
        super().__init__(config)
        if plan is None and source is None:
            raise ArtifactRefused(
                "a hotloop policy runs a compiled artifact: load it with --policy.path=ART (or "
                "HotloopPolicy.from_pretrained(ART)), not --policy.type=hotloop"
            )
        self.config: HotloopConfig = config
        self.plan = plan
        self.source: Any = source  # LeRobot's own policy of the source checkpoint (fallback: eager)
        self.reset()

    @classmethod
    def from_pretrained(  # type: ignore[override]
        cls, pretrained_name_or_path: str | Path, *, config: HotloopConfig | None = None, **kwargs: Any
    ) -> HotloopPolicy:
        from lerobot_policy_hotloop.compiled_plan import CompiledPlan
        from lerobot_policy_hotloop.families import BRIDGES
        from lerobot_policy_hotloop.loading import check_folder, load

        folder = Path(pretrained_name_or_path)
        check_folder(folder)
        if config is None:
            config = HotloopConfig.from_pretrained(folder)
        config.pretrained_path = folder
        engine, source = load(folder, config)
        plan = CompiledPlan(engine, BRIDGES[config.source_type]) if engine is not None else None
        policy = cls(config, plan=plan, source=source)
        policy.eval()
        return policy

    # ---- episodes ----------------------------------------------------------------------------------
    def reset(self) -> None:
        if self.source is not None:
            self.source.reset()
            return
        from hotloop.realtime.temporal_ensemble import TemporalEnsembler

        cfg = self.config
        self._actions = ActionQueue(cfg.n_action_steps)
        keys = list(cfg.input_features or {}) if self.plan.bridge.keeps_history else []
        self._history = ObservationHistory(keys, cfg.n_obs_steps)
        coeff = cfg.temporal_ensemble_coeff
        self._ensembler = TemporalEnsembler(coeff, cfg.chunk_size) if coeff is not None else None

    # ---- inference ---------------------------------------------------------------------------------
    @torch.no_grad()
    def select_action(self, batch: dict[str, Tensor], noise: Tensor | None = None, **kwargs: Any) -> Tensor:
        if self.source is not None:
            return self.source.select_action(batch, **_noise_kwarg(noise))
        batch = {k: v for k, v in batch.items() if k != ACTION}  # offline evaluation carries the target
        self._history.push(batch)
        if self._ensembler is not None:
            chunk = self._chunk(batch, noise)
            action = self._ensembler.update(chunk.cpu().numpy())
            return torch.from_numpy(action).to(chunk.device)
        return self._actions.next(lambda: self._chunk(batch, noise))

    @torch.no_grad()
    def predict_action_chunk(
        self, batch: dict[str, Tensor], noise: Tensor | None = None, **kwargs: Any
    ) -> Tensor:
        if self.source is not None:
            return self.source.predict_action_chunk(batch, **_noise_kwarg(noise))
        batch = {k: v for k, v in batch.items() if k != ACTION}
        if self._history.empty:  # called without select_action first: this observation is the history
            self._history.push(batch)
        return self._chunk(batch, noise)

    def _chunk(self, batch: Mapping[str, Tensor], noise: Tensor | None) -> Tensor:
        self._check_features(batch)
        model_batch = {**batch, **self._history.stacked()}
        return self.plan.chunk(model_batch, noise)

    def _check_features(self, batch: Mapping[str, Tensor]) -> None:
        """Every input feature of the source checkpoint is in the batch at its shape: an environment whose
        observations differ from the checkpoint's is named here, before the engine sees them."""
        where = Path(str(self.config.pretrained_path)) / "config.json"
        for key, feature in (self.config.input_features or {}).items():
            if key not in batch:
                raise ArtifactRefused(
                    f"the observation has no {key!r}, which {where} takes (input_features); it holds "
                    f"{', '.join(sorted(batch))}: map the environment's keys with --rename_map"
                )
            got = tuple(batch[key].shape[1:])
            if got != tuple(feature.shape):
                raise ArtifactRefused(
                    f"observation {key!r} has shape {got} per sample; {where} was compiled for "
                    f"{tuple(feature.shape)}: give the environment the checkpoint's observation size"
                )

    # ---- training is the source checkpoint's --------------------------------------------------------
    def forward(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict | None]:  # type: ignore[type-arg]
        raise ArtifactRefused(
            "a hotloop artifact is a compiled plan for inference; train the source checkpoint"
        )

    def get_optim_params(self) -> dict:  # type: ignore[type-arg]
        raise ArtifactRefused(
            "a hotloop artifact is a compiled plan for inference; train the source checkpoint"
        )


def _noise_kwarg(noise: Tensor | None) -> dict[str, Tensor]:
    """LeRobot's ACT takes no `noise` argument; pass one only when a caller gave it."""
    return {} if noise is None else {"noise": noise}


__all__ = ["HotloopPolicy"]
