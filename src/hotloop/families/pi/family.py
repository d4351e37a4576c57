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

from hotloop.families.adapter import FamilyAdapter, FamilyParts
from hotloop.families.flow import VLM_FLOW_CAPABILITIES, VLM_FLOW_STAGES
from hotloop.families.protocol import Capabilities, Signature, StageSpec, SubEngine


class PiFamily(FamilyAdapter):
    name: ClassVar[str] = "pi"
    lerobot_types: ClassVar[tuple[str, ...]] = ("pi0", "pi05")
    stages: ClassVar[tuple[StageSpec, ...]] = VLM_FLOW_STAGES
    capabilities: ClassVar[Capabilities] = dataclasses.replace(
        VLM_FLOW_CAPABILITIES,
        pruning=True,
        distillation=True,
        qat=True,
        recipes=("plain", "fused"),
        lean_artifact=True,
        vision_resolution=True,
    )
    lookup_tables: ClassVar[Mapping[str, str]] = {"token_embedding": "prefix"}

    def parts(self) -> FamilyParts:
        from hotloop.families.pi.engines import PiEngineShape, PiPipeline
        from hotloop.families.pi.recipes import RECIPES
        from hotloop.models.pi0 import PiModel

        return FamilyParts(PiModel, PiEngineShape, PiPipeline, RECIPES)

    # ---- configs -----------------------------------------------------------------------------------
    def config_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.families.pi.config_io import config_from_dict

        return config_from_dict(data)

    def variant(self, cfg: Any) -> str:
        return "pi05" if cfg.pi05 else "pi0"

    # ---- sub-engines and the sampler ---------------------------------------------------------------
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

    # ---- policies, compression and measurement -----------------------------------------------------
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

    # ---- reference runs and prompt buckets ---------------------------------------------------------
    def reference_inputs(self, cfg: Any, inputs: Any, reference: Any) -> tuple[Any, Tensor]:
        from hotloop.families.pi.reference_inputs import reference_observation

        obs = reference_observation(cfg, dict(inputs), reference.where("inputs.npz"))
        return obs, reference.starting_noise(fallback=inputs.get("noise"))

    def reshape_subengines(
        self, cfg: Any, engines: Mapping[str, SubEngine], prompt_slots: int
    ) -> dict[str, SubEngine]:
        from hotloop.families.pi.engines import reshape_subengines

        return reshape_subengines(cfg, engines, prompt_slots)
