"""The analytic work of one ACT inference per stage (the roofline's numerator): FLOPs of the convolutions,
matmuls and attention (2 per multiply-add) and the weight bytes each stage reads.

Sizes come from the model itself: the ResNet is built on the meta device from the checkpoint's tensor
shapes and run on each camera's shape, so every convolution's output size (strides, dilation, the last
feature map that sets the transformer's token count) is the one the real run has. Norms, activations and
additions are left out, as pi's work model leaves them out.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from hotloop.measure.roofline import BYTES, StageWork, linear_flops
from hotloop.models.act import ACTConfig, ACTModel


def _meta_model(cfg: ACTConfig) -> ACTModel:
    with torch.device("meta"):
        return ACTModel(cfg)


def backbone_work(model: ACTModel) -> tuple[float, list[tuple[int, int, int]]]:
    """(FLOPs of the trunk over every camera at batch 1, each camera's feature map (C, h, w))."""
    cfg = model.cfg
    flops = 0.0

    def count(module: nn.Module, args: tuple[Any, ...], out: Tensor) -> None:
        nonlocal flops
        conv = module
        assert isinstance(conv, nn.Conv2d)
        kh, kw = conv.kernel_size
        per_out = conv.in_channels // conv.groups * kh * kw
        flops += linear_flops(out.shape[-2] * out.shape[-1], per_out, conv.out_channels)

    trunk = model.trunk
    hooks = [m.register_forward_hook(count) for m in trunk.modules() if isinstance(m, nn.Conv2d)]
    maps = []
    try:
        with torch.no_grad():
            for c, h, w in cfg.camera_shapes:
                out = trunk(torch.empty(1, c, h, w, device="meta"))
                maps.append((int(out.shape[1]), int(out.shape[2]), int(out.shape[3])))
    finally:
        for hook in hooks:
            hook.remove()
    return flops, maps


def transformer_flops(cfg: ACTConfig, maps: list[tuple[int, int, int]]) -> float:
    """Projections, encoder, decoder and action head at batch 1 (the VAE encoder does not run)."""
    d, f, t = cfg.dim_model, cfg.dim_feedforward, cfg.chunk_size
    s = cfg.n_1d_tokens + sum(h * w for _, h, w in maps)  # encoder tokens
    flops = linear_flops(1, cfg.latent_dim, d)
    for width in (cfg.state_dim, cfg.env_state_dim):
        if width is not None:
            flops += linear_flops(1, width, d)
    flops += sum(linear_flops(h * w, c, d) for c, h, w in maps)  # 1x1 image projections

    def ffn(tokens: int) -> float:
        return linear_flops(tokens, d, f) + linear_flops(tokens, f, d)

    encoder = linear_flops(s, d, 3 * d) + linear_flops(s, d, d) + 2 * 2.0 * s * s * d + ffn(s)
    self_attention = linear_flops(t, d, 3 * d) + linear_flops(t, d, d) + 2 * 2.0 * t * t * d
    cross = 2 * linear_flops(t, d, d) + linear_flops(s, d, 2 * d) + 2 * 2.0 * t * s * d
    decoder = self_attention + cross + ffn(t)
    flops += cfg.n_encoder_layers * encoder + cfg.n_decoder_layers * decoder
    return flops + linear_flops(t, d, cfg.action_dim)


def parameter_counts(model: ACTModel) -> dict[str, int]:
    """Parameters each stage reads: the trunk's, and the transformer's (the VAE encoder's are loaded
    but never run at inference)."""
    trunk = transformer = 0
    for name, p in model.named_parameters():
        if name.startswith("backbone."):
            trunk += p.numel()
        elif not name.startswith("vae_encoder"):
            transformer += p.numel()
    # FrozenBatchNorm2d holds its affine terms as buffers: the trunk reads them too.
    trunk += sum(b.numel() for n, b in model.named_buffers() if n.startswith("backbone."))
    return {"backbone": trunk, "transformer": transformer}


def act_stage_work(cfg: ACTConfig, precisions: dict[str, str], batch: int = 1) -> dict[str, StageWork]:
    """FLOPs and weight bytes of the backbone (every camera) and the transformer, per inference of
    `batch` observations; each stage's bytes at its own precision."""
    model = _meta_model(cfg)
    counts = parameter_counts(model)
    work: dict[str, StageWork] = {}
    maps: list[tuple[int, int, int]] = []
    if cfg.cameras:
        flops, maps = backbone_work(model)
        p = precisions.get("backbone", "float32")
        work["backbone"] = StageWork(batch * flops, counts["backbone"] * BYTES[p], p)
    p = precisions.get("transformer", "float32")
    work["transformer"] = StageWork(batch * transformer_flops(cfg, maps), counts["transformer"] * BYTES[p], p)
    return work


__all__ = ["act_stage_work", "backbone_work", "parameter_counts", "transformer_flops"]
