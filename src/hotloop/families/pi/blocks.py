"""Tensor-only Gemma decoder blocks for the pi sub-engines, built from a model's layers.

A `DecoderBlock` computes exactly what `models.gemma.GemmaLayer` does, but takes everything that is not a
weight as an input: RoPE tables, the additive mask, and (pi0.5) the adaRMS modulations of this step,
precomputed outside the graph. Its structure is data the transforms in `compile.fuse` rewrite: the
projections are a list (`[q, k, v]` or one fused `[qkv]`; `[gate, up]` or `[gate_up]`) and a plain RMSNorm
keeps its `(1 + w)` factor as a buffer until `fold_norms` moves it into the next linear.
"""

from __future__ import annotations

from typing import cast

import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.models.configs import GemmaConfig
from hotloop.models.gemma import AdaRMSNorm, DecoderLayerBase, GemmaLayer, RMSNorm, apply_rope, rms_normalize

# Rows of one norm's modulation in the pi0.5 time table: (1 + scale, shift, gate).
MOD_SCALE, MOD_SHIFT, MOD_GATE = 0, 1, 2


class BlockNorm(nn.Module):
    """RMSNorm in float32 then rounded to x's dtype; `factor` is Gemma's (1 + w) or None once folded.

    `mods` (3, width) = (1 + scale, shift, gate) makes it pi0.5's adaRMS; the gate is returned for the
    residual. Keeping 1 + scale precomputed is bit-identical to the model's `1.0 + scale.float()`.
    """

    def __init__(self, eps: float, factor: Tensor | None) -> None:
        super().__init__()
        self.eps = eps
        self.factor: Tensor | None
        self.register_buffer("factor", factor)

    def forward(self, x: Tensor, mods: Tensor | None) -> tuple[Tensor, Tensor | None]:
        out = rms_normalize(x, self.eps)
        if self.factor is not None:
            out = out * self.factor
        if mods is None:
            return out.to(x.dtype), None
        out = out * mods[MOD_SCALE] + mods[MOD_SHIFT]
        return out.to(x.dtype), mods[MOD_GATE].to(x.dtype)


def norm_from_model(norm: nn.Module) -> BlockNorm:
    if isinstance(norm, AdaRMSNorm):
        return BlockNorm(norm.eps, None)
    norm = cast(RMSNorm, norm)
    return BlockNorm(norm.eps, 1.0 + norm.weight.detach().float())


def split_outputs(linears: nn.ModuleList, sizes: list[int], x: Tensor) -> list[Tensor]:
    """Outputs of either one fused linear (split by `sizes`) or one linear per output."""
    if len(linears) == 1:
        return list(linears[0](x).split(sizes, dim=-1))
    return [lin(x) for lin in linears]


class DecoderBlock(DecoderLayerBase):
    """One Gemma decoder layer with precomputed side inputs (see module docstring)."""

    def __init__(self, layer: GemmaLayer) -> None:
        super().__init__()
        cfg: GemmaConfig = layer.cfg
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.mlp_dim = cfg.mlp_dim
        attn, mlp = layer.self_attn, layer.mlp
        self.attn_norm = norm_from_model(layer.input_layernorm)
        self.qkv = nn.ModuleList([attn.q_proj, attn.k_proj, attn.v_proj])
        self.o_proj = attn.o_proj
        self.mlp_norm = norm_from_model(layer.post_attention_layernorm)
        self.gate_up = nn.ModuleList([mlp.gate_proj, mlp.up_proj])
        self.down_proj = mlp.down_proj
        # Set by `compile.fuse.drop_unused_query` on a block used only through `kv`: one (k, v) linear.
        self.kv_proj: nn.Module | None = None

    @property
    def qkv_sizes(self) -> list[int]:
        kv = self.num_kv_heads * self.head_dim
        return [self.num_heads * self.head_dim, kv, kv]

    def norm(self, which: int, x: Tensor, cond: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """`cond` (2, 3, width): both norms' modulations (pi0.5), row `which` for this one."""
        return (self.mlp_norm if which else self.attn_norm)(x, None if cond is None else cond[which])  # type: ignore[no-any-return]

    def project(self, h: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, n, _ = h.shape
        q, k, v = split_outputs(self.qkv, self.qkv_sizes, h)
        q = q.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def attn_out(self, out: Tensor) -> Tensor:
        return self.o_proj(out)  # type: ignore[no-any-return]

    def mlp_out(self, h: Tensor) -> Tensor:
        g, u = split_outputs(self.gate_up, [self.mlp_dim, self.mlp_dim], h)
        return self.down_proj(F.gelu(g, approximate="tanh") * u)  # type: ignore[no-any-return]

    def kv(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values only (the VLM's last layer feeds the expert through its cache alone)."""
        h, _ = self.attn_norm(x, None)
        if self.kv_proj is None:
            _, k, v = self.project(h, cos, sin)
            return k, v
        b, n, _ = h.shape
        k, v = (
            self.kv_proj(h).view(b, n, 2 * self.num_kv_heads, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        )
        return apply_rope(k, cos, sin), v


def blocks_from_stack(layers: nn.ModuleList) -> nn.ModuleList:
    return nn.ModuleList(DecoderBlock(cast(GemmaLayer, layer)) for layer in layers)
