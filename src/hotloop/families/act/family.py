"""LeRobot's ACT behind the family protocol (`hotloop.families.protocol`).

Stages: backbone (the ResNet on every camera, one sub-engine `backbone` taking `image_i` and answering
`features_i`) -> transformer (one pass: `features_i`, state, env state -> the chunk in model space). No
loop and no noise. The modules live in `engines.py`, the work model in `roofline.py`, the policy (raw robot
units in and out through the checkpoint's processors) in `policy.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.adapter import FamilyAdapter, FamilyParts
from hotloop.families.batching import to_device
from hotloop.families.protocol import Capabilities, StageSpec
from hotloop.families.stages import one_engine


class ActFamily(FamilyAdapter):
    name: ClassVar[str] = "act"
    lerobot_types: ClassVar[tuple[str, ...]] = ("act",)
    stages: ClassVar[tuple[StageSpec, ...]] = (one_engine("backbone"), one_engine("transformer"))
    # Pruning: the transformer's feed-forward neurons (`compression.py`); no loop, so no step reduction.
    capabilities: ClassVar[Capabilities] = Capabilities(pruning=True)

    def parts(self) -> FamilyParts:
        from hotloop.families.act.engines import ActEngineShape, ActPipeline, build_subengines
        from hotloop.models.act import ACTModel

        return FamilyParts(ACTModel, ActEngineShape, ActPipeline, {"plain": build_subengines})

    # ---- configs -----------------------------------------------------------------------------------
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

    def variant(self, cfg: Any) -> str:
        return "act"

    # ---- the sampler -------------------------------------------------------------------------------
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

        return to_device(example_observation(cfg, shape), device)

    def random_observation(self, cfg: Any, shape: Any, seed: int) -> Any:
        from hotloop.families.act.engines import example_observation

        return example_observation(cfg, shape, seed + 1)

    def noise_shape(self, cfg: Any, shape: Any, batch: int) -> tuple[int, ...]:
        return (batch, 0)  # deterministic at inference: the VAE latent is zero

    def validate_observation(self, cfg: Any, shape: Any, obs: Any) -> Any:
        from hotloop.families.act.engines import validate_observation

        return validate_observation(cfg, shape, obs)

    # ---- policies, compression and measurement -----------------------------------------------------
    def engine_policy(self, engine: Any, info: dict[str, Any], seed: int) -> Any:
        from hotloop.families.act.policy import engine_policy

        return engine_policy(engine, info)  # deterministic: no seed to use

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
