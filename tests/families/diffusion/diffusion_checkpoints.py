"""Tiny random LeRobot Diffusion Policy checkpoints written in tmp_path, in LeRobot's own layout (commit
7427f318): `config.json` as `save_pretrained` writes it, `model.safetensors` with every key LeRobot's
`DiffusionPolicy.state_dict()` has (spelled here from modeling_diffusion.py and torchvision's ResNet,
independently of hotloop's model, so a strict load checks the names), and the processor pipelines as
`DataProcessorPipeline._save_pretrained` writes them (rename -> to_batch -> device -> normalizer;
unnormalizer -> device) with seeded dataset statistics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

BLOCKS = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3]}
NORM_MAP = {"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ENV": "MIN_MAX", "ACTION": "MIN_MAX"}


def config(**overrides: Any) -> dict[str, Any]:
    """A small DiffusionConfig for the simulated tasks' shapes: one 64x64 `top` view, a 10-number state,
    4 actions (the gantry's x, y, z, grip), 10 training timesteps so loops stay short."""
    cfg: dict[str, Any] = {
        "type": "diffusion",
        "n_obs_steps": 2,
        "input_features": {
            "observation.state": {"type": "STATE", "shape": [10]},
            "observation.images.top": {"type": "VISUAL", "shape": [3, 64, 64]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [4]}},
        "device": "cpu",
        "use_amp": False,
        "horizon": 8,
        "n_action_steps": 4,
        "normalization_mapping": {"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ACTION": "MIN_MAX"},
        "drop_n_last_frames": 3,
        "vision_backbone": "resnet18",
        "resize_shape": None,
        "crop_ratio": 1.0,
        "crop_shape": [56, 56],
        "crop_is_random": True,
        "pretrained_backbone_weights": None,
        "use_group_norm": True,
        "spatial_softmax_num_keypoints": 4,
        "use_separate_rgb_encoder_per_camera": True,
        "down_dims": [16, 32],
        "kernel_size": 3,
        "n_groups": 4,
        "diffusion_step_embed_dim": 8,
        "use_film_scale_modulation": True,
        "noise_scheduler_type": "DDPM",
        "num_train_timesteps": 10,
        "beta_schedule": "squaredcos_cap_v2",
        "beta_start": 0.0001,
        "beta_end": 0.02,
        "prediction_type": "epsilon",
        "clip_sample": True,
        "clip_sample_range": 1.0,
        "num_inference_steps": None,
        "compile_model": False,
        "do_mask_loss_for_padding": False,
    }
    cfg.update(overrides)
    return cfg


def _side(n: int) -> int:
    for _ in range(5):  # conv1 /2, maxpool /2, layer2..4 /2
        n = (n - 1) // 2 + 1
    return n


def lerobot_shapes(cfg: dict[str, Any], widths: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """Every key (with "diffusion.") and shape of LeRobot's DiffusionModel for `cfg` (stem, layer1..4)."""
    shapes: dict[str, tuple[int, ...]] = {}
    feats = cfg["input_features"]
    cams = [k for k, v in feats.items() if v["type"] == "VISUAL"]
    env = [v["shape"][0] for v in feats.values() if v["type"] == "ENV"]
    state_dim = feats["observation.state"]["shape"][0]
    action_dim = cfg["output_features"]["action"]["shape"][0]
    k = cfg["spatial_softmax_num_keypoints"]

    def norm(prefix: str, c: int) -> None:
        shapes[prefix + ".weight"] = shapes[prefix + ".bias"] = (c,)
        if not cfg["use_group_norm"]:
            shapes[prefix + ".running_mean"] = shapes[prefix + ".running_var"] = (c,)
            shapes[prefix + ".num_batches_tracked"] = ()

    def encoder(p: str) -> None:
        shapes[p + "backbone.0.weight"] = (widths[0], 3, 7, 7)
        norm(p + "backbone.1", widths[0])
        inplanes = widths[0]
        for stage, count in enumerate(BLOCKS[cfg["vision_backbone"]]):
            w = widths[stage + 1]
            for j in range(count):
                b = f"{p}backbone.{stage + 4}.{j}."
                shapes[b + "conv1.weight"] = (w, inplanes if j == 0 else w, 3, 3)
                norm(b + "bn1", w)
                shapes[b + "conv2.weight"] = (w, w, 3, 3)
                norm(b + "bn2", w)
                if j == 0 and (stage > 0 or inplanes != w):
                    shapes[b + "downsample.0.weight"] = (w, inplanes, 1, 1)
                    norm(b + "downsample.1", w)
            inplanes = w
        hw = cfg["crop_shape"] or feats[cams[0]]["shape"][1:]
        shapes[p + "pool.nets.weight"], shapes[p + "pool.nets.bias"] = (k, widths[4], 1, 1), (k,)
        shapes[p + "pool.pos_grid"] = (_side(hw[0]) * _side(hw[1]), 2)
        shapes[p + "out.weight"], shapes[p + "out.bias"] = (2 * k, 2 * k), (2 * k,)

    if cams:
        if cfg["use_separate_rgb_encoder_per_camera"]:
            for i in range(len(cams)):
                encoder(f"diffusion.rgb_encoder.{i}.")
        else:
            encoder("diffusion.rgb_encoder.")
    gc = (state_dim + 2 * k * len(cams) + sum(env)) * cfg["n_obs_steps"]
    e, dims, ks = cfg["diffusion_step_embed_dim"], cfg["down_dims"], cfg["kernel_size"]
    cond = e + gc
    u = "diffusion.unet."
    shapes[u + "diffusion_step_encoder.1.weight"], shapes[u + "diffusion_step_encoder.1.bias"] = (
        (4 * e, e),
        (4 * e,),
    )
    shapes[u + "diffusion_step_encoder.3.weight"], shapes[u + "diffusion_step_encoder.3.bias"] = (
        (e, 4 * e),
        (e,),
    )

    def res(p: str, cin: int, cout: int) -> None:
        for conv, c_in in (("conv1", cin), ("conv2", cout)):
            shapes[f"{p}.{conv}.block.0.weight"], shapes[f"{p}.{conv}.block.0.bias"] = (
                (cout, c_in, ks),
                (cout,),
            )
            shapes[f"{p}.{conv}.block.1.weight"] = shapes[f"{p}.{conv}.block.1.bias"] = (cout,)
        film = 2 * cout if cfg["use_film_scale_modulation"] else cout
        shapes[f"{p}.cond_encoder.1.weight"], shapes[f"{p}.cond_encoder.1.bias"] = (film, cond), (film,)
        if cin != cout:
            shapes[f"{p}.residual_conv.weight"], shapes[f"{p}.residual_conv.bias"] = (cout, cin, 1), (cout,)

    in_out = [(action_dim, dims[0]), *zip(dims[:-1], dims[1:], strict=True)]
    for i, (cin, cout) in enumerate(in_out):
        res(f"{u}down_modules.{i}.0", cin, cout)
        res(f"{u}down_modules.{i}.1", cout, cout)
        if i < len(in_out) - 1:
            shapes[f"{u}down_modules.{i}.2.weight"], shapes[f"{u}down_modules.{i}.2.bias"] = (
                (cout, cout, 3),
                (cout,),
            )
    for i in range(2):
        res(f"{u}mid_modules.{i}", dims[-1], dims[-1])
    for i, (cout, cin) in enumerate(reversed(in_out[1:])):
        res(f"{u}up_modules.{i}.0", 2 * cin, cout)
        res(f"{u}up_modules.{i}.1", cout, cout)
        shapes[f"{u}up_modules.{i}.2.weight"], shapes[f"{u}up_modules.{i}.2.bias"] = (cout, cout, 4), (cout,)
    shapes[u + "final_conv.0.block.0.weight"], shapes[u + "final_conv.0.block.0.bias"] = (
        (dims[0], dims[0], ks),
        (dims[0],),
    )
    shapes[u + "final_conv.0.block.1.weight"] = shapes[u + "final_conv.0.block.1.bias"] = (dims[0],)
    shapes[u + "final_conv.1.weight"], shapes[u + "final_conv.1.bias"] = (
        (action_dim, dims[0], 1),
        (action_dim,),
    )
    return shapes


def _pipeline(
    folder: Path, name: str, steps: list[tuple[str, dict[str, Any], dict[str, torch.Tensor] | None]]
) -> None:
    """`<name>.json` + a `<name>_step_<i>_<registry>.safetensors` per stateful step (json.dump indent 2)."""
    entries = []
    for i, (registry, conf, state) in enumerate(steps):
        entry: dict[str, Any] = {"registry_name": registry, "config": conf}
        if state:
            entry["state_file"] = f"{name}_step_{i}_{registry}.safetensors"
            save_file({k: v.contiguous() for k, v in state.items()}, str(folder / entry["state_file"]))
        entries.append(entry)
    (folder / f"{name}.json").write_text(json.dumps({"name": name, "steps": entries}, indent=2))


def stats_for(cfg: dict[str, Any], seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded dataset statistics (mean, std, min, max) for every feature, as `<feature>.<stat>`; images
    per channel (3, 1, 1) as LeRobot computes them."""
    g = torch.Generator().manual_seed(seed + 100)
    out: dict[str, torch.Tensor] = {}
    feats = {**cfg["input_features"], **cfg["output_features"]}
    for key, f in feats.items():
        shape = (f["shape"][0], 1, 1) if f["type"] == "VISUAL" else tuple(f["shape"])
        if f["type"] == "VISUAL":
            mean, std = (
                0.4 + 0.1 * torch.rand(shape, generator=g),
                0.2 + 0.05 * torch.rand(shape, generator=g),
            )
            lo, hi = torch.zeros(shape), torch.ones(shape)
        else:
            mean = torch.randn(shape, generator=g)
            std = 0.5 + torch.rand(shape, generator=g)
            lo, hi = mean - 2 * std, mean + 2 * std
        out.update({f"{key}.mean": mean, f"{key}.std": std, f"{key}.min": lo, f"{key}.max": hi})
    return out


def write_processors(folder: Path, cfg: dict[str, Any], seed: int = 0) -> None:
    feats = {**cfg["input_features"], **cfg["output_features"]}
    norm = {"eps": 1e-8, "features": feats, "norm_map": cfg["normalization_mapping"]}
    stats = stats_for(cfg, seed)
    _pipeline(
        folder,
        "policy_preprocessor",
        [
            ("rename_observations_processor", {"rename_map": {}}, None),
            ("to_batch_processor", {}, None),
            ("device_processor", {"device": "cpu", "float_dtype": None}, None),
            ("normalizer_processor", norm, stats),
        ],
    )
    post = {"eps": 1e-8, "features": cfg["output_features"], "norm_map": cfg["normalization_mapping"]}
    action_stats = {k: v for k, v in stats.items() if k.startswith("action.")}
    _pipeline(
        folder,
        "policy_postprocessor",
        [
            ("unnormalizer_processor", post, action_stats),
            ("device_processor", {"device": "cpu", "float_dtype": None}, None),
        ],
    )


def write_checkpoint(
    folder: Path, cfg: dict[str, Any], widths: tuple[int, ...] = (16, 16, 16, 16, 16), seed: int = 0
) -> Path:
    """config.json, model.safetensors (seeded random weights, as the fixtures draw them) and processors."""
    g = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for key, shape in lerobot_shapes(cfg, widths).items():
        if key.endswith("num_batches_tracked"):
            tensors[key] = torch.tensor(7, dtype=torch.int64)
        elif key.endswith("pos_grid"):
            n = int(np.sqrt(shape[0]))
            x, y = np.meshgrid(np.linspace(-1, 1, n), np.linspace(-1, 1, n))
            tensors[key] = torch.from_numpy(np.stack([x.ravel(), y.ravel()], 1)).float()
        elif key.endswith("running_var"):
            tensors[key] = 0.5 + torch.rand(shape, generator=g)
        elif len(shape) >= 2:
            tensors[key] = torch.randn(shape, generator=g) / int(np.prod(shape[1:])) ** 0.5
        elif key.endswith(".weight"):
            tensors[key] = 1 + 0.1 * torch.randn(shape, generator=g)
        else:
            tensors[key] = 0.1 * torch.randn(shape, generator=g)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=4))
    write_processors(folder, cfg, seed)
    return folder


def raw_observation(seed: int, cfg: dict[str, Any] | None = None) -> dict[str, Any]:
    """A robot's raw observation for `cfg` (default `config()`): uint8 views, a float32 state."""
    cfg = cfg or config()
    rng = np.random.default_rng(seed)
    feats = cfg["input_features"]
    images = {
        k.removeprefix("observation.images."): rng.integers(
            0, 256, (v["shape"][1], v["shape"][2], 3), dtype=np.uint8
        )
        for k, v in feats.items()
        if v["type"] == "VISUAL"
    }
    obs: dict[str, Any] = {
        "images": images,
        "state": rng.normal(size=feats["observation.state"]["shape"]).astype(np.float32),
    }
    env = [v["shape"][0] for v in feats.values() if v["type"] == "ENV"]
    if env:
        obs["environment_state"] = rng.normal(size=env[0]).astype(np.float32)
    return obs


def trained_config(**overrides: Any) -> dict[str, Any]:
    """A state + environment-state checkpoint (no camera: it trains in seconds), DDPM over 50 steps."""
    return config(
        input_features={
            "observation.state": {"type": "STATE", "shape": [4]},
            "observation.environment_state": {"type": "ENV", "shape": [2]},
        },
        output_features={"action": {"type": "ACTION", "shape": [2]}},
        normalization_mapping={
            "VISUAL": "MEAN_STD",
            "STATE": "MIN_MAX",
            "ENV": "MIN_MAX",
            "ACTION": "MIN_MAX",
        },
        down_dims=[32, 64],
        n_groups=8,
        diffusion_step_embed_dim=16,
        num_train_timesteps=50,
        **overrides,
    )


def synthetic_chunks(state: np.ndarray, env: np.ndarray, horizon: int) -> np.ndarray:
    """The one chunk each (state, env) calls for: two ramps set by the environment state."""
    k = np.arange(horizon, dtype=np.float32)[None, :]
    return np.stack([state[:, :1] + 0.2 * k * env[:, :1], state[:, 1:2] - 0.1 * k * env[:, 1:2]], axis=-1)


def train_checkpoint(folder: Path, steps: int = 600, seed: int = 0, **overrides: Any) -> Path:
    """A checkpoint trained with LeRobot's loss (`hotloop.train.diffusion_demo.diffusion_loss`) to map
    (state, env) to `synthetic_chunks`, saved in LeRobot's layout with its data's statistics."""
    from hotloop.lerobot.checkpoint_files import write_processors
    from hotloop.models.diffusion import DiffusionModel
    from hotloop.models.diffusion_config import read_diffusion_config
    from hotloop.train.diffusion_demo import diffusion_loss
    from hotloop.train.lerobot_frames import aggregate_feature, feature_stats

    cfg = trained_config(**overrides)
    rng = np.random.default_rng(seed)
    n, h = 2048, cfg["horizon"]
    state = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    env = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    chunks = synthetic_chunks(state, env, h).astype(np.float32)
    stats = {
        "observation.state": aggregate_feature([feature_stats(state)]),
        "observation.environment_state": aggregate_feature([feature_stats(env)]),
        "action": aggregate_feature([feature_stats(chunks.reshape(-1, 2))]),
    }

    def minmax(x: np.ndarray, key: str) -> torch.Tensor:
        lo, hi = stats[key]["min"].astype(np.float32), stats[key]["max"].astype(np.float32)
        return torch.from_numpy(2 * (x - lo) / (hi - lo) - 1).float()

    s, e, a = (
        minmax(state, "observation.state"),
        minmax(env, "observation.environment_state"),
        minmax(chunks, "action"),
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=4))
    torch.manual_seed(seed)
    model = DiffusionModel(read_diffusion_config(folder, {})).train()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    o = cfg["n_obs_steps"]
    for _ in range(steps):
        idx = torch.randint(0, n, (64,), generator=gen)
        loss = diffusion_loss(
            model, None, s[idx, None].expand(-1, o, -1), e[idx, None].expand(-1, o, -1), a[idx], gen
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    tensors = {"diffusion." + k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    write_processors(folder, cfg, stats)
    return folder
