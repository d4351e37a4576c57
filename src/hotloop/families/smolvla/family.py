"""SmolVLA behind the family protocol (`hotloop.families.protocol`).

Stages: vision -> prefix (fills the K/V the expert reads; prompt buckets apply) -> denoise (the step engine
once per row of the time table, or the unrolled loop as one graph). This class only says which of the
modules beside it is which.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from hotloop.families.adapter import FamilyAdapter, FamilyParts
from hotloop.families.flow import VLM_FLOW_CAPABILITIES, VLM_FLOW_STAGES
from hotloop.families.protocol import Capabilities, Signature, StageSpec, SubEngine


class SmolVLAFamily(FamilyAdapter):
    name: ClassVar[str] = "smolvla"
    lerobot_types: ClassVar[tuple[str, ...]] = ("smolvla",)
    stages: ClassVar[tuple[StageSpec, ...]] = VLM_FLOW_STAGES
    capabilities: ClassVar[Capabilities] = dataclasses.replace(
        VLM_FLOW_CAPABILITIES, lean_artifact=True, vision_resolution=True, distillation=True
    )

    def parts(self) -> FamilyParts:
        from hotloop.families.smolvla.engines import SmolVLAEngineShape, build_smolvla_subengines
        from hotloop.families.smolvla.pipeline import SmolVLAPipeline
        from hotloop.models.smolvla import SmolVLAModel

        return FamilyParts(
            SmolVLAModel, SmolVLAEngineShape, SmolVLAPipeline, {"plain": build_smolvla_subengines}
        )

    # ---- configs -----------------------------------------------------------------------------------
    def config_to_dict(self, cfg: Any) -> dict[str, Any]:
        from hotloop.families.smolvla.config_io import config_to_dict

        return config_to_dict(cfg)

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.families.smolvla.config_io import config_from_dict

        return config_from_dict(data)

    def variant(self, cfg: Any) -> str:
        return "smolvla"

    # ---- signatures and the sampler ----------------------------------------------------------------
    def signatures(self, cfg: Any) -> dict[str, Signature]:
        from hotloop.families.smolvla.engines import signatures

        return signatures(cfg)

    def sample_actions(
        self, model: nn.Module, obs: Any, noise: Tensor, num_steps: int | None = None
    ) -> Tensor:
        from hotloop.families.smolvla.sampling import sample_actions

        return sample_actions(model, obs, noise, num_steps)  # type: ignore[arg-type]

    # ---- observations ------------------------------------------------------------------------------
    def example_observation(self, cfg: Any, shape: Any, device: torch.device | str = "cpu") -> Any:
        from hotloop.families.smolvla.observation import example_observation

        return example_observation(cfg, shape.batch, shape.prompt_slots, device)

    def random_observation(self, cfg: Any, shape: Any, seed: int) -> Any:
        from hotloop.families.smolvla.observation import random_observation

        return random_observation(cfg, shape.batch, shape.prompt_slots, seed)

    def noise_shape(self, cfg: Any, shape: Any, batch: int) -> tuple[int, ...]:
        return (batch, cfg.chunk_size, cfg.max_action_dim)

    def validate_observation(self, cfg: Any, shape: Any, obs: Any) -> Any:
        from hotloop.families.smolvla.observation import validate_observation

        return validate_observation(cfg, shape, obs)

    # ---- policies, compression and measurement -----------------------------------------------------
    def engine_policy(self, engine: Any, info: dict[str, Any], seed: int) -> Any:
        from hotloop.families.smolvla.engine_policy import engine_policy

        return engine_policy(engine, info, seed)

    def stage_work(self, cfg: Any, shape: Any, precisions: Mapping[str, str]) -> dict[str, Any]:
        from hotloop.families.smolvla.roofline import smolvla_stage_work

        work = smolvla_stage_work(cfg, dict(precisions), shape.batch, shape.prompt_slots, shape.num_steps)
        return {stage: w.to_dict() for stage, w in work.items()}

    def compression(self) -> Any:
        from hotloop.families.smolvla.compression import SmolVLACompression

        return SmolVLACompression()

    # ---- reference runs and prompt buckets ---------------------------------------------------------
    def reference_inputs(self, cfg: Any, inputs: Mapping[str, Any], reference: Any) -> tuple[Any, Tensor]:
        """inputs.npz (LeRobot's model-space batch) with the prompt padded to the engine's slots, and
        noise.npy."""
        from hotloop.families.smolvla.reference_inputs import reference_observation

        obs = reference_observation(
            cfg, dict(inputs), reference.where("inputs.npz"), cfg.tokenizer.max_length
        )
        return obs, reference.starting_noise()

    def reference_actions(self, cfg: Any, actions: Tensor) -> Tensor:
        """actions.npy holds predict_action_chunk's output: cropped to the action dimension."""
        return actions[..., : cfg.action_dim]

    def reshape_subengines(
        self, cfg: Any, engines: Mapping[str, SubEngine], prompt_slots: int
    ) -> dict[str, SubEngine]:
        from hotloop.families.smolvla.engines import reshape_subengines

        return reshape_subengines(cfg, engines, prompt_slots)


__all__ = ["SmolVLAFamily"]
