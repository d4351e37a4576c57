"""SmolVLM2 pieces as SmolVLA runs them: the SigLIP-style vision tower, the pixel-shuffle connector, and
Llama decoder layers (VLM text model and action expert), as plain nn.Modules.

Module and parameter names follow transformers' `SmolVLMModel` (`vision_model.embeddings.patch_embedding`,
`encoder.layers.{i}.self_attn.q_proj`, `connector.modality_projection.proj`, `layers.{i}.mlp.gate_proj`...) so a
LeRobot state dict loads by name. The numerics follow what LeRobot's `smolvlm_with_expert.py` (commit 7427f318)
actually executes, which is not always what transformers' Llama would do:

- RoPE is LeRobot's own `apply_rope` with base 10000 (the VLM config's `rope_theta` is never read), angles as
  position / 10000^(2j/D) in float32, halves split (not interleaved);
- attention is LeRobot's eager attention: K/V heads repeated to the query heads, scores scaled after the
  matmul, masked with `torch.where(mask, scores, finfo(float32).min)` (not added), softmax in float32;
- the vision tower is transformers' (sdpa attention, no mask, position ids bucketed from the patch grid).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.models.gemma import rms_normalize
from hotloop.models.siglip import SiglipAttention, SiglipLayer, SiglipMLP

# Vision activations transformers' ACT2FN maps these names to, with the same numerics.
VISION_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu")
TEXT_ACTIVATIONS = ("silu",)
ROPE_BASE = 10_000  # LeRobot's apply_rope `max_wavelength`; the VLM config's rope_theta is not used


@dataclass(frozen=True)
class SmolVLMVisionConfig:
    """The vision tower. `positions_per_side` is the position table's side (the VLM config's
    image_size // patch_size); the images actually fed may be another size (positions are then bucketed)."""

    width: int
    mlp_dim: int
    depth: int
    num_heads: int
    patch_size: int
    num_channels: int
    positions_per_side: int
    eps: float = 1e-6
    act: str = "gelu_pytorch_tanh"

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads


@dataclass(frozen=True)
class LlamaConfig:
    """One Llama stack (the VLM's text model or the action expert).

    `kv_in` is each layer's K/V projection input width: the model width, except in the expert's
    cross-attention layers, whose k_proj / v_proj read the VLM's cached keys/values (kv_heads * head_dim).
    """

    width: int
    mlp_dim: int
    depth: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float
    kv_in: tuple[int, ...]
    attention_bias: bool = False
    mlp_bias: bool = False
    act: str = "silu"

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim


@dataclass(frozen=True)
class SmolVLMConfig:
    vision: SmolVLMVisionConfig
    text: LlamaConfig
    scale_factor: int
    vocab_size: int


# ---- vision ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _position_ids(grid_h: int, grid_w: int, per_side: int) -> tuple[int, ...]:
    """transformers' SmolVLMVisionEmbeddings position ids for a full patch mask, by its own float32 ops.

    Each patch row/column gets the bucket of its fractional coordinate among `per_side` buckets, so a grid of
    the table's size gives 0..n-1 row-major and any other grid is spread over the table. The arithmetic
    (arange with a float32 step, bucketize with right=True) is copied because bucket edges are float32 values.
    """
    boundaries = torch.arange(1 / per_side, 1.0, 1 / per_side, device="cpu")
    # transformers passes 1 / (an int64 patch count) as a float32 tensor: the step is that float32 value.
    rows = torch.arange(0, 1 - 1e-6, float(1 / torch.tensor(grid_h)), device="cpu")
    cols = torch.arange(0, 1 - 1e-6, float(1 / torch.tensor(grid_w)), device="cpu")
    bucket_h = torch.bucketize(rows, boundaries, right=True)
    bucket_w = torch.bucketize(cols, boundaries, right=True)
    return tuple((bucket_h[:, None] * per_side + bucket_w).flatten().tolist())


def vision_position_ids(
    grid_h: int, grid_w: int, per_side: int, device: torch.device | None = None
) -> Tensor:
    """(grid_h * grid_w,) int64 ids into the vision position table (a constant for traced graphs)."""
    return torch.tensor(_position_ids(grid_h, grid_w, per_side), dtype=torch.int64, device=device)


class VisionEmbeddings(nn.Module):
    def __init__(self, cfg: SmolVLMVisionConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.patch_embedding = nn.Conv2d(
            cfg.num_channels, cfg.width, kernel_size=cfg.patch_size, stride=cfg.patch_size
        )
        self.position_embedding = nn.Embedding(cfg.positions_per_side**2, cfg.width)

    def forward(self, pixel_values: Tensor, record: dict[str, Tensor] | None = None) -> Tensor:
        patches = self.patch_embedding(pixel_values)
        gh, gw = int(patches.shape[2]), int(patches.shape[3])
        ids = vision_position_ids(gh, gw, self.cfg.positions_per_side, patches.device)
        if record is not None:
            record["patch_embeds"] = patches
            record["position_ids"] = ids[None].expand(patches.shape[0], -1)
        # (N, C, gh, gw) -> (N, gh*gw, C): patch (r, c) is token r*gw + c.
        return patches.flatten(2).transpose(1, 2) + self.position_embedding(ids)


class VisionEncoderLayer(SiglipLayer):
    """SigLIP's pre-LN block with SmolVLM's attention and its configured GELU."""

    def attention(self, cfg: SmolVLMVisionConfig) -> nn.Module:
        # transformers' sdpa path with no mask (every patch is real): the scale is passed explicitly.
        return SiglipAttention(cfg, scale=cfg.head_dim**-0.5)

    def feed_forward(self, cfg: SmolVLMVisionConfig) -> nn.Module:
        return SiglipMLP(cfg, "tanh" if cfg.act == "gelu_pytorch_tanh" else "none")


class VisionEncoder(nn.Module):
    def __init__(self, cfg: SmolVLMVisionConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(VisionEncoderLayer(cfg) for _ in range(cfg.depth))


class VisionTransformer(nn.Module):
    """pixel values (N, C, H, W) -> patch features (N, (H/p)*(W/p), width) after post_layernorm."""

    def __init__(self, cfg: SmolVLMVisionConfig) -> None:
        super().__init__()
        self.embeddings = VisionEmbeddings(cfg)
        self.encoder = VisionEncoder(cfg)
        self.post_layernorm = nn.LayerNorm(cfg.width, eps=cfg.eps)

    def forward(self, pixel_values: Tensor, record: dict[str, Tensor] | None = None) -> Tensor:
        x = self.embeddings(pixel_values.to(self.post_layernorm.weight.dtype), record)
        for layer in self.encoder.layers:
            x = layer(x)
        return self.post_layernorm(x)


def pixel_shuffle(x: Tensor, scale: int) -> Tensor:
    """transformers' SmolVLMConnector.pixel_shuffle: (N, n*n, d) -> (N, n*n/s^2, d*s^2), square grids only."""
    bsz, seq, dim = x.shape
    side = int(seq**0.5)
    x = x.view(bsz, side, side, dim)
    x = x.view(bsz, side, side // scale, dim * scale)
    x = x.permute(0, 2, 1, 3)
    x = x.reshape(bsz, side // scale, side // scale, dim * scale * scale)
    x = x.permute(0, 2, 1, 3)
    return x.reshape(bsz, seq // (scale * scale), dim * scale * scale)


class ModalityProjection(nn.Module):
    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_dim, out_dim, bias=False)


class Connector(nn.Module):
    """Pixel shuffle by `scale_factor`, then one Linear without bias into the text width (no rescaling)."""

    def __init__(self, cfg: SmolVLMConfig) -> None:
        super().__init__()
        self.scale_factor = cfg.scale_factor
        self.modality_projection = ModalityProjection(cfg.vision.width * cfg.scale_factor**2, cfg.text.width)

    def forward(self, x: Tensor) -> Tensor:
        return self.modality_projection.proj(pixel_shuffle(x, self.scale_factor))


# ---- Llama layers ------------------------------------------------------------------------------------------


class LlamaRMSNorm(nn.Module):
    """y = w * (x / rms(x)) with the normalisation in float32 (transformers' LlamaRMSNorm)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * rms_normalize(x, self.eps).to(x.dtype)


class LlamaAttention(nn.Module):
    """Projections only; which keys a layer reads is decided by the caller (prefix, self or cross)."""

    def __init__(self, cfg: LlamaConfig, kv_in: int) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.width, cfg.num_heads * cfg.head_dim, bias=bias)
        self.k_proj = nn.Linear(kv_in, cfg.num_kv_heads * cfg.head_dim, bias=bias)
        self.v_proj = nn.Linear(kv_in, cfg.num_kv_heads * cfg.head_dim, bias=bias)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.width, bias=bias)

    def heads(self, proj: nn.Linear, x: Tensor) -> Tensor:
        """(B, L, in) -> (B, L, heads, head_dim), in the projection's dtype (as LeRobot casts)."""
        out = proj(x.to(proj.weight.dtype))
        return out.view(*out.shape[:-1], -1, self.head_dim)


class LlamaMLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.width, cfg.mlp_dim, bias=cfg.mlp_bias)
        self.up_proj = nn.Linear(cfg.width, cfg.mlp_dim, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.mlp_dim, cfg.width, bias=cfg.mlp_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig, kv_in: int) -> None:
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(cfg.width, cfg.eps)
        self.self_attn = LlamaAttention(cfg, kv_in)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.width, cfg.eps)
        self.mlp = LlamaMLP(cfg)

    def finish(self, x: Tensor, att: Tensor) -> Tensor:
        """Everything after attention: o_proj, residual, RMSNorm, gated MLP, residual (LeRobot's order)."""
        out = self.self_attn.o_proj(att.to(self.self_attn.o_proj.weight.dtype)) + x
        return self.mlp(self.post_attention_layernorm(out)) + out


class LlamaStack(nn.Module):
    """`layers` + final `norm`, with the token table only where the checkpoint has one (the VLM)."""

    def __init__(self, cfg: LlamaConfig, vocab_size: int | None) -> None:
        super().__init__()
        if vocab_size is not None:
            self.embed_tokens = nn.Embedding(vocab_size, cfg.width)
        self.layers = nn.ModuleList(LlamaLayer(cfg, cfg.kv_in[i]) for i in range(cfg.depth))
        self.norm = LlamaRMSNorm(cfg.width, cfg.eps)


# ---- LeRobot's RoPE and eager attention --------------------------------------------------------------------


def rope_tables(positions: Tensor, head_dim: int) -> tuple[Tensor, Tensor]:
    """(cos, sin) (B, L, 1, head_dim/2) float32 for integer positions (B, L), as LeRobot's apply_rope.

    Kept as a separate step so that all layers share one table; the values are exactly LeRobot's: angle =
    position / 10000^((2/D) * j), each step in float32.
    """
    half = head_dim // 2
    exponents = (2.0 / head_dim) * torch.arange(half, dtype=torch.float32, device=positions.device)
    timescale = ROPE_BASE**exponents
    radians = positions[..., None].to(torch.float32) / timescale[None, None, :]
    radians = radians[..., None, :]
    return torch.cos(radians), torch.sin(radians)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, L, H, D) -> rotated, computed in float32 and cast back: [x1 cos - x2 sin, x2 cos + x1 sin]."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x1, x2 = x.split(x.shape[-1] // 2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(dtype)


def eager_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, head_dim: int) -> Tensor:
    """LeRobot's eager_attention_forward. q (B, Lq, H, D); k, v (B, Lk, KV, D); mask (B, Lq, Lk) bool.

    K/V heads are repeated to the query heads (head h reads kv head h // (H/KV)); q and k are cast to float32,
    the probabilities back to v's dtype. Returns (B, Lq, H*D).
    """
    b, lk, kv, d = k.shape
    h = q.shape[2]
    groups = h // kv
    k = k[:, :, :, None, :].expand(b, lk, kv, groups, d).reshape(b, lk, h, d)
    v = v[:, :, :, None, :].expand(b, lk, kv, groups, d).reshape(b, lk, h, d)
    qf = q.to(torch.float32).transpose(1, 2)
    kf = k.to(torch.float32).transpose(1, 2)
    scores = torch.matmul(qf, kf.transpose(2, 3)) * head_dim**-0.5
    scores = torch.where(mask[:, None, :, :], scores, torch.finfo(torch.float32).min)
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    out = torch.matmul(probs, v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)
    return out.reshape(b, -1, h * d)


__all__ = [
    "Connector",
    "LlamaConfig",
    "LlamaLayer",
    "LlamaStack",
    "SmolVLMConfig",
    "SmolVLMVisionConfig",
    "VisionTransformer",
    "apply_rope",
    "eager_attention",
    "pixel_shuffle",
    "rope_tables",
    "vision_position_ids",
]
