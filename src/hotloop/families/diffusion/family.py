"""LeRobot's Diffusion Policy behind the family protocol (`hotloop.families.protocol`).

Stages: encoder (the n_obs_steps history -> global conditioning) -> denoise (a loop stage: the step
engine, U-Net and scheduler update in one graph, once per row of the step table; or the unrolled loop
engine holding it as `step`). The scheduler is the config's (`noise_scheduler_type`): `steps:N` keeps
it (LeRobot's DDPM with N < num_train_timesteps inference steps is DDPM's own strided schedule), and the
family's recipe step `ddim:N` switches to DDIM with N steps (`hotloop.families.diffusion.compression`),
the step reduction hotloop recommends (docs: the sensitivity to N, `hotloop.families.diffusion.steps`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from hotloop.families.adapter import FamilyAdapter, FamilyParts
from hotloop.families.protocol import Capabilities, StageSpec
from hotloop.families.stages import loop_stage, one_engine


class DiffusionFamily(FamilyAdapter):
    name: ClassVar[str] = "diffusion"
    lerobot_types: ClassVar[tuple[str, ...]] = ("diffusion",)
    stages: ClassVar[tuple[StageSpec, ...]] = (
        one_engine("encoder"),
        loop_stage("denoise", table="step_table", row_input="step_row"),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        step_reduction=True, one_step=True, zero_noise_start=True, recipe_steps=("ddim",)
    )

    def parts(self) -> FamilyParts:
        from hotloop.families.diffusion.engines import (
            DiffusionEngineShape,
            DiffusionPipeline,
            build_diffusion_subengines,
        )
        from hotloop.models.diffusion import DiffusionModel

        return FamilyParts(
            DiffusionModel, DiffusionEngineShape, DiffusionPipeline, {"plain": build_diffusion_subengines}
        )

    # ---- configs -----------------------------------------------------------------------------------
    def config_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.families.diffusion.config_io import config_from_dict

        return config_from_dict(data)

    def variant(self, cfg: Any) -> str:
        return str(cfg.noise_scheduler_type).lower()

    # `with_steps` is the protocol's: the same scheduler for N steps (DDPM strided, DDIM's own spacing); the
    # step count is checked against the scheduler when the engines are built.

    # ---- the sampler -------------------------------------------------------------------------------
    def sample_actions(
        self, model: nn.Module, obs: Any, noise: Tensor, num_steps: int | None = None
    ) -> Tensor:
        """LeRobot's `generate_actions` without the n_action_steps slice: encode, then the config's
        scheduler stepped by `scheduler.step` (diffusers' expressions), x_T and step noise from `noise`."""
        from hotloop.families.diffusion.sampling import sample_actions

        return sample_actions(model, obs, noise, num_steps)

    # ---- observations and noise --------------------------------------------------------------------
    def example_observation(self, cfg: Any, shape: Any, device: torch.device | str = "cpu") -> Any:
        from hotloop.families.diffusion.engines import example_observation

        return example_observation(cfg, shape.batch, 0, device)

    def random_observation(self, cfg: Any, shape: Any, seed: int) -> Any:
        from hotloop.families.diffusion.engines import example_observation

        return example_observation(cfg, shape.batch, seed + 1)

    def noise_shape(self, cfg: Any, shape: Any, batch: int) -> tuple[int, ...]:
        return (batch, 1 + shape.num_steps, cfg.horizon, cfg.action_dim)

    def make_noise(self, cfg: Any, shape: Any, batch: int, generator: torch.Generator | None) -> Tensor:
        """N(0, 1) x_T and per-step variance noise, zeros on the steps the scheduler adds none."""
        from hotloop.families.diffusion.sampling import make_noise

        return make_noise(cfg, shape.num_steps, batch, generator)

    def validate_observation(self, cfg: Any, shape: Any, obs: Any) -> Any:
        from hotloop.families.diffusion.engines import validate_observation

        return validate_observation(cfg, shape, obs)

    # ---- policies, compression and measurement -----------------------------------------------------
    def engine_policy(self, engine: Any, info: dict[str, Any], seed: int) -> Any:
        from hotloop.families.diffusion.policy import engine_policy

        return engine_policy(engine, info, seed)

    def stage_work(self, cfg: Any, shape: Any, precisions: Mapping[str, str]) -> dict[str, Any]:
        from hotloop.families.diffusion.roofline import diffusion_stage_work

        return {
            stage: work.to_dict()
            for stage, work in diffusion_stage_work(cfg, shape.batch, shape.num_steps, precisions).items()
        }

    def compression(self) -> Any:
        from hotloop.families.diffusion.compression import DiffusionCompression

        return DiffusionCompression()

    # ---- reference runs ----------------------------------------------------------------------------
    def reference_inputs(self, cfg: Any, inputs: Mapping[str, Any], reference: Any) -> tuple[Any, Tensor]:
        from hotloop.families.diffusion.reference_inputs import reference_inputs

        return reference_inputs(cfg, dict(inputs), reference)

    def reference_actions(self, cfg: Any, actions: Tensor) -> Tensor:
        """LeRobot's `predict_action_chunk` returns the n_action_steps from the current observation."""
        from hotloop.models.diffusion import select_action_chunk

        return select_action_chunk(actions, cfg)


__all__ = ["DiffusionFamily"]
