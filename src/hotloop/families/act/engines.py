"""ACT's two sub-engines, the shape they are built for, the observation they take, and their pipeline.

    backbone(image_0, ..., image_{n-1})                          -> features_0, ..., features_{n-1}
    transformer(features_0, ..., features_{n-1}[, state][, env_state]) -> actions (B, chunk, action_dim)

The backbone runs LeRobot's loop over the cameras inside one graph (the ResNet's weights are shared, one
camera after the other), so each camera is an input of its own shape and cameras of different sizes work.
The transformer is the rest of the inference path (projections, 2-D sinusoids, encoder, decoder, action
head) in one pass. There is no loop stage and no noise: at inference the VAE latent is zero, so ACT is
deterministic (`noise_shape` is (batch, 0)).

Every engine casts its inputs to its own weights' dtype and answers float32, so engines of different
precisions chain without a dtype contract between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.batching import batch_size
from hotloop.families.examples import model_in, run_examples
from hotloop.families.inputs import check_finite, check_kind, to_tensor
from hotloop.families.one_pass import OnePassPipeline, OnePassShape
from hotloop.families.protocol import Signature, SubEngine
from hotloop.families.stages import one_engine
from hotloop.models.act import ACTConfig, ACTModel


@dataclass(frozen=True)
class ActEngineShape(OnePassShape):
    """The fixed shape of a set of ACT engines: only the batch (image sizes and the chunk come from the
    checkpoint's config). `num_steps` is 1: ACT runs in one pass."""


@dataclass
class ActObservation:
    """Model-space inputs, as LeRobot's preprocessor outputs them: one (B, C, H, W) image per camera in
    the config's camera order, normalised; the state (B, state_dim) and env state (B, env_dim), normalised,
    or None when the checkpoint has none."""

    images: tuple[Tensor, ...]
    state: Tensor | None = None
    env_state: Tensor | None = None

    @property
    def batch(self) -> int:
        return batch_size(self)


def image_names(cfg: ACTConfig) -> tuple[str, ...]:
    return tuple(f"image_{i}" for i in range(len(cfg.cameras)))


def feature_names(cfg: ACTConfig) -> tuple[str, ...]:
    return tuple(f"features_{i}" for i in range(len(cfg.cameras)))


def vector_inputs(cfg: ACTConfig) -> tuple[tuple[str, int], ...]:
    """(name, width) of the 1-D inputs the checkpoint takes, in the transformer's argument order."""
    out = []
    if cfg.state_dim is not None:
        out.append(("state", cfg.state_dim))
    if cfg.env_state_dim is not None:
        out.append(("env_state", cfg.env_state_dim))
    return tuple(out)


def signatures(cfg: ACTConfig) -> dict[str, Signature]:
    """The names are the contract: `features_i` produced by the backbone feed the transformer."""
    vectors = tuple(n for n, _ in vector_inputs(cfg))
    return {
        "backbone": Signature(image_names(cfg), feature_names(cfg)),
        "transformer": Signature((*feature_names(cfg), *vectors), ("actions",)),
    }


def observation_inputs(cfg: ACTConfig) -> tuple[str, ...]:
    """Every input an observation feeds, in validation order (engine input names)."""
    return (*image_names(cfg), *(n for n, _ in vector_inputs(cfg)))


class BackboneEngine(nn.Module):
    """LeRobot's loop over cameras: the shared ResNet trunk on each image, in config order."""

    def __init__(self, model: ACTModel) -> None:
        super().__init__()
        self.trunk = model.trunk

    def forward(self, *images: Tensor) -> tuple[Tensor, ...]:
        dtype = self.trunk.conv1.weight.dtype
        return tuple(cast(Tensor, self.trunk(x.to(dtype))).float() for x in images)


class TransformerEngine(nn.Module):
    """Feature maps (one per camera) and the 1-D inputs -> the chunk (B, chunk, action_dim), float32."""

    def __init__(self, model: ACTModel) -> None:
        super().__init__()
        self.model = model
        cfg = model.cfg
        self.n_cameras = len(cfg.cameras)
        self.has_state = cfg.state_dim is not None
        self.has_env = cfg.env_state_dim is not None

    def forward(self, *inputs: Tensor) -> Tensor:
        dtype = self.model.action_head.weight.dtype
        maps = [x.to(dtype) for x in inputs[: self.n_cameras]]
        rest = list(inputs[self.n_cameras :])
        state = rest.pop(0).to(dtype) if self.has_state else None
        env = rest.pop(0).to(dtype) if self.has_env else None
        return self.model.transformer(maps, state, env).float()


def example_observation(cfg: ACTConfig, shape: ActEngineShape, seed: int = 0) -> ActObservation:
    """Seeded N(0, 1) inputs of the engine shapes (model space: what normalised inputs look like)."""
    g = torch.Generator().manual_seed(seed)
    b = shape.batch
    images = tuple(torch.randn((b, *s), generator=g) for s in cfg.camera_shapes)
    state = None if cfg.state_dim is None else torch.randn(b, cfg.state_dim, generator=g)
    env = None if cfg.env_state_dim is None else torch.randn(b, cfg.env_state_dim, generator=g)
    return ActObservation(images, state, env)


def build_subengines(model: ACTModel, shape: ActEngineShape, dtype: torch.dtype) -> dict[str, SubEngine]:
    """Both engines of `model` for `shape` in `dtype` (the model copied when its dtype differs), with
    example inputs taken from a run of the backbone on the example observation."""
    cfg = model.cfg
    if not cfg.cameras:
        raise ConfigError(
            "this ACT checkpoint has no camera (its input_features hold no VISUAL feature), so it has no "
            "backbone stage to build; hotloop runs it eagerly (eval, serve, verify) but compiles ACT with cameras"
        )
    model = cast(ACTModel, model_in(model, dtype))
    modules: dict[str, nn.Module] = {
        "backbone": BackboneEngine(model).eval(),
        "transformer": TransformerEngine(model).eval(),
    }
    return run_examples(modules, signatures(cfg), observation_values(cfg, example_observation(cfg, shape)))


def observation_values(cfg: ACTConfig, obs: ActObservation) -> dict[str, Tensor]:
    """The observation under the engines' input names."""
    values = dict(zip(image_names(cfg), obs.images, strict=True))
    if obs.state is not None:
        values["state"] = obs.state
    if obs.env_state is not None:
        values["env_state"] = obs.env_state
    return values


class ActPipeline(OnePassPipeline):
    """backbone -> transformer, each timed as its stage."""

    family = "ACT"
    stages = (one_engine("backbone"), one_engine("transformer"))

    def inputs(self, obs: ActObservation) -> dict[str, Tensor]:
        return observation_values(self.cfg, obs)


def validate_observation(cfg: ACTConfig, shape: ActEngineShape, obs: Any) -> ActObservation:
    """`obs` (an ActObservation, or a dict under the engine input names image_i, state, env_state) as
    the engines take it, or a ConfigError naming the input that does not fit."""
    names = observation_inputs(cfg)
    if isinstance(obs, ActObservation):
        if len(obs.images) != len(cfg.cameras):
            raise ConfigError(
                f"the observation has {len(obs.images)} image(s); this engine takes {len(cfg.cameras)} "
                f"({', '.join(cfg.cameras)})"
            )
        given: dict[str, Any] = observation_values(cfg, obs)
        for name, value in (("state", obs.state), ("env_state", obs.env_state)):
            if value is not None and name not in names:
                raise ConfigError(f"input {name!r} is given, but this checkpoint takes no {name}")
    elif isinstance(obs, dict):
        unknown = sorted(set(obs) - set(names))
        if unknown:
            raise ConfigError(f"unknown input(s) {', '.join(unknown)}; this engine takes {', '.join(names)}")
        given = dict(obs)
    else:
        raise ConfigError(f"observation must be an ActObservation or a dict of {', '.join(names)}")
    b = shape.batch
    expected: dict[str, tuple[int, ...]] = {
        n: (b, *s) for n, s in zip(image_names(cfg), cfg.camera_shapes, strict=True)
    }
    expected.update({n: (b, w) for n, w in vector_inputs(cfg)})
    checked: dict[str, Tensor] = {}
    for name in names:
        if given.get(name) is None:
            raise ConfigError(f"input {name!r} is missing; expected shape {expected[name]} (float)")
        t = to_tensor(name, given[name])
        if tuple(t.shape) != expected[name]:
            what = f" ({cfg.cameras[int(name.split('_')[1])]})" if name.startswith("image_") else ""
            raise ConfigError(
                f"input {name!r}{what} has shape {tuple(t.shape)}; this engine takes {expected[name]}"
            )
        check_kind(name, t, "float")
        check_finite(name, t)
        checked[name] = t
    return ActObservation(
        tuple(checked[n] for n in image_names(cfg)), checked.get("state"), checked.get("env_state")
    )


__all__ = [
    "ActEngineShape",
    "ActObservation",
    "ActPipeline",
    "BackboneEngine",
    "TransformerEngine",
    "build_subengines",
    "example_observation",
    "signatures",
    "validate_observation",
]
