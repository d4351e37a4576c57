"""Writing an ACT checkpoint folder in LeRobot's layout (what `ACTPolicy.save_pretrained` and the policy
processors' `save_pretrained` write at commit 7427f318), so that a policy hotloop trains is a checkpoint
folder target like any LeRobot one:

    config.json                                                   ACTConfig, LeRobot's field order
    model.safetensors                                             the policy's state dict ("model." keys)
    policy_preprocessor.json                                      rename -> to_batch -> device -> normalizer
    policy_preprocessor_step_3_normalizer_processor.safetensors   <feature>.<stat>
    policy_postprocessor.json                                     unnormalizer -> device
    policy_postprocessor_step_0_unnormalizer_processor.safetensors

The statistics are every feature's (inputs and the action), as LeRobot's
`make_default_pre_post_processors` hands the dataset stats to both normalisers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hotloop.models.act import ACTION_KEY, ENV_STATE_KEY, PREFIX, STATE_KEY, ACTConfig

NORMALIZATION = {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}  # ACTConfig's default


def input_features(cfg: ACTConfig) -> dict[str, dict[str, Any]]:
    """input_features as config.json holds them: the state, the env state, then the cameras."""
    out: dict[str, dict[str, Any]] = {}
    if cfg.state_dim is not None:
        out[STATE_KEY] = {"type": "STATE", "shape": [cfg.state_dim]}
    if cfg.env_state_dim is not None:
        out[ENV_STATE_KEY] = {"type": "ENV", "shape": [cfg.env_state_dim]}
    for cam, shape in zip(cfg.cameras, cfg.camera_shapes, strict=True):
        out[cam] = {"type": "VISUAL", "shape": list(shape)}
    return out


def lerobot_config(cfg: ACTConfig, **training: Any) -> dict[str, Any]:
    """config.json as LeRobot writes it, in its field order; `training` overrides the training fields
    (dropout, kl_weight, optimizer_lr, ...), which inference does not read."""
    from hotloop.lerobot.checkpoint_files import config_header

    outputs = {ACTION_KEY: {"type": "ACTION", "shape": [cfg.action_dim]}}
    fields: dict[str, Any] = {
        **config_header("act", 1, input_features(cfg), outputs),
        "chunk_size": cfg.chunk_size,
        "n_action_steps": cfg.n_action_steps,
        "normalization_mapping": dict(NORMALIZATION),
        "vision_backbone": cfg.vision_backbone,
        "pretrained_backbone_weights": None,
        "replace_final_stride_with_dilation": cfg.replace_final_stride_with_dilation,
        "pre_norm": cfg.pre_norm,
        "dim_model": cfg.dim_model,
        "n_heads": cfg.n_heads,
        "dim_feedforward": cfg.dim_feedforward,
        "feedforward_activation": cfg.feedforward_activation,
        "n_encoder_layers": cfg.n_encoder_layers,
        "n_decoder_layers": cfg.n_decoder_layers,
        "use_vae": cfg.use_vae,
        "latent_dim": cfg.latent_dim,
        "n_vae_encoder_layers": cfg.n_vae_encoder_layers,
        "temporal_ensemble_coeff": cfg.temporal_ensemble_coeff,
        "dropout": 0.1,
        "kl_weight": 10.0,
        "optimizer_lr": 1e-05,
        "optimizer_weight_decay": 0.0001,
        "optimizer_lr_backbone": 1e-05,
    }
    unknown = sorted(set(training) - set(fields))
    if unknown:
        raise ValueError(f"not ACTConfig fields: {', '.join(unknown)}")
    fields.update(training)
    return fields


def write_processors(
    folder: Path, cfg: ACTConfig, stats: Mapping[str, Mapping[str, np.ndarray | torch.Tensor]]
) -> None:
    """policy_preprocessor.json / policy_postprocessor.json and their stats files
    (`hotloop.lerobot.checkpoint_files.write_processors`)."""
    from hotloop.lerobot import checkpoint_files

    checkpoint_files.write_processors(folder, lerobot_config(cfg), stats)


def save_act_checkpoint(
    folder: Path,
    model: torch.nn.Module,
    cfg: ACTConfig,
    stats: Mapping[str, Mapping[str, np.ndarray | torch.Tensor]],
    **training: Any,
) -> Path:
    """Write `model` (an `ACTModel`, float32) and its processors into `folder` in LeRobot's layout."""
    from hotloop.io import save_tensors

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {PREFIX + k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    save_tensors(state, str(folder / "model.safetensors"), {"format": "pt"})
    (folder / "config.json").write_text(json.dumps(lerobot_config(cfg, **training), indent=4))
    write_processors(folder, cfg, stats)
    return folder


__all__ = ["input_features", "lerobot_config", "save_act_checkpoint", "write_processors"]
