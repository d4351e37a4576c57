"""The analytic work of Diffusion Policy's stages (`hotloop bench`'s roofline): FLOPs counted by torch's
FLOP counter on a meta-device copy of the network (shapes only, no weights, no arithmetic), so every
size the checkpoint has (backbone widths, cameras, history, U-Net depth) is counted as it runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from hotloop.measure.roofline import BYTES, StageWork
from hotloop.models.diffusion_config import DiffusionConfig


def _flops(fn: Any) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn()
    return float(counter.get_total_flops())


def diffusion_stage_work(
    cfg: DiffusionConfig, batch: int, num_steps: int, precisions: Mapping[str, str]
) -> dict[str, StageWork]:
    """{"encoder", "denoise"}: FLOPs of one inference (the U-Net N times) and the weights each reads."""
    from hotloop.models.diffusion import DiffusionModel

    with torch.device("meta"):
        model = DiffusionModel(cfg).eval()
        o = cfg.n_obs_steps
        images = None
        if cfg.n_cameras and cfg.image_shape is not None:
            images = torch.empty(batch, o, cfg.n_cameras, *cfg.image_shape)
        state = torch.empty(batch, o, cfg.state_dim)
        env = torch.empty(batch, o, cfg.env_state_dim) if cfg.env_state_dim is not None else None
        x = torch.empty(batch, cfg.horizon, cfg.action_dim)
        t = torch.zeros(batch)
        cond = torch.empty(batch, cfg.global_cond_dim)
        encoder_flops = _flops(lambda: model.encode(images, state, env))
        unet_flops = _flops(lambda: model.unet(x, t, cond))
    unet_params = sum(p.numel() for p in model.unet.parameters())
    encoder_params = sum(p.numel() for p in model.parameters()) - unet_params
    out = {}
    for stage, flops, params in (
        ("encoder", encoder_flops, encoder_params),
        ("denoise", unet_flops * num_steps, unet_params),
    ):
        precision = precisions.get(stage, "float32")
        # Each step reads the U-Net's weights again (the loop is sequential).
        reads = params * (num_steps if stage == "denoise" else 1)
        out[stage] = StageWork(flops, reads * BYTES.get(precision, 4), precision)
    return out
