"""Tiny random ACT checkpoints written in tmp_path in LeRobot's layout (commit 7427f318), processors included.

Written here by hand, as LeRobot's `save_pretrained` writes them (config.json indent 4; model.safetensors
with "model." keys; the processor JSON files indent 2 and one `<name>_step_<i>_<registry>.safetensors`
per normaliser, keys `<feature>.<stat>`), not through hotloop's own writer, so the reader is tested against
the layout and the writer (`hotloop.families.act.checkpoint_io`) is tested against this one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from hotloop.models.act import ACTConfig, ACTModel
from hotloop.models.resnet import BACKBONES

STATE_KEY, ENV_KEY = "observation.state", "observation.environment_state"


def resnet_shapes(backbone: str, widths: tuple[int, ...] = (8, 8, 16, 16), stem: int = 8) -> dict[str, Any]:
    """torchvision ResNet trunk weight shapes with narrowed widths (as the fixtures narrow them)."""
    kind, blocks = BACKBONES[backbone]
    shapes: dict[str, tuple[int, ...]] = {"conv1.weight": (stem, 3, 7, 7)}

    def bn(name: str, c: int) -> None:
        for p in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{name}.{p}"] = (c,)

    bn("bn1", stem)
    prev = stem
    for i, (w, n) in enumerate(zip(widths, blocks, strict=True)):
        for j in range(n):
            name = f"layer{i + 1}.{j}"
            if kind == "basic":
                out, convs = w, [(w, prev, 3), (w, w, 3)]
            else:
                out, convs = 4 * w, [(w, prev, 1), (w, w, 3), (4 * w, w, 1)]
            for k, (o, c_in, ks) in enumerate(convs, start=1):
                shapes[f"{name}.conv{k}.weight"] = (o, c_in, ks, ks)
                bn(f"{name}.bn{k}", o)
            if j == 0 and (i > 0 or prev != out):
                shapes[f"{name}.downsample.0.weight"] = (out, prev, 1, 1)
                bn(f"{name}.downsample.1", out)
            prev = out
    return shapes


def act_config(**change: Any) -> ACTConfig:
    """A small ACT for conveyor-pick: cameras top 64x64 and wrist 48x64 (two sizes), a 10-number state,
    4 actions, chunk 8; `change` overrides fields (`cameras` as {name: (C, H, W)})."""
    backbone = change.pop("vision_backbone", "resnet18")
    cameras = change.pop(
        "cameras", {"observation.images.top": (3, 64, 64), "observation.images.wrist": (3, 48, 64)}
    )
    base: dict[str, Any] = dict(
        cameras=tuple(cameras),
        camera_shapes=tuple(tuple(s) for s in cameras.values()),
        state_dim=10,
        env_state_dim=None,
        action_dim=4,
        chunk_size=8,
        n_action_steps=4,
        dim_model=16,
        n_heads=2,
        dim_feedforward=24,
        feedforward_activation="relu",
        n_encoder_layers=1,
        n_decoder_layers=1,
        pre_norm=False,
        use_vae=True,
        latent_dim=4,
        n_vae_encoder_layers=1,
        temporal_ensemble_coeff=None,
        vision_backbone=backbone,
        replace_final_stride_with_dilation=False,
        backbone_shapes=tuple(sorted(resnet_shapes(backbone).items())) if cameras else (),
    )
    base.update(change)
    return ACTConfig(**base)


def random_state(model: nn.Module, seed: int) -> dict[str, Tensor]:
    """The fixtures' recipe: matrices N(0,1)/sqrt(fan_in), norm scales 1+0.1N, vectors 0.1N, var 0.5+U."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in model.state_dict().items():
        if name == "vae_encoder_pos_enc":
            out[name] = t.clone()
        elif t.dim() >= 2:
            out[name] = torch.randn(t.shape, generator=g) / math.sqrt(t[0].numel())
        elif name.endswith("running_var"):
            out[name] = 0.5 + torch.rand(t.shape, generator=g)
        elif name.endswith(".weight"):
            out[name] = 1 + 0.1 * torch.randn(t.shape, generator=g)
        else:
            out[name] = 0.1 * torch.randn(t.shape, generator=g)
    return out


def features(cfg: ACTConfig) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if cfg.state_dim is not None:
        out[STATE_KEY] = {"type": "STATE", "shape": [cfg.state_dim]}
    if cfg.env_state_dim is not None:
        out[ENV_KEY] = {"type": "ENV", "shape": [cfg.env_state_dim]}
    for cam, shape in zip(cfg.cameras, cfg.camera_shapes, strict=True):
        out[cam] = {"type": "VISUAL", "shape": list(shape)}
    return out


def config_json(cfg: ACTConfig) -> dict[str, Any]:
    return {
        "type": "act",
        "n_obs_steps": 1,
        "input_features": features(cfg),
        "output_features": {"action": {"type": "ACTION", "shape": [cfg.action_dim]}},
        "device": "cpu",
        "chunk_size": cfg.chunk_size,
        "n_action_steps": cfg.n_action_steps,
        "normalization_mapping": {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
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
    }


def random_stats(cfg: ACTConfig, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """mean/std/min/max per feature, images per channel (3, 1, 1) in [0, 1] units."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, np.ndarray]] = {}
    vectors = {STATE_KEY: cfg.state_dim, ENV_KEY: cfg.env_state_dim, "action": cfg.action_dim}
    for key, width in vectors.items():
        if width is None:
            continue
        mean = rng.normal(size=width).astype(np.float32)
        std = rng.uniform(0.2, 1.5, size=width).astype(np.float32)
        out[key] = {"mean": mean, "std": std, "min": mean - 2 * std, "max": mean + 2 * std}
    for cam in cfg.cameras:
        mean = rng.uniform(0.3, 0.6, size=(3, 1, 1)).astype(np.float32)
        std = rng.uniform(0.1, 0.3, size=(3, 1, 1)).astype(np.float32)
        out[cam] = {"mean": mean, "std": std, "min": np.zeros_like(mean), "max": np.ones_like(mean)}
    return out


def write_processors(folder: Path, cfg: ACTConfig, stats: dict[str, dict[str, np.ndarray]]) -> None:
    norm_map = {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    all_features = {**features(cfg), "action": {"type": "ACTION", "shape": [cfg.action_dim]}}
    flat = {f"{k}.{s}": torch.from_numpy(v).contiguous() for k, per in stats.items() for s, v in per.items()}
    pre_state = "policy_preprocessor_step_3_normalizer_processor.safetensors"
    post_state = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    pre = {
        "name": "policy_preprocessor",
        "steps": [
            {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
            {"registry_name": "to_batch_processor", "config": {}},
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
            {
                "registry_name": "normalizer_processor",
                "config": {"eps": 1e-08, "features": all_features, "norm_map": norm_map},
                "state_file": pre_state,
            },
        ],
    }
    post = {
        "name": "policy_postprocessor",
        "steps": [
            {
                "registry_name": "unnormalizer_processor",
                "config": {
                    "eps": 1e-08,
                    "features": {"action": all_features["action"]},
                    "norm_map": norm_map,
                },
                "state_file": post_state,
            },
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
        ],
    }
    (folder / "policy_preprocessor.json").write_text(json.dumps(pre, indent=2))
    (folder / "policy_postprocessor.json").write_text(json.dumps(post, indent=2))
    save_file(flat, str(folder / pre_state))
    save_file(flat, str(folder / post_state))


def write_checkpoint(folder: Path, cfg: ACTConfig | None = None, seed: int = 0) -> Path:
    """A seeded random ACT of `cfg` (default `act_config()`) with random stats, in LeRobot's layout."""
    cfg = cfg if cfg is not None else act_config()
    folder.mkdir(parents=True, exist_ok=True)
    state = random_state(ACTModel(cfg), seed)
    save_file(
        {"model." + k: v.contiguous() for k, v in state.items()},
        str(folder / "model.safetensors"),
        {"format": "pt"},
    )
    (folder / "config.json").write_text(json.dumps(config_json(cfg), indent=4))
    write_processors(folder, cfg, random_stats(cfg, seed + 100))
    return folder


def raw_observation(cfg: ACTConfig, seed: int) -> dict[str, Any]:
    """{"images": {view: (H, W, 3) uint8}, "state": (S,)} for the checkpoint's views."""
    rng = np.random.default_rng(seed)
    images = {
        cam.removeprefix("observation.images."): rng.integers(0, 256, (h, w, c), dtype=np.uint8)
        for cam, (c, h, w) in zip(cfg.cameras, cfg.camera_shapes, strict=True)
    }
    obs: dict[str, Any] = {"images": images}
    if cfg.state_dim is not None:
        obs["state"] = rng.normal(size=cfg.state_dim).astype(np.float32)
    return obs
