"""The toy MLP behind the family protocol: two sub-engines (encoder, head), no loop, no noise; the engines and
their pipeline live in `engines.py`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.adapter import FamilyAdapter, FamilyParts
from hotloop.families.inputs import check_fields, check_finite, check_kind, to_tensor
from hotloop.families.protocol import StageSpec
from hotloop.families.stages import one_engine
from hotloop.families.toy.policy import ToyObservation, ToyPolicy


class ToyFamily(FamilyAdapter):
    name: ClassVar[str] = "toy"
    stages: ClassVar[tuple[StageSpec, ...]] = (one_engine("encoder"), one_engine("head"))

    def parts(self) -> FamilyParts:
        from hotloop.families.toy.engines import ToyEngineShape, ToyPipeline, build_subengines
        from hotloop.models.toy import ToyMLPPolicy

        return FamilyParts(ToyMLPPolicy, ToyEngineShape, ToyPipeline, {"plain": build_subengines})

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        from hotloop.models.toy import ToyConfig

        return ToyConfig(**data)

    def config_of(self, model: nn.Module) -> Any:
        return model.config

    def variant(self, cfg: Any) -> str:
        return "mlp"

    def sample_actions(
        self, model: nn.Module, obs: Any, noise: Tensor, num_steps: int | None = None
    ) -> Tensor:
        with torch.no_grad():
            return model(obs.state.to(next(model.parameters()).dtype)).float()  # type: ignore[no-any-return]

    def example_observation(self, cfg: Any, shape: Any, device: torch.device | str = "cpu") -> Any:
        from hotloop.families.toy.engines import example_observation

        return ToyObservation(example_observation(cfg, shape).state.to(device))

    def random_observation(self, cfg: Any, shape: Any, seed: int) -> Any:
        from hotloop.families.toy.engines import example_observation

        return example_observation(cfg, shape, seed + 1)

    def noise_shape(self, cfg: Any, shape: Any, batch: int) -> tuple[int, ...]:
        return (batch, 0)  # deterministic: the MLP consumes no randomness

    def validate_observation(self, cfg: Any, shape: Any, obs: Any) -> Any:
        want = (shape.batch, cfg.state_dim)
        fields = check_fields(obs, ("state",), ToyObservation, "ToyObservation")
        if fields["state"] is None:
            raise ConfigError(f"input 'state' is missing; expected shape {want} (float)")
        state = to_tensor("state", fields["state"])
        if tuple(state.shape) != want:
            raise ConfigError(f"input 'state' has shape {tuple(state.shape)}; this engine takes {want}")
        check_kind("state", state, "float")
        check_finite("state", state)
        return ToyObservation(state)

    def engine_policy(self, engine: Any, info: dict[str, Any], seed: int) -> Any:
        return ToyPolicy(engine.model, "cpu", run=lambda obs: engine.infer(obs))

    def stage_work(self, cfg: Any, shape: Any, precisions: Mapping[str, str]) -> dict[str, Any]:
        from hotloop.measure.roofline import BYTES, StageWork, linear_flops

        b = shape.batch
        h = cfg.hidden
        enc_flops = linear_flops(b, cfg.state_dim, h) + (cfg.depth - 1) * linear_flops(b, h, h)
        enc_params = cfg.state_dim * h + (cfg.depth - 1) * h * h
        head_out = cfg.horizon * cfg.action_dim
        out = {}
        for stage, flops, params in (
            ("encoder", enc_flops, enc_params),
            ("head", linear_flops(b, h, head_out), h * head_out),
        ):
            precision = precisions.get(stage, "float32")
            out[stage] = StageWork(flops, params * BYTES[precision], precision).to_dict()
        return out


__all__ = ["ToyFamily"]
