"""pi0 / pi0.5 behind the family protocol (`hotloop.families.protocol`): the first implementation.

Stages: vision -> prefix (fills the KV cache) -> denoise (the step engine N times over the time table,
or the unrolled loop as one graph). Everything here delegates to the pi modules beside it; this class
only says which is which.
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


class PiFamily(PolicyFamily):
    name: ClassVar[str] = "pi"
    lerobot_types: ClassVar[tuple[str, ...]] = ("pi0", "pi05")
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
        one_step=True,
        pruning=True,
        distillation=True,
        qat=True,
        recipes=("plain", "fused"),
        bucket_stages=("prefix", "denoise"),
        lean_artifact=True,
    )
    lookup_tables: ClassVar[Mapping[str, str]] = {"token_embedding": "prefix"}

    # ---- configs, shapes and models ----------------------------------------------------------------
    def config_to_dict(self, cfg: Any) -> dict[str, Any]:
        return dataclasses.asdict(cfg)

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.families.pi.config_io import config_from_dict

        return config_from_dict(data)

    def config_of(self, model: nn.Module) -> Any:
        return model.cfg

    def variant(self, cfg: Any) -> str:
        return "pi05" if cfg.pi05 else "pi0"

    def empty_model(self, cfg: Any) -> nn.Module:
        from hotloop.models.pi0 import PiModel

        with torch.device("meta"):
            return PiModel(cfg)

    def default_shape(self, cfg: Any, batch: int = 1) -> Any:
        from hotloop.families.pi.engines import PiEngineShape

        return PiEngineShape.of(cfg, batch)

    def shape_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.families.pi.engines import PiEngineShape

        return PiEngineShape(**data)

    # ---- sub-engines and the sampler ---------------------------------------------------------------
    def build_subengines(
        self, model: nn.Module, shape: Any, dtype: torch.dtype, recipe: str = "plain"
    ) -> dict[str, SubEngine]:
        from hotloop.families.pi.recipes import RECIPES

        return RECIPES[recipe](model, shape, dtype)  # type: ignore[arg-type]

    def pipeline(
        self,
        cfg: Any,
        shape: Any,
        runners: Mapping[str, Runner],
        constants: Mapping[str, Tensor],
        signatures: Mapping[str, Signature],
    ) -> Any:
        from hotloop.families.pi.engines import PiPipeline

        return PiPipeline(cfg, shape, runners, constants, signatures)

    def signatures(self, cfg: Any) -> dict[str, Signature]:
        from hotloop.families.pi.engines import engine_signatures

        return engine_signatures(cfg)

    def sample_actions(
        self, model: nn.Module, obs: Any, noise: Tensor, num_steps: int | None = None
    ) -> Tensor:
        from hotloop.families.pi.sampling import sample_actions

        return sample_actions(model, obs, noise=noise, num_steps=num_steps)  # type: ignore[arg-type]

    # ---- observations ------------------------------------------------------------------------------
    def example_observation(self, cfg: Any, shape: Any, device: torch.device | str = "cpu") -> Any:
        from hotloop.families.pi.engines import example_observation

        return example_observation(cfg, shape, torch.device(device))

    def noise_shape(self, cfg: Any, shape: Any, batch: int) -> tuple[int, ...]:
        return (batch, cfg.chunk_size, cfg.max_action_dim)

    def random_observation(self, cfg: Any, shape: Any, seed: int) -> Any:
        from hotloop.families.pi.targets import random_observation

        return random_observation(cfg, shape.batch, "cpu", seed)

    def validate_observation(self, cfg: Any, shape: Any, obs: Any) -> Any:
        from hotloop.families.pi.engine_inputs import validate_observation

        return validate_observation(cfg, shape, obs)

    def stack(self, observations: list[Any]) -> Any:
        from hotloop.families.pi.batching import stack

        return stack(observations)

    def select(self, obs: Any, index: slice | list[int]) -> Any:
        from hotloop.families.pi.batching import select

        return select(obs, index)

    def batch_size(self, obs: Any) -> int:
        return int(obs.batch)

    # ---- policies, data and measurement ------------------------------------------------------------
    def engine_policy(self, engine: Any, info: dict[str, Any], seed: int) -> Any:
        from hotloop.families.pi.engine_policy import engine_policy

        return engine_policy(engine, info, seed)

    def stage_work(self, cfg: Any, shape: Any, precisions: Mapping[str, str]) -> dict[str, Any]:
        from hotloop.families.pi.roofline import pi_stage_work

        work = {}
        for stage in ("vision", "prefix", "denoise"):
            per_stage = pi_stage_work(
                cfg,
                precisions.get(stage, "float32"),
                shape.batch,
                views=shape.views,
                prompt_slots=shape.prompt_slots,
                num_steps=shape.num_steps,
                time_conditioning=False,
            )
            work[stage] = per_stage[stage].to_dict()
        return work

    def compression(self) -> Any:
        from hotloop.families.pi.compression.tools import PiCompression

        return PiCompression()

    def reference_inputs(self, cfg: Any, inputs: Any, reference: Any) -> tuple[Any, Tensor]:
        from hotloop.families.pi.reference_inputs import reference_observation

        obs = reference_observation(cfg, dict(inputs), reference.where("inputs.npz"))
        noise = reference.array("noise.npy")
        if noise is None:
            noise = inputs.get("noise")
        if noise is None:
            raise ConfigError(f"{reference.folder}: noise.npy is missing (the sampler's starting noise)")
        return obs, torch.from_numpy(noise).float()

    # ---- prompt buckets ----------------------------------------------------------------------------
    def prompt_length(self, obs: Any) -> int:
        from hotloop.families.buckets import prompt_length

        return prompt_length(obs.lang_masks)

    def reshape_subengines(
        self, cfg: Any, engines: Mapping[str, SubEngine], prompt_slots: int
    ) -> dict[str, SubEngine]:
        from hotloop.families.pi.engines import reshape_subengines

        return reshape_subengines(cfg, engines, prompt_slots)

    def fill_prompt(self, obs: Any, slots: int) -> Any:
        masks = obs.lang_masks.clone()
        masks[:, slots:] = False
        if not bool(masks.any()):
            masks[:, 0] = True
        return dataclasses.replace(obs, lang_masks=masks)

    def with_prompt_slots(self, shape: Any, slots: int) -> Any:
        return dataclasses.replace(shape, prompt_slots=slots)
