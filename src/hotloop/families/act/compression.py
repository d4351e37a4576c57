"""ACT's own compression steps (`PolicyFamily.compression`): structured pruning of the transformer's
feed-forward neurons, and 2:4 sparsity. No distillation, step distillation or QAT (refused by the recipe
from `Capabilities` before any work).

Where pruning pays: ACT's feed-forward blocks are the transformer's bulk (LeRobot's default dim_model
512 with dim_feedforward 3200: 3.3 M of the 4.3 M multiply-adds per token and layer), so removing their
least useful neurons shrinks the transformer stage almost in proportion. The backbone (a ResNet) is
untouched: its channels feed frozen batch norms and residual sums that would all have to shrink together.

`prune:F` removes the fraction F of the feed-forward neurons, the same number in every encoder and
decoder layer (they share `dim_feedforward` in ACT's config, so the pruned model is still an ACTConfig):
in each layer the neurons kept are those with the largest mean |activation| over the observations times
the norm of their outgoing weights (what they contribute). The VAE encoder, which inference never runs,
is cut to the same width by weight norm so that the model keeps one consistent config.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError


def _fraction(arg: str) -> float:
    parts = [p for p in (arg or "").split(":") if p]
    if len(parts) > 1:
        raise ConfigError(
            f"--recipe prune:{arg}: ACT prunes feed-forward neurons only (prune:FRACTION); it has no "
            "attention-head pruning"
        )
    try:
        fraction = float(parts[0]) if parts else 0.3
    except ValueError:
        raise ConfigError(f"--recipe prune:{arg}: the fraction must be a number in [0, 1)") from None
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"--recipe prune:{arg}: the fraction must be in [0, 1) (got {fraction})")
    return fraction


def _layers(model: Any) -> list[tuple[str, Any]]:
    """The encoder and decoder layers inference runs, by name (`model`: an ACTModel)."""
    out = [(f"encoder.layers.{i}", layer) for i, layer in enumerate(model.encoder.layers)]
    out += [(f"decoder.layers.{i}", layer) for i, layer in enumerate(model.decoder.layers)]
    return out


@torch.no_grad()
def neuron_importance(model: Any, obs: Any, batch: int = 8) -> dict[str, Tensor]:
    """Per layer: mean |activation(linear1(x))| over every token of every observation, times the norm
    of the neuron's outgoing column of linear2."""
    sums: dict[str, Tensor] = {}
    counts: dict[str, int] = {}
    hooks = []
    for name, layer in _layers(model):

        def hook(
            module: nn.Module, args: tuple[Any, ...], out: Tensor, name: str = name, layer: Any = layer
        ) -> None:
            a = layer.activation(out).abs().reshape(-1, out.shape[-1])
            sums[name] = sums.get(name, torch.zeros(out.shape[-1])) + a.sum(0).float()
            counts[name] = counts.get(name, 0) + a.shape[0]

        hooks.append(layer.linear1.register_forward_hook(hook))
    try:
        n = int(obs.batch)
        for start in range(0, n, batch):
            index = list(range(start, min(n, start + batch)))
            images = [x[index] for x in obs.images]
            state = None if obs.state is None else obs.state[index]
            env = None if obs.env_state is None else obs.env_state[index]
            model(images, state, env)
    finally:
        for h in hooks:
            h.remove()
    return {
        name: sums[name] / counts[name] * layer.linear2.weight.float().norm(dim=0)
        for name, layer in _layers(model)
    }


def _slice_ffn(layer: Any, keep: Tensor) -> None:
    layer.linear1.weight = nn.Parameter(layer.linear1.weight[keep].clone())
    layer.linear1.bias = nn.Parameter(layer.linear1.bias[keep].clone())
    layer.linear1.out_features = len(keep)
    layer.linear2.weight = nn.Parameter(layer.linear2.weight[:, keep].clone())
    layer.linear2.in_features = len(keep)


def prune_ffn(model: Any, obs: Any, fraction: float) -> tuple[Any, dict[str, Any]]:
    """A copy of `model` with `fraction` of every layer's feed-forward neurons removed (module doc)."""
    cfg = model.cfg
    width = int(cfg.dim_feedforward)
    keep = max(1, round(width * (1.0 - fraction)))
    small = copy.deepcopy(model).eval()
    scores = neuron_importance(model.eval(), obs)
    for name, layer in _layers(small):
        kept = scores[name].topk(keep).indices.sort().values  # the original order: same numerics
        _slice_ffn(layer, kept)
    if cfg.use_vae:
        for layer in small.vae_encoder.layers:
            norm = layer.linear1.weight.norm(dim=1) * layer.linear2.weight.norm(dim=0)
            _slice_ffn(layer, norm.topk(keep).indices.sort().values)
    small.cfg = dataclasses.replace(cfg, dim_feedforward=keep)
    before = sum(p.numel() for p in model.parameters())
    after = sum(p.numel() for p in small.parameters())
    return small, {
        "importance": "activation",
        "fraction": fraction,
        "dim_feedforward": [width, keep],
        "layers": [name for name, _ in _layers(small)],
        "parameters_before": before,
        "parameters_after": after,
    }


class ActCompression:
    """The steps `hotloop compress` runs for ACT that other families do not share."""

    def prune(
        self, model: nn.Module, obs: Any, actions: Tensor | None, arg: str, seed: int
    ) -> tuple[Any, Any]:
        return prune_ffn(model, obs, _fraction(arg))

    def sparse24(self, model: nn.Module) -> tuple[nn.Module, dict[str, Any]]:
        """Zero the 2 smallest-magnitude weights of every 4 consecutive inputs of the transformer's linears
        (feed-forward and output projections): dense storage, so accuracy changes, not CPU speed."""
        new = copy.deepcopy(model)
        zeroed = total = 0
        with torch.no_grad():
            for _, layer in _layers(new):
                for module in layer.modules():
                    if isinstance(module, nn.Linear) and module.weight.shape[1] % 4 == 0:
                        groups = module.weight.view(module.weight.shape[0], -1, 4)
                        drop = groups.abs().argsort(dim=-1)[..., :2]
                        groups.scatter_(-1, drop, 0.0)
                        zeroed += drop.numel()
                        total += module.weight.numel()
        return new, {
            "pattern": "2:4",
            "stacks": ["encoder", "decoder"],
            "zeroed_fraction_of_pruned_layers": zeroed / total if total else 0.0,
            "note": "dense storage: no CPU speedup expected; sparse kernels need a GPU with 2:4 support",
        }

    def _none(self, what: str) -> ConfigError:
        return ConfigError(
            f"ACT has no {what} step in hotloop; its steps are prune, sparse24, quantize, compile"
        )

    def distill(self, *args: Any, **kwargs: Any) -> Any:
        raise self._none("distillation")

    def check_step_distill(self, *args: Any, **kwargs: Any) -> Any:
        raise self._none("step-distillation")

    def step_distill(self, *args: Any, **kwargs: Any) -> Any:
        raise self._none("step-distillation")

    def qat(self, *args: Any, **kwargs: Any) -> Any:
        raise self._none("QAT")


__all__ = ["ActCompression", "neuron_importance", "prune_ffn"]
