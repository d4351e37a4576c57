"""Gemma decoder pieces for the pi0 family: RMSNorm (1 + w), adaptive RMSNorm, RoPE, MQA/GQA attention,
GeGLU MLP and one decoder layer.

Submodule names inside a layer follow Hugging Face's Gemma (`self_attn.q_proj`, `mlp.gate_proj`,
`input_layernorm`...) so checkpoint keys map by prefix only. A layer does not own its attention span: the
caller passes the keys/values it may read (`past_k`, `past_v`), which is how the action expert reads the
VLM's prefix cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.models.configs import GemmaConfig

# LeRobot/openpi's additive mask value: finite, so a query with no allowed key gets a uniform softmax
# instead of NaN (the fixtures depend on this for padding rows).
MASK_VALUE = -2.3819763e38


def rms_normalize(x: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps), in float32 whatever x's dtype (bf16 sums of squares lose too much)."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class RMSNorm(nn.Module):
    """Gemma's RMSNorm: the weight acts as (1 + w), so a zero-initialised weight is the identity."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor, cond: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        out = rms_normalize(x, self.eps) * (1.0 + self.weight.float())
        return out.type_as(x), None


class AdaRMSNorm(nn.Module):
    """pi0.5's adaptive RMSNorm: dense(cond) -> (scale, shift, gate) in that order; no weight of its own.

    Returns the normalised input and the gate the following residual multiplies its update by.
    """

    def __init__(self, dim: int, cond_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)

    def forward(self, x: Tensor, cond: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        if cond is None:
            raise ValueError("AdaRMSNorm needs the time conditioning `cond`")
        if cond.ndim == 3:
            # One time per token (training-time action conditioning): the dense layer runs per token
            # position on (B, width), the one-time path's shape, so equal times give identical bits.
            mod = torch.stack([self.dense(cond[:, j]) for j in range(cond.shape[1])], dim=1)
        else:
            mod = self.dense(cond).unsqueeze(1)
        scale, shift, gate = mod.chunk(3, dim=-1)
        out = rms_normalize(x, self.eps) * (1.0 + scale.float()) + shift.float()
        return out.to(x.dtype), gate.to(x.dtype)


def rope_cos_sin(positions: Tensor, head_dim: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos/sin tables (B, L, head_dim) for integer positions (B, L); halves repeated, not interleaved.

    Angles are computed in float32 even for bf16 models: position x inv_freq exceeds bf16's precision.
    """
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    angles = positions.float()[..., None] * inv_freq
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, heads, L, D); rotate_half([a, b]) = [-b, a]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
    """Grouped-query attention with an explicit matmul-softmax(float32)-matmul.

    q (B, H, Lq, D); k, v (B, KV, Lk, D); mask additive (B, 1, Lq, Lk). Query heads are folded into the
    kv-head groups instead of repeating K/V, so multi-query attention reads the single K/V head once.
    Returns (B, Lq, H * D).
    """
    b, h, lq, d = q.shape
    kv = k.shape[1]
    g = h // kv
    qg = q.reshape(b, kv, g * lq, d)
    scores = torch.matmul(qg, k.transpose(-1, -2)) * scale  # (B, KV, G*Lq, Lk)
    scores = scores.view(b, kv, g, lq, -1) + mask.unsqueeze(2)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(probs.view(b, kv, g * lq, -1), v).view(b, h, lq, d)
    return out.transpose(1, 2).reshape(b, lq, h * d)


class GemmaAttention(nn.Module):
    """Projections only (no biases); the attention span is chosen by the caller."""

    def __init__(self, cfg: GemmaConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.width, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.width, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.width, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.width, bias=False)

    def qkv(self, h: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, L, width) -> q (B, H, L, D), k, v (B, KV, L, D); RoPE already applied to q and k."""
        b, n, _ = h.shape
        q = self.q_proj(h).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


class GemmaMLP(nn.Module):
    """GeGLU: down(gelu_tanh(gate(x)) * up(x))."""

    def __init__(self, cfg: GemmaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.width, cfg.mlp_dim, bias=False)
        self.up_proj = nn.Linear(cfg.width, cfg.mlp_dim, bias=False)
        self.down_proj = nn.Linear(cfg.mlp_dim, cfg.width, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


def gated_residual(x: Tensor, y: Tensor, gate: Tensor | None) -> Tensor:
    return x + y if gate is None else x + y * gate


class DecoderLayerBase(nn.Module):
    """One Gemma decoder layer's computation over the parts a subclass names: its two norms (`norm`), the
    projections to q, k, v with RoPE applied (`project`), the attention's output projection (`attn_out`)
    and the MLP (`mlp_out`). `GemmaLayer` holds Hugging Face's modules; pi's `DecoderBlock`
    (`hotloop.families.pi.blocks`) the same weights arranged for its sub-engines."""

    head_dim: int

    def norm(self, which: int, x: Tensor, cond: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Norm `which` (0 before the attention, 1 before the MLP) of x, and its residual gate."""
        raise NotImplementedError

    def project(self, h: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError

    def attn_out(self, out: Tensor) -> Tensor:
        raise NotImplementedError

    def mlp_out(self, h: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        mask: Tensor,
        cond: Tensor | None = None,
        past_k: Tensor | None = None,
        past_v: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Returns (new x, this layer's keys after RoPE, values) for the tokens in x.

        With `past_k`/`past_v` the queries attend to [past, own] keys along the sequence; `mask` covers
        that whole span. `cond`: what the norms are conditioned on (pi0.5's time embedding; for a
        `DecoderBlock`, both norms' modulations).
        """
        h, gate = self.norm(0, x, cond)
        q, k, v = self.project(h, cos, sin)
        keys = k if past_k is None else torch.cat((past_k, k), dim=2)
        values = v if past_v is None else torch.cat((past_v, v), dim=2)
        out = attend(q, keys, values, mask, self.head_dim**-0.5)
        x = gated_residual(x, self.attn_out(out), gate)
        h, gate = self.norm(1, x, cond)
        return gated_residual(x, self.mlp_out(h), gate), k, v


class GemmaLayer(DecoderLayerBase):
    """One decoder layer. `adaptive=True` (pi0.5 expert) swaps both norms for AdaRMSNorm."""

    def __init__(self, cfg: GemmaConfig, adaptive: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.head_dim = cfg.head_dim
        self.input_layernorm: nn.Module = (
            AdaRMSNorm(cfg.width, cfg.width, cfg.eps) if adaptive else RMSNorm(cfg.width, cfg.eps)
        )
        self.self_attn = GemmaAttention(cfg)
        self.post_attention_layernorm: nn.Module = (
            AdaRMSNorm(cfg.width, cfg.width, cfg.eps) if adaptive else RMSNorm(cfg.width, cfg.eps)
        )
        self.mlp = GemmaMLP(cfg)

    def norm(self, which: int, x: Tensor, cond: Tensor | None) -> tuple[Tensor, Tensor | None]:
        return (self.post_attention_layernorm if which else self.input_layernorm)(x, cond)  # type: ignore[no-any-return]

    def project(self, h: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.self_attn.qkv(h, cos, sin)

    def attn_out(self, out: Tensor) -> Tensor:
        return self.self_attn.o_proj(out)  # type: ignore[no-any-return]

    def mlp_out(self, h: Tensor) -> Tensor:
        return self.mlp(h)  # type: ignore[no-any-return]

    def kv_only(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """Keys (after RoPE) and values of x without the rest of the layer.

        The VLM's last layer feeds the expert only through its K/V: its queries, attention output and MLP
        would be computed and thrown away (as the peers do), 1/depth of the prefix cost.
        """
        h, _ = self.input_layernorm(x, None)
        _, k, v = self.self_attn.qkv(h, cos, sin)
        return k, v


class GemmaStack(nn.Module):
    """The layers and final norm of one Gemma stack (token embeddings live with the policy)."""

    def __init__(self, cfg: GemmaConfig, adaptive: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(GemmaLayer(cfg, adaptive) for _ in range(cfg.depth))
        self.norm: nn.Module = (
            AdaRMSNorm(cfg.width, cfg.width, cfg.eps) if adaptive else RMSNorm(cfg.width, cfg.eps)
        )
