"""The toy MLP's two sub-engines (encoder, head), the shape they are built for and their pipeline.

    encoder(state (B, state_dim)) -> hidden      head(hidden) -> actions (B, horizon, action_dim)

Each engine casts its input to its own weights' dtype; the head answers float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.examples import model_in, run_examples
from hotloop.families.one_pass import OnePassPipeline, OnePassShape
from hotloop.families.protocol import Signature, SubEngine
from hotloop.families.stages import one_engine
from hotloop.families.toy.policy import ToyObservation
from hotloop.models.toy import ToyConfig, ToyMLPPolicy

SIGNATURES = {"encoder": Signature(("state",), ("hidden",)), "head": Signature(("hidden",), ("actions",))}


@dataclass(frozen=True)
class ToyEngineShape(OnePassShape):
    """Only the batch: the toy MLP runs in one pass."""


class EncoderEngine(nn.Module):
    def __init__(self, model: ToyMLPPolicy) -> None:
        super().__init__()
        self.encoder = model.encoder

    def forward(self, state: Tensor) -> Tensor:
        first = cast(nn.Linear, self.encoder[0])
        return cast(Tensor, self.encoder(state.to(first.weight.dtype)))


class HeadEngine(nn.Module):
    def __init__(self, model: ToyMLPPolicy) -> None:
        super().__init__()
        self.head = model.head
        self.horizon, self.action_dim = model.config.horizon, model.config.action_dim

    def forward(self, hidden: Tensor) -> Tensor:
        out = self.head(hidden.to(self.head.weight.dtype))
        return out.view(hidden.shape[0], self.horizon, self.action_dim).float()


def example_observation(cfg: ToyConfig, shape: ToyEngineShape, seed: int = 0) -> ToyObservation:
    g = torch.Generator().manual_seed(seed)
    return ToyObservation(torch.randn(shape.batch, cfg.state_dim, generator=g))


def build_subengines(model: ToyMLPPolicy, shape: ToyEngineShape, dtype: torch.dtype) -> dict[str, SubEngine]:
    """Both engines of `model` for `shape` in `dtype` (the model copied when its dtype differs), with
    example inputs taken from a run on the example observation."""
    model = cast(ToyMLPPolicy, model_in(model, dtype))
    modules: dict[str, nn.Module] = {"encoder": EncoderEngine(model).eval(), "head": HeadEngine(model).eval()}
    return run_examples(modules, SIGNATURES, {"state": example_observation(model.config, shape).state})


class ToyPipeline(OnePassPipeline):
    """encoder -> head, each timed as its stage."""

    family = "toy"
    stages = (one_engine("encoder"), one_engine("head"))

    def inputs(self, obs: ToyObservation) -> dict[str, Tensor]:
        want = (self.shape.batch, self.cfg.state_dim)
        if tuple(obs.state.shape) != want:
            raise ConfigError(f"state has shape {tuple(obs.state.shape)}; this engine takes {want}")
        return {"state": obs.state}
