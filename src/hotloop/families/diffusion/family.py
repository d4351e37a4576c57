"""LeRobot's Diffusion Policy behind the family protocol (`hotloop.families.protocol`).

Stages: encoder (the n_obs_steps history -> global conditioning) -> denoise (a loop stage: the step
engine, U-Net and scheduler update in one graph, once per row of the step table; or the unrolled loop
engine holding it as `step`). The scheduler is the config's (`noise_scheduler_type`): `steps:N` keeps
it (LeRobot's DDPM with N < num_train_timesteps inference steps is DDPM's own strided schedule), and the
family's recipe step `ddim:N` switches to DDIM with N steps (`hotloop.families.diffusion.compression`),
the step reduction hotloop recommends (docs: the sensitivity to N, `hotloop.families.diffusion.steps`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.inputs import check_fields, check_finite, check_kind, to_tensor
from hotloop.families.protocol import (
    Capabilities,
    LoopSpec,
    PolicyFamily,
    Runner,
    Signature,
    StageSpec,
    SubEngine,
)

FIELDS = ("state", "images", "env_state")


class DiffusionFamily(PolicyFamily):
    name: ClassVar[str] = "diffusion"
    lerobot_types: ClassVar[tuple[str, ...]] = ("diffusion",)
    stages: ClassVar[tuple[StageSpec, ...]] = (
        StageSpec("encoder", ("encoder",)),
        StageSpec(
            "denoise",
            ("denoise_step", "denoise_loop"),
            LoopSpec(step="denoise_step", loop="denoise_loop", table="step_table", row_input="step_row"),
        ),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        step_reduction=True, one_step=True, recipe_steps=("ddim",)
    )

    # ---- configs, shapes and models ----------------------------------------------------------------
    def config_to_dict(self, cfg: Any) -> dict[str, Any]:
        return dataclasses.asdict(cfg)

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.families.diffusion.config_io import config_from_dict

        return config_from_dict(data)

    def config_of(self, model: nn.Module) -> Any:
        return model.cfg

    def variant(self, cfg: Any) -> str:
        return str(cfg.noise_scheduler_type).lower()

    def empty_model(self, cfg: Any) -> nn.Module:
        from hotloop.models.diffusion import DiffusionModel

        with torch.device("meta"):
            return DiffusionModel(cfg)

    def default_shape(self, cfg: Any, batch: int = 1) -> Any:
        from hotloop.families.diffusion.engines import DiffusionEngineShape

        return DiffusionEngineShape.of(cfg, batch)

    def shape_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.families.diffusion.engines import DiffusionEngineShape

        return DiffusionEngineShape(**data)

    def with_steps(self, shape: Any, num_steps: int) -> Any:
        """The same scheduler for `num_steps` steps (DDPM strided, DDIM's own spacing); the step count is
        checked against the scheduler when the engines are built."""
        return dataclasses.replace(shape, num_steps=num_steps)

    # ---- sub-engines and the sampler ---------------------------------------------------------------
    def build_subengines(
        self, model: nn.Module, shape: Any, dtype: torch.dtype, recipe: str = "plain"
    ) -> dict[str, SubEngine]:
        from hotloop.families.diffusion.engines import build_diffusion_subengines

        if recipe != "plain":
            raise ConfigError(f"the diffusion family has the plain recipe only (got {recipe!r})")
        return build_diffusion_subengines(model, shape, dtype)  # type: ignore[arg-type]

    def pipeline(
        self,
        cfg: Any,
        shape: Any,
        runners: Mapping[str, Runner],
        constants: Mapping[str, Tensor],
        signatures: Mapping[str, Signature],
    ) -> Any:
        from hotloop.families.diffusion.engines import DiffusionPipeline

        return DiffusionPipeline(cfg, shape, runners, constants, signatures)

    def sample_actions(
        self, model: nn.Module, obs: Any, noise: Tensor, num_steps: int | None = None
    ) -> Tensor:
        """LeRobot's `generate_actions` without the n_action_steps slice: encode, then the config's
        scheduler stepped by `scheduler.step` (diffusers' expressions), x_T and step noise from `noise`."""
        from hotloop.families.diffusion.sampling import sample_actions

        return sample_actions(model, obs, noise, num_steps)

    # ---- observations ------------------------------------------------------------------------------
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
        from hotloop.families.diffusion.engines import DiffusionObservation

        fields = check_fields(obs, FIELDS, DiffusionObservation, "DiffusionObservation")
        b, o = shape.batch, cfg.n_obs_steps
        wants: dict[str, tuple[int, ...] | None] = {
            "state": (b, o, cfg.state_dim),
            "images": (b, o, cfg.n_cameras, *cfg.image_shape) if cfg.n_cameras else None,
            "env_state": (b, o, cfg.env_state_dim) if cfg.env_state_dim is not None else None,
        }
        out: dict[str, Tensor | None] = {}
        for name, want in wants.items():
            value = fields[name]
            if want is None:
                if value is not None:
                    raise ConfigError(f"input {name!r} is given, but this checkpoint takes none")
                out[name] = None
                continue
            if value is None:
                raise ConfigError(f"input {name!r} is missing; expected shape {want} (float, model space)")
            t = to_tensor(name, value)
            if tuple(t.shape) != want:
                raise ConfigError(f"input {name!r} has shape {tuple(t.shape)}; this engine takes {want}")
            check_kind(name, t, "float")
            check_finite(name, t)
            out[name] = t.float()
        state = out["state"]
        assert state is not None
        return DiffusionObservation(state, out["images"], out["env_state"])

    def stack(self, observations: list[Any]) -> Any:
        from hotloop.families.diffusion.engines import DiffusionObservation

        def cat(name: str) -> Tensor | None:
            parts = [getattr(o, name) for o in observations]
            return None if parts[0] is None else torch.cat(parts)

        state = cat("state")
        assert state is not None
        return DiffusionObservation(state, cat("images"), cat("env_state"))

    def select(self, obs: Any, index: slice | list[int]) -> Any:
        from hotloop.families.diffusion.engines import DiffusionObservation

        return DiffusionObservation(
            obs.state[index],
            None if obs.images is None else obs.images[index],
            None if obs.env_state is None else obs.env_state[index],
        )

    def batch_size(self, obs: Any) -> int:
        return int(obs.state.shape[0])

    # ---- policies, data and measurement ------------------------------------------------------------
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
