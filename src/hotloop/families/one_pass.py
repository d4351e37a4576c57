"""The engine shape and the pipeline of a family that predicts its chunk in one pass (ACT, the toy MLP):
no loop stage and no denoising steps, only a batch, and the sub-engines run once each in stage order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families.pipeline import StagePipeline
from hotloop.families.protocol import PositiveShape, run_subengine
from hotloop.measure.stages import null_timer


@dataclass(frozen=True)
class OnePassShape(PositiveShape):
    """The fixed shape of a one-pass family's engines: only the batch (the rest comes from its config).
    `num_steps` is 1: there are no steps to change."""

    batch: int
    num_steps: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_steps != 1:
            raise ConfigError(
                f"the policy predicts its chunk in one pass: it has no denoising steps to change "
                f"(num_steps is 1, got {self.num_steps!r})"
            )

    @classmethod
    def of(cls, cfg: Any, batch: int = 1) -> OnePassShape:
        return cls(batch=batch)


class OnePassPipeline(StagePipeline):
    """The runners of `stages` (one sub-engine each) run once each, in order, each timed as its stage; the
    last answers `actions`. A family's subclass names its stages and how an observation becomes the first
    inputs."""

    def inputs(self, obs: Any) -> dict[str, Tensor]:
        """The observation's tensors under the first sub-engine's input names."""
        raise NotImplementedError

    @torch.no_grad()
    def sample(self, obs: Any, noise: Tensor | None = None, timer: Any = None) -> Tensor:
        timer = timer if timer is not None else null_timer()
        values = self.inputs(obs)
        for stage in self.stages:
            with timer.stage(stage.name):
                name = self.runs[stage.name]
                run_subengine(self.runners[name], self.signatures[name], values)
        return values["actions"]
