"""Structured pruning of a pi0 / pi0.5 model by measured importance, physically shrinking the weights.

What is removed, per layer and the same count in every layer of a stack (the configs are uniform, so a
pruned model is again a `PiConfig` that checkpoints, artifacts and the engine rebuild at the new shapes):
- FFN neurons of the VLM and the action expert (rows of gate/up, columns of down);
- query heads of the VLM and the expert, the same number inside every KV group (GQA stays consistent;
  whole KV groups are never removed: the expert reads the VLM's K/V head by head, and every shipped
  config has one KV head);
- MLP channels of the SigLIP vision tower (rows of fc1, columns of fc2).
Widths, depths and head_dim are kept, so the teacher's hidden states stay comparable for distillation.

Importance is measured on calibration observations: `taylor` = |activation x gradient| of the
flow-matching loss (needs the action targets), `activation` = mean |activation| times the norm of the
weight column that reads it (needs observations only). `semi_structured_2_4` zeroes 2 of every 4
weights instead (dense storage: no CPU speedup is expected, it prepares for sparse GPU kernels).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.pi.sampling import PiObservation
from hotloop.models.configs import PiConfig
from hotloop.models.pi0 import PiModel

IMPORTANCE = ("taylor", "activation")


@dataclass(frozen=True)
class PruneConfig:
    """Fractions removed per layer (0 keeps everything)."""

    vlm_mlp: float = 0.0
    expert_mlp: float = 0.0
    vision_mlp: float = 0.0
    vlm_heads: float = 0.0
    expert_heads: float = 0.0
    importance: str = "taylor"
    batch: int = 8

    def __post_init__(self) -> None:
        for name in ("vlm_mlp", "expert_mlp", "vision_mlp", "vlm_heads", "expert_heads"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"prune fraction {name} must lie in [0, 1) (got {value}); e.g. prune:0.25")
        if self.importance not in IMPORTANCE:
            raise ConfigError(f"--importance {self.importance!r} is unknown; use {' or '.join(IMPORTANCE)}")

    @classmethod
    def parse(cls, spec: str, importance: str = "taylor") -> PruneConfig:
        """`MLP[:HEADS]`, e.g. `0.25` (FFN and vision MLP channels) or `0.25:0.25` (and query heads)."""
        parts = [p for p in spec.split(":") if p]
        try:
            mlp = float(parts[0]) if parts else 0.25
            heads = float(parts[1]) if len(parts) > 1 else 0.0
        except ValueError:
            raise ConfigError(
                f"--recipe prune:{spec}: give fractions, e.g. prune:0.25 or prune:0.25:0.25"
            ) from None
        if len(parts) > 2:
            raise ConfigError(f"--recipe prune:{spec}: at most two fractions (MLP:HEADS)")
        return cls(mlp, mlp, mlp, heads, heads, importance)


def _kept(total: int, fraction: float, multiple: int = 1) -> int:
    """How many units stay: at least one (or one per group), a multiple of `multiple`."""
    keep = max(multiple, math.floor(total * (1.0 - fraction) / multiple) * multiple)
    return min(total, keep)


# ---- measuring importance ------------------------------------------------------------------------------
class _Scores:
    """Accumulates |a * g| (taylor) or |a| (activation) per input channel of the hooked linears."""

    def __init__(self, taylor: bool) -> None:
        self.taylor = taylor
        self.sums: dict[str, Tensor] = {}

    def hook(self, name: str) -> Any:
        def pre(_module: nn.Module, args: tuple[Tensor, ...]) -> None:
            a = args[0]
            if self.taylor:
                if a.requires_grad:
                    a.register_hook(lambda g: self._add(name, (a.detach() * g).abs()))
            else:
                self._add(name, a.detach().abs())

        return pre

    def _add(self, name: str, x: Tensor) -> None:
        s = x.float().reshape(-1, x.shape[-1]).sum(0)
        self.sums[name] = self.sums[name] + s if name in self.sums else s


def _readers(model: PiModel) -> dict[str, nn.Linear]:
    """The linears whose input channels are the prunable units: FFN down, attention output, vision fc2."""
    out: dict[str, nn.Linear] = {}
    for stack in ("vlm", "expert"):
        for i, layer in enumerate(getattr(model, stack).layers):
            out[f"{stack}.{i}.mlp"] = layer.mlp.down_proj
            out[f"{stack}.{i}.heads"] = layer.self_attn.o_proj
    for i, vlayer in enumerate(model.vision_tower.layers):
        out[f"vision.{i}.mlp"] = vlayer.mlp.fc2  # type: ignore[union-attr, assignment]
    return out


@contextmanager
def _hooks(readers: dict[str, nn.Linear], scores: _Scores) -> Iterator[None]:
    handles = [lin.register_forward_pre_hook(scores.hook(n)) for n, lin in readers.items()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def measure_importance(
    model: PiModel,
    obs: PiObservation,
    actions: Tensor | None,
    importance: str = "taylor",
    batch: int = 8,
    seed: int = 0,
) -> dict[str, Tensor]:
    """Per-channel importance of every prunable unit, summed over the calibration set."""
    from hotloop.families.pi.batching import select
    from hotloop.families.pi.sampling import flow_matching_loss, sample_actions

    if importance == "taylor" and actions is None:
        raise ConfigError("--importance taylor needs action targets (--data episodes); use activation")
    readers = _readers(model)
    scores = _Scores(taylor=importance == "taylor")
    gen = torch.Generator().manual_seed(seed)
    was_training = model.training
    # A model from the recipe or an earlier step is frozen; Taylor scores need gradients through it.
    frozen = [p for p in model.parameters() if not p.requires_grad] if scores.taylor else []
    for p in frozen:
        p.requires_grad_(True)
    model.eval()
    try:
        with torch.enable_grad() if scores.taylor else torch.no_grad(), _hooks(readers, scores):
            for start in range(0, obs.batch, batch):
                idx = list(range(start, min(start + batch, obs.batch)))
                part = select(obs, idx)
                if scores.taylor:
                    assert actions is not None
                    model.zero_grad(set_to_none=True)
                    flow_matching_loss(model, part, actions[idx], generator=gen).backward()
                else:
                    sample_actions(model, part, generator=gen, validate=False)
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        for p in frozen:
            p.requires_grad_(False)
    if not scores.sums:
        raise ConfigError("no calibration observations to measure importance on (--data is empty?)")
    if not scores.taylor:  # weight the activation by how strongly the next layer reads it
        for name, lin in readers.items():
            if name in scores.sums:
                scores.sums[name] = scores.sums[name] * lin.weight.detach().float().norm(dim=0)
    return scores.sums


# ---- shrinking -------------------------------------------------------------------------------------------
def _top(score: Tensor, keep: int) -> Tensor:
    return torch.sort(torch.topk(score, keep).indices).values


def _head_index(score: Tensor, num_heads: int, num_kv: int, head_dim: int, keep_per_group: int) -> Tensor:
    """Channel indices of the kept query heads: the best `keep_per_group` inside each KV group."""
    per_head = score.view(num_heads, head_dim).sum(1).view(num_kv, num_heads // num_kv)
    heads = []
    for group in range(num_kv):
        best = _top(per_head[group], keep_per_group) + group * (num_heads // num_kv)
        heads.extend(best.tolist())
    return torch.tensor([h * head_dim + d for h in heads for d in range(head_dim)])


def pruned_config(cfg: PiConfig, config: PruneConfig) -> PiConfig:
    def heads(g: Any, fraction: float) -> int:
        per_group = g.num_heads // g.num_kv_heads
        return _kept(per_group, fraction) * g.num_kv_heads

    return replace(
        cfg,
        vision=replace(cfg.vision, mlp_dim=_kept(cfg.vision.mlp_dim, config.vision_mlp)),
        vlm=replace(
            cfg.vlm,
            mlp_dim=_kept(cfg.vlm.mlp_dim, config.vlm_mlp),
            num_heads=heads(cfg.vlm, config.vlm_heads),
        ),
        expert=replace(
            cfg.expert,
            mlp_dim=_kept(cfg.expert.mlp_dim, config.expert_mlp),
            num_heads=heads(cfg.expert, config.expert_heads),
        ),
    )


def prune_model(model: PiModel, scores: dict[str, Tensor], config: PruneConfig) -> PiModel:
    """A new, smaller PiModel holding the most important channels of `model` (which is left untouched)."""
    cfg = model.cfg
    new_cfg = pruned_config(cfg, config)
    # The VLM's last layer only yields K/V (its queries, output and MLP never run): no score reaches them,
    # and which of their channels stay does not matter.
    scores = {n: scores.get(n, torch.zeros(lin.in_features)) for n, lin in _readers(model).items()}
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for stack, g, ng in (("vlm", cfg.vlm, new_cfg.vlm), ("expert", cfg.expert, new_cfg.expert)):
        for i in range(g.depth):
            p = f"{stack}.layers.{i}"
            if ng.mlp_dim < g.mlp_dim:
                idx = _top(scores[f"{stack}.{i}.mlp"], ng.mlp_dim)
                for name in ("gate_proj", "up_proj"):
                    state[f"{p}.mlp.{name}.weight"] = state[f"{p}.mlp.{name}.weight"][idx]
                state[f"{p}.mlp.down_proj.weight"] = state[f"{p}.mlp.down_proj.weight"][:, idx]
            if ng.num_heads < g.num_heads:
                idx = _head_index(
                    scores[f"{stack}.{i}.heads"], g.num_heads, g.num_kv_heads, g.head_dim,
                    ng.num_heads // ng.num_kv_heads,
                )  # fmt: skip
                state[f"{p}.self_attn.q_proj.weight"] = state[f"{p}.self_attn.q_proj.weight"][idx]
                state[f"{p}.self_attn.o_proj.weight"] = state[f"{p}.self_attn.o_proj.weight"][:, idx]
    if new_cfg.vision.mlp_dim < cfg.vision.mlp_dim:
        for i in range(cfg.vision.depth):
            p = f"vision_tower.layers.{i}.mlp"
            idx = _top(scores[f"vision.{i}.mlp"], new_cfg.vision.mlp_dim)
            state[f"{p}.fc1.weight"], state[f"{p}.fc1.bias"] = (
                state[f"{p}.fc1.weight"][idx],
                state[f"{p}.fc1.bias"][idx],
            )
            state[f"{p}.fc2.weight"] = state[f"{p}.fc2.weight"][:, idx]
    with torch.device("meta"):
        small = PiModel(new_cfg)
    small.load_state_dict({k: v.contiguous() for k, v in state.items()}, assign=True, strict=True)
    return small.to(model.dtype).train(model.training)


def prune(
    model: PiModel, obs: PiObservation, actions: Tensor | None, config: PruneConfig, seed: int = 0
) -> tuple[PiModel, dict[str, Any]]:
    """Measure importance, shrink, and report the parameter counts before and after."""
    from hotloop.models.siglip import count_parameters

    scores = measure_importance(model, obs, actions, config.importance, config.batch, seed)
    small = prune_model(model, scores, config)
    before, after = count_parameters(model), count_parameters(small)
    report = {
        "importance": config.importance,
        "fractions": {
            k: getattr(config, k)
            for k in ("vlm_mlp", "expert_mlp", "vision_mlp", "vlm_heads", "expert_heads")
        },
        "parameters_before": before,
        "parameters_after": after,
        "shapes": {
            "vision_mlp": [model.cfg.vision.mlp_dim, small.cfg.vision.mlp_dim],
            "vlm_mlp": [model.cfg.vlm.mlp_dim, small.cfg.vlm.mlp_dim],
            "expert_mlp": [model.cfg.expert.mlp_dim, small.cfg.expert.mlp_dim],
            "vlm_heads": [model.cfg.vlm.num_heads, small.cfg.vlm.num_heads],
            "expert_heads": [model.cfg.expert.num_heads, small.cfg.expert.num_heads],
        },
    }
    return small, report


# ---- 2:4 semi-structured sparsity ------------------------------------------------------------------------
def semi_structured_2_4(model: PiModel, stacks: tuple[str, ...] = ("vlm", "expert")) -> dict[str, Any]:
    """Zero the 2 smallest-magnitude weights of every 4 consecutive inputs of the stacks' linears, in place.

    Storage stays dense: on CPU this changes accuracy, not speed (sparse tensor cores are a GPU feature);
    the report says so rather than implying a gain.
    """
    zeroed = total = 0
    with torch.no_grad():
        for stack in stacks:
            for module in getattr(model, stack).modules():
                if isinstance(module, nn.Linear) and module.weight.shape[1] % 4 == 0:
                    w = module.weight
                    groups = w.view(w.shape[0], -1, 4)
                    drop = groups.abs().argsort(dim=-1)[..., :2]
                    groups.scatter_(-1, drop, 0.0)
                    zeroed += drop.numel()
                    total += w.numel()
    return {
        "pattern": "2:4",
        "stacks": list(stacks),
        "zeroed_fraction_of_pruned_layers": zeroed / total if total else 0.0,
        "note": "dense storage: no CPU speedup expected; sparse kernels need a GPU with 2:4 support",
    }
