"""The toy MLP behind the family protocol: two sub-engines (encoder, head), no loop, no noise."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.inputs import check_fields, check_finite, check_kind, to_tensor
from hotloop.families.protocol import (
    PolicyFamily,
    Runner,
    Signature,
    StageSpec,
    SubEngine,
    as_tuple,
    run_subengine,
)
from hotloop.families.toy.policy import ToyObservation, ToyPolicy
from hotloop.measure.stages import null_timer
from hotloop.models.toy import ToyConfig, ToyMLPPolicy


@dataclass(frozen=True)
class ToyEngineShape:
    batch: int
    num_steps: int = 1  # no loop: one pass

    def __post_init__(self) -> None:
        if not isinstance(self.batch, int) or self.batch < 1:
            raise ConfigError(f"ToyEngineShape.batch must be a positive integer (got {self.batch!r})")


class EncoderEngine(nn.Module):
    def __init__(self, model: ToyMLPPolicy) -> None:
        super().__init__()
        self.encoder = model.encoder

    def forward(self, state: Tensor) -> Tensor:
        first = cast(nn.Linear, self.encoder[0])
        return cast(Tensor, self.encoder(state.to(first.weight.dtype)))


class HeadEngine(nn.Module):
    def __init__(self, model: ToyMLPPolicy) -> None:
        super().__init__()
        self.head = model.head
        self.horizon, self.action_dim = model.config.horizon, model.config.action_dim

    def forward(self, hidden: Tensor) -> Tensor:
        out = self.head(hidden.to(self.head.weight.dtype))
        return out.view(hidden.shape[0], self.horizon, self.action_dim).float()


SIGNATURES = {"encoder": Signature(("state",), ("hidden",)), "head": Signature(("hidden",), ("actions",))}


class ToyPipeline:
    def __init__(
        self,
        cfg: ToyConfig,
        shape: ToyEngineShape,
        runners: Mapping[str, Runner],
        signatures: Mapping[str, Signature],
    ) -> None:
        missing = [n for n in SIGNATURES if n not in runners]
        if missing:
            raise ConfigError(f"the toy pipeline needs runners for {', '.join(missing)}")
        self.cfg, self.shape = cfg, shape
        self.runners, self.signatures = dict(runners), dict(signatures)

    @torch.no_grad()
    def sample(self, obs: ToyObservation, noise: Tensor | None = None, timer: Any = None) -> Tensor:
        if tuple(obs.state.shape) != (self.shape.batch, self.cfg.state_dim):
            raise ConfigError(
                f"state has shape {tuple(obs.state.shape)}; this engine takes {(self.shape.batch, self.cfg.state_dim)}"
            )
        timer = timer if timer is not None else null_timer()
        values: dict[str, Tensor] = {"state": obs.state}
        for name in ("encoder", "head"):
            with timer.stage(name):
                run_subengine(self.runners[name], self.signatures[name], values)
        return values["actions"]


class ToyFamily(PolicyFamily):
    name: ClassVar[str] = "toy"
    stages: ClassVar[tuple[StageSpec, ...]] = (
        StageSpec("encoder", ("encoder",)),
        StageSpec("head", ("head",)),
    )

    def config_to_dict(self, cfg: Any) -> dict[str, Any]:
        return dataclasses.asdict(cfg)

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        return ToyConfig(**data)

    def config_of(self, model: nn.Module) -> Any:
        return model.config

    def variant(self, cfg: Any) -> str:
        return "mlp"

    def empty_model(self, cfg: Any) -> nn.Module:
        with torch.device("meta"):
            return ToyMLPPolicy(cfg)

    def default_shape(self, cfg: Any, batch: int = 1) -> Any:
        return ToyEngineShape(batch=batch)

    def shape_from_dict(self, data: dict[str, Any]) -> Any:
        return ToyEngineShape(**data)

    def with_steps(self, shape: Any, num_steps: int) -> Any:
        if num_steps != shape.num_steps:
            raise ConfigError("the toy MLP runs in one pass: it has no steps to change")
        return shape

    def build_subengines(
        self, model: nn.Module, shape: Any, dtype: torch.dtype, recipe: str = "plain"
    ) -> dict[str, SubEngine]:
        if recipe != "plain":
            raise ConfigError(f"the toy family has the plain recipe only (got {recipe!r})")
        if next(model.parameters()).dtype != dtype:
            model = copy.deepcopy(model).to(dtype)
        model = model.eval()
        modules = {"encoder": EncoderEngine(model).eval(), "head": HeadEngine(model).eval()}  # type: ignore[arg-type]
        values: dict[str, Tensor] = {"state": self.example_observation(model.config, shape).state}
        engines = {}
        with torch.no_grad():
            for name, sig in SIGNATURES.items():
                inputs = tuple(values[n] for n in sig.input_names)
                values.update(zip(sig.output_names, as_tuple(modules[name](*inputs)), strict=True))
                engines[name] = SubEngine(name, modules[name], inputs, sig.input_names, sig.output_names)
        return engines

    def pipeline(
        self,
        cfg: Any,
        shape: Any,
        runners: Mapping[str, Runner],
        constants: Mapping[str, Tensor],
        signatures: Mapping[str, Signature],
    ) -> Any:
        return ToyPipeline(cfg, shape, runners, signatures)

    def sample_actions(
        self, model: nn.Module, obs: Any, noise: Tensor, num_steps: int | None = None
    ) -> Tensor:
        with torch.no_grad():
            return model(obs.state.to(next(model.parameters()).dtype)).float()  # type: ignore[no-any-return]

    def example_observation(self, cfg: Any, shape: Any, device: torch.device | str = "cpu") -> Any:
        g = torch.Generator().manual_seed(0)
        return ToyObservation(torch.randn(shape.batch, cfg.state_dim, generator=g).to(device))

    def random_observation(self, cfg: Any, shape: Any, seed: int) -> Any:
        g = torch.Generator().manual_seed(seed + 1)
        return ToyObservation(torch.randn(shape.batch, cfg.state_dim, generator=g))

    def noise_shape(self, cfg: Any, shape: Any, batch: int) -> tuple[int, ...]:
        return (batch, 0)  # deterministic: the MLP consumes no randomness

    def validate_observation(self, cfg: Any, shape: Any, obs: Any) -> Any:
        fields = check_fields(obs, ("state",), ToyObservation, "ToyObservation")
        if fields["state"] is None:
            raise ConfigError(
                f"input 'state' is missing; expected shape {(shape.batch, cfg.state_dim)} (float)"
            )
        state = to_tensor("state", fields["state"])
        if tuple(state.shape) != (shape.batch, cfg.state_dim):
            raise ConfigError(
                f"input 'state' has shape {tuple(state.shape)}; this engine takes {(shape.batch, cfg.state_dim)}"
            )
        check_kind("state", state, "float")
        check_finite("state", state)
        return ToyObservation(state)

    def stack(self, observations: list[Any]) -> Any:
        return ToyObservation(torch.cat([o.state for o in observations]))

    def select(self, obs: Any, index: slice | list[int]) -> Any:
        return ToyObservation(obs.state[index])

    def batch_size(self, obs: Any) -> int:
        return int(obs.state.shape[0])

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
