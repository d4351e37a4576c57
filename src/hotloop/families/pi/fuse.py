"""Weight-level rewrites of the pi sub-engines: fold norm weights into the next linear, fuse projections.

Each transform takes the engines from `build_pi_subengines` and returns new ones; the input engines (and
the model they share weights with) are left untouched. Unchanged weights stay shared (no copy); changed
ones are new tensors, computed in float32 and rounded once to the engine dtype.

- `fold_norms`: Gemma's RMSNorm multiplies by (1 + w) before a linear; (x * f) @ W^T = x @ (W * f)^T, so
  the factor moves into the columns of the q/k/v, gate/up and (pi0) action-out weights.
- `fuse_projections`: q, k, v become one linear and gate, up another (one matmul instead of three / two).
- `drop_unused_query`: the prefix's last layer projects only the keys and values the expert reads.
- `fold_pi0_time`: pi0's action-time MLP reads [action_in_proj(x), temb_k]; the time half is a per-step
  bias precomputed into the time table and action_in_proj is folded into the action half, so a step runs
  one (A -> width) matmul where it ran two, and none on the time embedding.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import cast

import torch
from torch import Tensor, nn

from hotloop.families.pi.blocks import BlockNorm, DecoderBlock
from hotloop.families.pi.engines import (
    DenoiseLoopEngine,
    DenoiseStepEngine,
    PrefixEngine,
    SubEngine,
    SuffixEmbed,
    VisionBlock,
    VisionEngine,
)


def shallow_clone(module: nn.Module) -> nn.Module:
    """A structural copy of `module` whose parameters and buffers are the original tensors (not copies)."""
    memo: dict[int, object] = {id(t): t for t in module.parameters()}
    memo.update({id(t): t for t in module.buffers()})
    return copy.deepcopy(module, memo)


def linear_from(weight: Tensor, bias: Tensor | None, dtype: torch.dtype) -> nn.Linear:
    """A frozen nn.Linear holding `weight` (out, in) and `bias`, rounded to `dtype`."""
    out_features, in_features = weight.shape
    lin = nn.Linear(in_features, out_features, bias=bias is not None, device=weight.device, dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(weight)
        if bias is not None and lin.bias is not None:
            lin.bias.copy_(bias)
    return lin.requires_grad_(False)


def _scaled_columns(lin: nn.Linear, factor: Tensor) -> nn.Linear:
    w = lin.weight.detach().float() * factor.float()[None, :]
    b = None if lin.bias is None else lin.bias.detach()
    return linear_from(w, b, lin.weight.dtype)


def _fold(norm: BlockNorm, linears: list[nn.Module]) -> list[nn.Module]:
    if norm.factor is None:
        return linears
    factor = norm.factor
    norm.factor = None
    return [_scaled_columns(cast(nn.Linear, lin), factor) for lin in linears]


def _fold_block(block: DecoderBlock) -> None:
    factor = block.attn_norm.factor
    block.qkv = nn.ModuleList(_fold(block.attn_norm, list(block.qkv)))
    if block.kv_proj is not None and factor is not None:
        block.kv_proj = _scaled_columns(cast(nn.Linear, block.kv_proj), factor)
    block.gate_up = nn.ModuleList(_fold(block.mlp_norm, list(block.gate_up)))


def _concat(linears: nn.ModuleList) -> nn.ModuleList:
    if len(linears) == 1:
        return linears
    lins = [cast(nn.Linear, lin) for lin in linears]
    weight = torch.cat([lin.weight.detach() for lin in lins])
    biases = [lin.bias for lin in lins]
    bias = None if any(b is None for b in biases) else torch.cat([cast(Tensor, b).detach() for b in biases])
    return nn.ModuleList([linear_from(weight, bias, weight.dtype)])


def _fuse_block(block: DecoderBlock) -> None:
    block.qkv = _concat(block.qkv)
    block.gate_up = _concat(block.gate_up)


def _rewrite(
    engines: Mapping[str, SubEngine],
    prefix_fn: Callable[[PrefixEngine], None],
    step_fn: Callable[[DenoiseStepEngine], None],
) -> dict[str, SubEngine]:
    """Apply in-place rewrites to clones of the prefix and step modules; rebuild the loop around the step."""
    out = dict(engines)
    prefix = cast(PrefixEngine, shallow_clone(engines["prefix"].module))
    prefix_fn(prefix)
    out["prefix"] = replace_module(engines["prefix"], prefix)
    step = cast(DenoiseStepEngine, shallow_clone(engines["denoise_step"].module))
    step_fn(step)
    out.update(with_step(engines, step))
    return out


def _rewrite_decoder_blocks(
    engines: Mapping[str, SubEngine],
    block_fn: Callable[[DecoderBlock], None],
    then_step: Callable[[DenoiseStepEngine], None] = lambda step: None,
) -> dict[str, SubEngine]:
    """`_rewrite` with `block_fn` on every decoder block of the prefix (VLM) and of the step (expert), then
    `then_step` on the step."""

    def each_block(engine: PrefixEngine | DenoiseStepEngine) -> None:
        for block in engine.blocks:
            block_fn(cast(DecoderBlock, block))

    def step_fn(step: DenoiseStepEngine) -> None:
        each_block(step)
        then_step(step)

    return _rewrite(engines, each_block, step_fn)


def replace_module(engine: SubEngine, module: nn.Module) -> SubEngine:
    return SubEngine(
        engine.name, module, engine.example_inputs, engine.input_names, engine.output_names, engine.constants
    )


def with_step(
    engines: Mapping[str, SubEngine], step: DenoiseStepEngine, table: Tensor | None = None
) -> dict[str, SubEngine]:
    """New denoise_step / denoise_loop engines around `step`, with a new time table when given."""
    old_step, old_loop = engines["denoise_step"], engines["denoise_loop"]
    loop_module = cast(DenoiseLoopEngine, old_loop.module)
    table = table if table is not None else old_step.constants["time_table"]

    def inputs(engine: SubEngine, name: str, value: Tensor) -> tuple[Tensor, ...]:
        return tuple(
            value if n == name else x for n, x in zip(engine.input_names, engine.example_inputs, strict=True)
        )

    constants = {**old_step.constants, "time_table": table}
    return {
        "denoise_step": SubEngine(
            "denoise_step",
            step,
            inputs(old_step, "time_cond", table[0]),
            old_step.input_names,
            old_step.output_names,
            constants,
        ),
        "denoise_loop": SubEngine(
            "denoise_loop",
            DenoiseLoopEngine(step, loop_module.num_steps).eval(),
            inputs(old_loop, "time_table", table),
            old_loop.input_names,
            old_loop.output_names,
            constants,
        ),
    }


def fold_norms(engines: Mapping[str, SubEngine]) -> dict[str, SubEngine]:
    """Move every plain RMSNorm's (1 + w) into the following linear(s) (see module docstring)."""

    def fold_final_norm(step: DenoiseStepEngine) -> None:
        step.action_out_proj = cast(nn.Linear, _fold(step.final_norm, [step.action_out_proj])[0])

    return _rewrite_decoder_blocks(engines, _fold_block, fold_final_norm)


def fuse_projections(engines: Mapping[str, SubEngine]) -> dict[str, SubEngine]:
    """One q/k/v linear and one gate/up linear per decoder block (prefix and expert), one q/k/v linear
    per SigLIP block (vision)."""

    out = _rewrite_decoder_blocks(engines, _fuse_block)
    vision = cast(VisionEngine, shallow_clone(engines["vision"].module))
    for block in vision.blocks:
        cast(VisionBlock, block).qkv = _concat(cast(VisionBlock, block).qkv)
    out["vision"] = replace_module(engines["vision"], vision)
    return out


def drop_unused_query(engines: Mapping[str, SubEngine]) -> dict[str, SubEngine]:
    """The VLM's last layer feeds the expert only through its keys and values: project just those.

    The model computes that layer's queries too and throws them away (1/depth of the prefix's q work).
    """

    def prefix_fn(prefix: PrefixEngine) -> None:
        last = cast(DecoderBlock, prefix.blocks[-1])
        weights = torch.cat([cast(nn.Linear, lin).weight.detach() for lin in last.qkv])
        q_rows = last.num_heads * last.head_dim
        last.kv_proj = linear_from(weights[q_rows:], None, weights.dtype)

    return _rewrite(engines, prefix_fn, lambda step: None)


class FoldedPi0SuffixEmbed(nn.Module):
    """pi0's suffix tokens with the time half of the action-time MLP as a per-step bias (`time_cond`)."""

    def __init__(self, embed: SuffixEmbed, action_in: nn.Linear) -> None:
        super().__init__()
        self.pi05 = False
        self.action_in = action_in  # action_time_mlp_in's action half composed with action_in_proj
        self.state_proj = embed.state_proj
        self.action_time_mlp_out = embed.action_time_mlp_out

    def forward(self, x_t: Tensor, time_cond: Tensor, state: Tensor | None) -> Tensor:
        dtype = self.action_in.weight.dtype
        assert state is not None
        hidden = self.action_in(x_t.to(dtype)) + time_cond.to(dtype)
        action_time = self.action_time_mlp_out(torch.nn.functional.silu(hidden))
        return torch.cat((self.state_proj(state.to(dtype))[:, None, :], action_time), dim=1)


def fold_pi0_time(engines: Mapping[str, SubEngine]) -> dict[str, SubEngine]:
    """pi0 only: precompute the time half of the action-time MLP per step (see module docstring)."""
    step = cast(DenoiseStepEngine, shallow_clone(engines["denoise_step"].module))
    embed = step.embed
    if embed.pi05:
        raise ValueError("fold_pi0_time applies to pi0 engines; pi0.5 has no action-time MLP")
    ew = embed.action_in_proj.weight.shape[0]
    w_in = embed.action_in_proj.weight.detach().float()
    b_in = embed.action_in_proj.bias.detach().float()
    mlp_in = embed.action_time_mlp_in
    w_action, w_time = mlp_in.weight.detach().float().split(ew, dim=1)
    b_mlp = mlp_in.bias.detach().float()
    dtype = mlp_in.weight.dtype
    action_in = linear_from(w_action @ w_in, w_action @ b_in, dtype)
    temb = engines["denoise_step"].constants["time_table"]  # (N, width) float32 values of dtype
    time_bias = (temb.to(dtype).float() @ w_time.T + b_mlp).to(dtype).float()
    step.embed = cast(SuffixEmbed, FoldedPi0SuffixEmbed(embed, action_in))
    return {**engines, **with_step(engines, step, time_bias)}
