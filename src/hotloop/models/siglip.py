"""SigLIP vision tower (no pooling head) and the PaliGemma projector, as plain nn.Modules.

Submodule names follow Hugging Face's `SiglipVisionModel` inside a layer (`self_attn.q_proj`, `mlp.fc1`,
`layer_norm1`...) so the checkpoint key map only has to rewrite prefixes.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.models.configs import VisionConfig


class SiglipAttention(nn.Module):
    """Unmasked multi-head attention. `scale`: the softmax scale SDPA is given (None: its default,
    head_dim^-0.5, as in SigLIP; SmolVLM's vision tower, transformers' sdpa path, passes it explicitly)."""

    def __init__(self, cfg: Any, scale: float | None = None) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.width // cfg.num_heads
        self.scale = scale
        self.q_proj = nn.Linear(cfg.width, cfg.width)
        self.k_proj = nn.Linear(cfg.width, cfg.width)
        self.v_proj = nn.Linear(cfg.width, cfg.width)
        self.out_proj = nn.Linear(cfg.width, cfg.width)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        q, k, v = (
            p(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        # No mask: every patch sees every patch.
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, -1))


class SiglipMLP(nn.Module):
    """fc2(gelu(fc1(x))), the GELU tanh-approximated (`approximate`: "none" for the exact one). `cfg`: any
    vision config with `width` and `mlp_dim` (SmolVLM's vision tower is a SigLIP too)."""

    def __init__(self, cfg: Any, approximate: str = "tanh") -> None:
        super().__init__()
        self.approximate = approximate
        self.fc1 = nn.Linear(cfg.width, cfg.mlp_dim)
        self.fc2 = nn.Linear(cfg.mlp_dim, cfg.width)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class SiglipLayer(nn.Module):
    """Pre-LN transformer block. `cfg`: any vision config with `width` and `eps`; a subclass with another
    attention or MLP (SmolVLM's vision tower) states only those (`attention`, `feed_forward`)."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.self_attn = self.attention(cfg)
        self.layer_norm2 = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.mlp = self.feed_forward(cfg)

    def attention(self, cfg: Any) -> nn.Module:
        return SiglipAttention(cfg)

    def feed_forward(self, cfg: Any) -> nn.Module:
        return SiglipMLP(cfg)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class SiglipVision(nn.Module):
    """images (N, 3, H, W) in [-1, 1] -> patch features (N, tokens, width) after the final LayerNorm."""

    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.patch_embedding = nn.Conv2d(3, cfg.width, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.position_embedding = nn.Embedding(cfg.tokens_per_view, cfg.width)
        self.layers = nn.ModuleList(SiglipLayer(cfg) for _ in range(cfg.depth))
        self.post_layernorm = nn.LayerNorm(cfg.width, eps=cfg.eps)

    def forward(self, images: Tensor) -> Tensor:
        # (N, C, g, g) -> (N, g*g, C): patch (r, c) becomes token r*g + c (row-major).
        x = self.patch_embedding(images.to(self.patch_embedding.weight.dtype)).flatten(2).transpose(1, 2)
        x = x + self.position_embedding.weight
        for layer in self.layers:
            x = layer(x)
        return self.post_layernorm(x)


class Projector(nn.Module):
    """PaliGemma's multi-modal projector: one Linear from vision width to VLM width (no rescaling)."""

    def __init__(self, vision_width: int, vlm_width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(vision_width, vlm_width)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


__all__ = ["Projector", "SiglipVision", "count_parameters"]
