"""ACT's transformer pieces (LeRobot `policies/act/modeling_act.py`, commit 7427f318), under its names.

`Attention` is nn.MultiheadAttention's inference path written out (same parameters, same op order, so
results are bitwise LeRobot's and the graph exports without the fused-MHA special cases); the encoder and
decoder layers follow ACTEncoderLayer / ACTDecoderLayer for both post-norm and pre-norm; the two
sinusoids are ACT's 2-D image-token embedding and the VAE encoder's fixed 1-D table.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Attention(nn.Module):
    """nn.MultiheadAttention (sequence-first, eval, no masks) under its parameter names, op for op."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = math.sqrt(1.0 / float(self.head_dim))  # as F.multi_head_attention_forward scales q
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))  # [W_q; W_k; W_v]
        self.in_proj_bias = nn.Parameter(torch.empty(3 * dim))
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        tgt, batch, dim = query.shape
        src, head_dim = key.shape[0], self.head_dim
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        b_q, b_k, b_v = self.in_proj_bias.chunk(3)
        q = F.linear(query, w_q, b_q).view(tgt, batch * self.heads, head_dim).transpose(0, 1)
        k = F.linear(key, w_k, b_k).view(src, batch * self.heads, head_dim).transpose(0, 1)
        v = F.linear(value, w_v, b_v).view(src, batch * self.heads, head_dim).transpose(0, 1)
        weights = torch.bmm(q * self.scale, k.transpose(-2, -1)).softmax(dim=-1)
        out = torch.bmm(weights, v).transpose(0, 1).reshape(tgt * batch, dim)
        return self.out_proj(out).view(tgt, batch, dim)


def _activation(name: str) -> Any:
    return F.relu if name == "relu" else F.gelu


class EncoderLayer(nn.Module):
    """ACTEncoderLayer: self-attention (positions on q, k) then the feed-forward, post- or pre-norm."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        d, eps = cfg.dim_model, cfg.layer_norm_eps
        self.self_attn = Attention(d, cfg.n_heads)
        self.linear1 = nn.Linear(d, cfg.dim_feedforward)
        self.linear2 = nn.Linear(cfg.dim_feedforward, d)
        self.norm1 = nn.LayerNorm(d, eps=eps)
        self.norm2 = nn.LayerNorm(d, eps=eps)
        self.activation = _activation(cfg.feedforward_activation)
        self.pre_norm = cfg.pre_norm

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        skip, x = _self_attention(self, x, pos)
        x = skip + self.linear2(self.activation(self.linear1(x)))
        return x if self.pre_norm else cast(Tensor, self.norm2(x))


def _self_attention(layer: EncoderLayer | DecoderLayer, x: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
    """The self-attention block both layer kinds open with (norm1 before it with pre_norm, after it
    without; then norm2 before the next block): (the residual the next block adds to, its input)."""
    skip = x
    if layer.pre_norm:
        x = layer.norm1(x)
    q = x + pos
    x = skip + layer.self_attn(q, q, x)
    if layer.pre_norm:
        return x, layer.norm2(x)
    x = layer.norm1(x)
    return x, x


class Encoder(nn.Module):
    """ACTEncoder: the layers, then a LayerNorm only with pre_norm (LeRobot's Identity otherwise)."""

    def __init__(self, cfg: Any, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(layers))
        self.norm: nn.Module = (
            nn.LayerNorm(cfg.dim_model, eps=cfg.layer_norm_eps) if cfg.pre_norm else nn.Identity()
        )

    def forward(self, x: Tensor, pos: Tensor, record: dict[str, Tensor] | None = None) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, pos)
            if record is not None:
                record[f"encoder_layer{i}_out"] = x
        return cast(Tensor, self.norm(x))


class DecoderLayer(nn.Module):
    """ACTDecoderLayer: self-attention, cross-attention to the encoder, feed-forward (norm1..norm3)."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        d, eps = cfg.dim_model, cfg.layer_norm_eps
        self.self_attn = Attention(d, cfg.n_heads)
        self.multihead_attn = Attention(d, cfg.n_heads)
        self.linear1 = nn.Linear(d, cfg.dim_feedforward)
        self.linear2 = nn.Linear(cfg.dim_feedforward, d)
        self.norm1 = nn.LayerNorm(d, eps=eps)
        self.norm2 = nn.LayerNorm(d, eps=eps)
        self.norm3 = nn.LayerNorm(d, eps=eps)
        self.activation = _activation(cfg.feedforward_activation)
        self.pre_norm = cfg.pre_norm

    def forward(self, x: Tensor, memory: Tensor, pos: Tensor, memory_pos: Tensor) -> Tensor:
        skip, x = _self_attention(self, x, pos)
        x = skip + self.multihead_attn(x + pos, memory + memory_pos, memory)
        if self.pre_norm:
            skip, x = x, self.norm3(x)
        else:
            x = skip = self.norm2(x)
        x = skip + self.linear2(self.activation(self.linear1(x)))
        return x if self.pre_norm else cast(Tensor, self.norm3(x))


class Decoder(nn.Module):
    """ACTDecoder: every layer runs, then the final LayerNorm (present with pre- and post-norm)."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        self.norm = nn.LayerNorm(cfg.dim_model, eps=cfg.layer_norm_eps)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        pos: Tensor,
        memory_pos: Tensor,
        record: dict[str, Tensor] | None = None,
    ) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, pos, memory_pos)
            if record is not None:
                record[f"decoder_layer{i}_out"] = x
        return cast(Tensor, self.norm(x))


def sinusoid_2d(feature_map: Tensor, dim_half: int) -> Tensor:
    """ACTSinusoidalPositionEmbedding2d(dim_half) of a (B, C, h, w) map -> (1, 2 * dim_half, h, w), float32.

    Coordinates are 1..h and 1..w (cumsum of ones), normalised by (last + 1e-6) and scaled by 2*pi;
    sin on even channels, cos on odd, interleaved; the y half comes first. Same op order as LeRobot.
    """
    ones = torch.ones_like(feature_map[0, :1])  # (1, h, w)
    y = ones.cumsum(1, dtype=torch.float32)
    x = ones.cumsum(2, dtype=torch.float32)
    two_pi, eps = 2 * math.pi, 1e-6
    y = y / (y[:, -1:, :] + eps) * two_pi
    x = x / (x[:, :, -1:] + eps) * two_pi
    steps = torch.arange(dim_half, dtype=torch.float32, device=feature_map.device)
    inverse_frequency = 10000 ** (2 * (steps // 2) / dim_half)
    x = x.unsqueeze(-1) / inverse_frequency
    y = y.unsqueeze(-1) / inverse_frequency
    pos_x = torch.stack((x[..., 0::2].sin(), x[..., 1::2].cos()), dim=-1).flatten(3)
    pos_y = torch.stack((y[..., 0::2].sin(), y[..., 1::2].cos()), dim=-1).flatten(3)
    return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


def sinusoid_1d(positions: int, dim: int) -> Tensor:
    """create_sinusoidal_pos_embedding: the VAE encoder's fixed table (float64 numpy, then float32)."""
    angles = np.array(
        [[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(positions)]
    )
    angles[:, 0::2] = np.sin(angles[:, 0::2])
    angles[:, 1::2] = np.cos(angles[:, 1::2])
    return torch.from_numpy(angles).float()


__all__ = ["Attention", "Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "sinusoid_1d", "sinusoid_2d"]
