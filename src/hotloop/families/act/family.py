"""LeRobot's ACT behind the family protocol (`hotloop.families.protocol`).

Stages: backbone (the ResNet on every camera, one sub-engine `backbone` taking `image_i` and answering
`features_i`) -> transformer (one pass: `features_i`, state, env state -> the chunk in model space). No
loop and no noise. The modules live in `engines.py`, the work model in `roofline.py`, the policy (raw robot
units in and out through the checkpoint's processors) in `policy.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.protocol import Capabilities, PolicyFamily, Runner, Signature, StageSpec, SubEngine


class ActFamily(PolicyFamily):
    name: ClassVar[str] = "act"
    lerobot_types: ClassVar[tuple[str, ...]] = ("act",)
    stages: ClassVar[tuple[StageSpec, ...]] = (
        StageSpec("backbone", ("backbone",)),
        StageSpec("transformer", ("transformer",)),
    )
    # Pruning: the transformer's feed-forward neurons (`compression.py`); no loop, so no step reduction.
    capabilities: ClassVar[Capabilities] = Capabilities(pruning=True)

    # ---- configs, shapes and models ----------------------------------------------------------------
    def config_to_dict(self, cfg: Any) -> dict[str, Any]:
        return dataclasses.asdict(cfg)

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.models.act import ACTConfig

        try:
            fields = dict(data)
            fields["cameras"] = tuple(fields["cameras"])
            fields["camera_shapes"] = tuple(tuple(int(v) for v in s) for s in fields["camera_shapes"])
            fields["backbone_shapes"] = tuple(
                (str(k), tuple(int(v) for v in s)) for k, s in fields.get("backbone_shapes", ())
            )
            return ACTConfig(**fields)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"malformed ACT config in the manifest ({type(exc).__name__}: {exc})") from None

    def config_of(self, model: nn.Module) -> Any:
        return model.cfg

    def variant(self, cfg: Any) -> str:
        return "act"

    def empty_model(self, cfg: Any) -> nn.Module:
        from hotloop.models.act import ACTModel

        with torch.device("meta"):
            return ACTModel(cfg)

    def default_shape(self, cfg: Any, batch: int = 1) -> Any:
        from hotloop.families.act.engines import ActEngineShape

        return ActEngineShape(batch=batch)

    def shape_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.families.act.engines import ActEngineShape

        return ActEngineShape(**data)

    def with_steps(self, shape: Any, num_steps: int) -> Any:
        if num_steps != shape.num_steps:
            raise ConfigError("ACT predicts its chunk in one pass: it has no denoising steps to change")
        return shape

    # ---- sub-engines and the sampler ---------------------------------------------------------------
    def build_subengines(
        self, model: nn.Module, shape: Any, dtype: torch.dtype, recipe: str = "plain"
    ) -> dict[str, SubEngine]:
        from hotloop.families.act.engines import build_subengines

        if recipe != "plain":
            raise ConfigError(f"the ACT family has the plain recipe only (got {recipe!r})")
        return build_subengines(model, shape, dtype)  # type: ignore[arg-type]

    def pipeline(
        self,
        cfg: Any,
        shape: Any,
        runners: Mapping[str, Runner],
        constants: Mapping[str, Tensor],
        signatures: Mapping[str, Signature],
    ) -> Any:
        from hotloop.families.act.engines import ActPipeline

        return ActPipeline(cfg, shape, runners, signatures)

    def sample_actions(
        self, model: nn.Module, obs: Any, noise: Tensor, num_steps: int | None = None
    ) -> Tensor:
        dtype = next(model.parameters()).dtype

        def cast(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(dtype)

        with torch.no_grad():
            images = [x.to(dtype) for x in obs.images]
            return model(images, cast(obs.state), cast(obs.env_state)).float()  # type: ignore[no-any-return]

    # ---- observations ------------------------------------------------------------------------------
    def example_observation(self, cfg: Any, shape: Any, device: torch.device | str = "cpu") -> Any:
        from hotloop.families.act.engines import example_observation

        obs = example_observation(cfg, shape)
        if torch.device(device).type != "cpu":
            obs = self._to(obs, device)
        return obs

    def random_observation(self, cfg: Any, shape: Any, seed: int) -> Any:
        from hotloop.families.act.engines import example_observation

        return example_observation(cfg, shape, seed + 1)

    def noise_shape(self, cfg: Any, shape: Any, batch: int) -> tuple[int, ...]:
        return (batch, 0)  # deterministic at inference: the VAE latent is zero

    def validate_observation(self, cfg: Any, shape: Any, obs: Any) -> Any:
        from hotloop.families.act.engines import validate_observation

        return validate_observation(cfg, shape, obs)

    def stack(self, observations: list[Any]) -> Any:
        from hotloop.families.act.engines import stack

        return stack(observations)

    def select(self, obs: Any, index: slice | list[int]) -> Any:
        from hotloop.families.act.engines import select

        return select(obs, index)

    def batch_size(self, obs: Any) -> int:
        return int(obs.batch)

    @staticmethod
    def _to(obs: Any, device: torch.device | str) -> Any:
        from hotloop.families.act.engines import ActObservation

        return ActObservation(
            tuple(x.to(device) for x in obs.images),
            None if obs.state is None else obs.state.to(device),
            None if obs.env_state is None else obs.env_state.to(device),
        )

    # ---- policies, data and measurement ------------------------------------------------------------
    def engine_policy(self, engine: Any, info: dict[str, Any], seed: int) -> Any:
        from hotloop.families.act.policy import engine_policy

        return engine_policy(engine, info)

    def compression(self) -> Any:
        from hotloop.families.act.compression import ActCompression

        return ActCompression()

    def stage_work(self, cfg: Any, shape: Any, precisions: Mapping[str, str]) -> dict[str, Any]:
        from hotloop.families.act.roofline import act_stage_work

        return {k: w.to_dict() for k, w in act_stage_work(cfg, dict(precisions), shape.batch).items()}

    # ---- reference runs ----------------------------------------------------------------------------
    def reference_inputs(self, cfg: Any, inputs: Mapping[str, Any], reference: Any) -> tuple[Any, Tensor]:
        from hotloop.families.act.reference_inputs import reference_observation

        obs = reference_observation(cfg, inputs, reference.where("inputs.npz"))
        return obs, torch.zeros(self.noise_shape(cfg, None, obs.batch))


__all__ = ["ActFamily"]
