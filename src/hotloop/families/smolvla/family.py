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

from hotloop.errors import ConfigError
from hotloop.families.protocol import (
    Capabilities,
    LoopSpec,
    PolicyFamily,
    Runner,
    Signature,
    StageSpec,
    SubEngine,
)


class SmolVLAFamily(PolicyFamily):
    name: ClassVar[str] = "smolvla"
    lerobot_types: ClassVar[tuple[str, ...]] = ("smolvla",)
    stages: ClassVar[tuple[StageSpec, ...]] = (
        StageSpec("vision", ("vision",)),
        StageSpec("prefix", ("prefix",)),
        StageSpec(
            "denoise",
            ("denoise_step", "denoise_loop"),
            LoopSpec(step="denoise_step", loop="denoise_loop", table="time_table", row_input="time_cond"),
        ),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        rtc=True,
        prompt_buckets=True,
        step_reduction=True,
        step_distillation=True,
        recipes=("plain",),
        bucket_stages=("prefix", "denoise"),
        lean_artifact=True,
    )

    # ---- configs, shapes and models ----------------------------------------------------------------
    def config_to_dict(self, cfg: Any) -> dict[str, Any]:
        from hotloop.families.smolvla.config_io import config_to_dict

        return config_to_dict(cfg)

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.families.smolvla.config_io import config_from_dict

        return config_from_dict(data)

    def config_of(self, model: nn.Module) -> Any:
        return model.cfg

    def variant(self, cfg: Any) -> str:
        return "smolvla"

    def empty_model(self, cfg: Any) -> nn.Module:
        from hotloop.models.smolvla import SmolVLAModel

        with torch.device("meta"):
            return SmolVLAModel(cfg)

    def default_shape(self, cfg: Any, batch: int = 1) -> Any:
        from hotloop.families.smolvla.engines import SmolVLAEngineShape

        return SmolVLAEngineShape.of(cfg, batch)

    def shape_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.families.smolvla.engines import SmolVLAEngineShape

        return SmolVLAEngineShape(**data)

    # ---- sub-engines and the sampler ---------------------------------------------------------------
    def build_subengines(
        self, model: nn.Module, shape: Any, dtype: torch.dtype, recipe: str = "plain"
    ) -> dict[str, SubEngine]:
        from hotloop.families.smolvla.engines import build_smolvla_subengines

        if recipe != "plain":
            raise ConfigError(f"the SmolVLA family has the plain recipe only (got {recipe!r})")
        return build_smolvla_subengines(model, shape, dtype)  # type: ignore[arg-type]

    def pipeline(
        self,
        cfg: Any,
        shape: Any,
        runners: Mapping[str, Runner],
        constants: Mapping[str, Tensor],
        signatures: Mapping[str, Signature],
    ) -> Any:
        from hotloop.families.smolvla.pipeline import SmolVLAPipeline

        return SmolVLAPipeline(cfg, shape, runners, constants, signatures)

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

    def stack(self, observations: list[Any]) -> Any:
        from hotloop.families.smolvla.observation import stack

        return stack(observations)

    def select(self, obs: Any, index: slice | list[int]) -> Any:
        from hotloop.families.smolvla.observation import select

        return select(obs, index)

    def batch_size(self, obs: Any) -> int:
        return int(obs.batch)

    # ---- policies, data and measurement ------------------------------------------------------------
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

    # ---- reference runs ----------------------------------------------------------------------------
    def reference_inputs(self, cfg: Any, inputs: Mapping[str, Any], reference: Any) -> tuple[Any, Tensor]:
        """inputs.npz (LeRobot's model-space batch) with the prompt padded to the engine's slots, and
        noise.npy."""
        from hotloop.families.smolvla.reference_inputs import reference_observation

        obs = reference_observation(
            cfg, dict(inputs), reference.where("inputs.npz"), cfg.tokenizer.max_length
        )
        noise = reference.array("noise.npy")
        if noise is None:
            raise ConfigError(f"{reference.folder}: noise.npy is missing (the sampler's starting noise)")
        return obs, torch.from_numpy(noise).float()

    def reference_actions(self, cfg: Any, actions: Tensor) -> Tensor:
        """actions.npy holds predict_action_chunk's output: cropped to the action dimension."""
        return actions[..., : cfg.action_dim]

    # ---- prompt buckets ----------------------------------------------------------------------------
    def prompt_length(self, obs: Any) -> int:
        from hotloop.families.buckets import prompt_length

        return prompt_length(obs.lang_masks)

    def reshape_subengines(
        self, cfg: Any, engines: Mapping[str, SubEngine], prompt_slots: int
    ) -> dict[str, SubEngine]:
        from hotloop.families.smolvla.engines import reshape_subengines

        return reshape_subengines(cfg, engines, prompt_slots)

    def fill_prompt(self, obs: Any, slots: int) -> Any:
        masks = obs.lang_masks.clone()
        masks[:, slots:] = False
        if not bool(masks.any()):
            masks[:, 0] = True
        return dataclasses.replace(obs, lang_masks=masks)

    def with_prompt_slots(self, shape: Any, slots: int) -> Any:
        return dataclasses.replace(shape, prompt_slots=slots)


__all__ = ["SmolVLAFamily"]
