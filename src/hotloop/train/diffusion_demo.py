"""`hotloop train-demo --family diffusion`: a LeRobot Diffusion Policy checkpoint trained on recorded
conveyor-pick episodes, with LeRobot's training loss, written in LeRobot's checkpoint layout.

What is LeRobot's here (policies/diffusion at commit 7427f318):
- the architecture and config.json of `DiffusionConfig`: a resnet18 trunk (by default at a quarter of
  torchvision's widths, see below), GroupNorm in place of BatchNorm (LeRobot's
  `use_group_norm`, required without pretrained backbone weights), SpatialSoftmax, a FiLM U-Net; the
  torchvision initialisation of the ResNet (He normal, fan out) and PyTorch's defaults elsewhere;
- the samples: frame t with observations at t - n_obs_steps + 1 .. t and actions at t - n_obs_steps + 1
  .. t - n_obs_steps + horizon, indices outside the episode clamped to its ends (LeRobot's padding by
  copy), the last `drop_n_last_frames` frames of each episode never sampled (0 here, see below);
- `compute_loss`: the random crop in training (one offset per camera batch), epsilon targets at uniform
  random timesteps of the DDPM schedule (`add_noise`: sqrt(abar) x0 + sqrt(1 - abar) eps), MSE;
- the normalisation statistics, computed as LeRobot's `compute_episode_stats` + `aggregate_stats`
  compute a dataset's (per episode: float32 mean and mean of squares, min, max; images per channel over
  up to 100 evenly spaced frames, in [0, 1]; aggregated by counts with the parallel variance), saved as
  the processor files `save_pretrained` writes (VISUAL MEAN_STD, STATE and ACTION MIN_MAX). The
  histogram quantiles LeRobot also stores are not written: no mode of this policy reads them.

What is hotloop's: the optimiser and schedule (`hotloop.train.loop.run_training`: AdamW, warm-up then a
cosine decay), the seeded generator for every draw (batches, crops, noise, timesteps), and three choices
measured on the closed loop (conveyor-pick, chunk strategy, 20 episodes, 0 ms):
- LeRobot's sizes and schedule (torchvision-width resnet18, 15.8 M parameters, lr 1e-4, batch 16, 1,400
  steps in 17 min) left epsilon MSE at 0.127 and a policy that never grasped (0/20).
- A quarter-width trunk (16, 16, 32, 64, 128; 5.3 M parameters), lr 5e-4, batch 64 and 3,500 steps
  (14 min at 2 threads on a 2-core Xeon) reached MSE 0.044 but still 0/20: its xyz were within 1 cm of the
  expert's, its grip command wrong at the grasp.
- conveyor-pick episodes are short (median 16 frames at 10 Hz), and LeRobot's default drop_n_last_frames
  (horizon - n_action_steps - n_obs_steps + 1 = 7) never showed the policy the frames around the grasp:
  here it is 0 (written into config.json, as LeRobot reads it).
LeRobot's own `DiffusionPolicy.from_pretrained` builds torchvision's resnet18 and so cannot load the
quarter-width trunk (hotloop reads the widths from the tensors); `backbone_widths=RESNET18_WIDTHS` trains
one it can load.

Views: the top camera only. conveyor-pick's state already holds the box's pose, so a second camera adds
no information the policy lacks; the wrist view would double the ResNet work (LeRobot's default is one
encoder per camera), halving the steps that fit in the time budget.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.lerobot.checkpoint_files import config_header, write_processors
from hotloop.train.demo_trainer import DemoTrainer, ship_checkpoint
from hotloop.train.lerobot_frames import dataset_stats
from hotloop.train.options import CameraDemoOptions
from hotloop.train.run import Folder

RESNET18_WIDTHS = (64, 64, 128, 256, 512)  # torchvision's resnet18: stem, layer1..layer4


@dataclass(frozen=True)
class TrainDiffusionDemoConfig(CameraDemoOptions):
    episodes: int = 400
    views: tuple[str, ...] = ("top",)
    n_obs_steps: int = 2
    horizon: int = 16
    n_action_steps: int = 8
    down_dims: tuple[int, ...] = (64, 128, 256)
    diffusion_step_embed_dim: int = 64
    keypoints: int = 32
    # The ResNet18 trunk's widths (stem, layer1..layer4): a quarter of torchvision's, as the ACT demo, so
    # that enough steps fit in 20 minutes on 2 cores; hotloop reads the widths from the tensors.
    backbone_widths: tuple[int, int, int, int, int] = (16, 16, 32, 64, 128)
    # Frames at each episode's end never sampled as a training frame: 0, not LeRobot's 7 (see the module
    # docstring): the grasp sits in the last frames of these short episodes.
    drop_n_last_frames: int = 0
    crop: int = 56  # of the 64 px views: random in training, centred at inference
    num_train_timesteps: int = 100
    steps: int = 3500
    batch: int = 64
    # LeRobot's optimizer_lr (1e-4) is for 200k steps; 1,400 steps of batch 16 at 1e-4 left a policy that
    # never grasped (epsilon MSE 0.127, 0/20 on conveyor-pick).
    lr: float = 5e-4
    weight_decay: float = 1e-6

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_positive("n_obs_steps", "n_action_steps")
        if self.drop_n_last_frames < 0:
            raise ConfigError(f"drop_n_last_frames must be >= 0 (got {self.drop_n_last_frames})")
        if self.horizon % 2 ** len(self.down_dims):
            raise ConfigError(f"horizon {self.horizon} must be a multiple of 2**len(down_dims)")
        if self.n_action_steps > self.horizon - self.n_obs_steps + 1:
            raise ConfigError("n_action_steps must be <= horizon - n_obs_steps + 1 (LeRobot's rule)")


def lerobot_config(
    cfg: TrainDiffusionDemoConfig, state_dim: int, action_dim: int, image_hw: tuple[int, int]
) -> dict[str, Any]:
    """config.json as LeRobot's `DiffusionConfig` writes it (every field `save_pretrained` writes)."""
    h, w = image_hw
    inputs: dict[str, Any] = {"observation.state": {"type": "STATE", "shape": [state_dim]}}
    for view in cfg.views:
        inputs[f"observation.images.{view}"] = {"type": "VISUAL", "shape": [3, h, w]}
    outputs = {"action": {"type": "ACTION", "shape": [action_dim]}}
    return {
        **config_header("diffusion", cfg.n_obs_steps, inputs, outputs),
        "horizon": cfg.horizon,
        "n_action_steps": cfg.n_action_steps,
        "normalization_mapping": {"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ACTION": "MIN_MAX"},
        "drop_n_last_frames": cfg.drop_n_last_frames,
        "vision_backbone": "resnet18",
        "resize_shape": None,
        "crop_ratio": 1.0,
        "crop_shape": [cfg.crop, cfg.crop],
        "crop_is_random": True,
        "pretrained_backbone_weights": None,
        "use_group_norm": True,
        "spatial_softmax_num_keypoints": cfg.keypoints,
        "use_separate_rgb_encoder_per_camera": True,
        "down_dims": list(cfg.down_dims),
        "kernel_size": 5,
        "n_groups": 8,
        "diffusion_step_embed_dim": cfg.diffusion_step_embed_dim,
        "use_film_scale_modulation": True,
        "gradient_checkpointing": False,
        "noise_scheduler_type": "DDPM",
        "num_train_timesteps": cfg.num_train_timesteps,
        "beta_schedule": "squaredcos_cap_v2",
        "beta_start": 0.0001,
        "beta_end": 0.02,
        "prediction_type": "epsilon",
        "clip_sample": True,
        "clip_sample_range": 1.0,
        "num_inference_steps": None,
        "compile_model": False,
        "compile_mode": "reduce-overhead",
        "do_mask_loss_for_padding": False,
        "optimizer_lr": cfg.lr,
        "optimizer_betas": [0.95, 0.999],
        "optimizer_eps": 1e-08,
        "optimizer_weight_decay": cfg.weight_decay,
        "scheduler_name": "cosine",
        "scheduler_warmup_steps": cfg.warmup,
    }


def resnet_shapes(prefix: str, widths: tuple[int, ...] = RESNET18_WIDTHS) -> dict[str, tuple[int, ...]]:
    """The tensor shapes of torchvision's resnet18 trunk as LeRobot's Sequential names them (GroupNorm)."""
    shapes: dict[str, tuple[int, ...]] = {prefix + "0.weight": (widths[0], 3, 7, 7)}
    shapes[prefix + "1.weight"] = shapes[prefix + "1.bias"] = (widths[0],)
    inplanes = widths[0]
    for stage in range(4):
        w = widths[stage + 1]
        for j in range(2):
            b = f"{prefix}{stage + 4}.{j}."
            shapes[b + "conv1.weight"] = (w, inplanes if j == 0 else w, 3, 3)
            shapes[b + "conv2.weight"] = (w, w, 3, 3)
            for n in ("bn1", "bn2"):
                shapes[f"{b}{n}.weight"] = shapes[f"{b}{n}.bias"] = (w,)
            if j == 0 and (stage > 0 or inplanes != w):
                shapes[b + "downsample.0.weight"] = (w, inplanes, 1, 1)
                shapes[b + "downsample.1.weight"] = shapes[b + "downsample.1.bias"] = (w,)
        inplanes = w
    return shapes


def new_model(
    config_json: dict[str, Any], folder: Path, gen: Any, widths: tuple[int, ...] = RESNET18_WIDTHS
) -> Any:
    """A freshly initialised DiffusionModel for `config_json` (written into `folder` to be read back as
    LeRobot's config, the way every checkpoint is)."""
    import torch
    from torch import nn

    from hotloop.models.diffusion import DiffusionModel
    from hotloop.models.diffusion_config import read_diffusion_config

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config_json, indent=4))
    n_cams = sum(1 for f in config_json["input_features"].values() if f["type"] == "VISUAL")
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(n_cams):
        shapes.update(resnet_shapes(f"diffusion.rgb_encoder.{i}.backbone.", widths))
    cfg = read_diffusion_config(folder, shapes)
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
    model = DiffusionModel(cfg)
    for name, module in model.named_modules():
        if name.startswith("rgb_encoder") and ".backbone" in name:
            if isinstance(module, nn.Conv2d):  # torchvision's ResNet init
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.GroupNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
    return model


# ---- training ------------------------------------------------------------------------------------------


def diffusion_loss(model: Any, images: Any, state: Any, env_state: Any, target: Any, gen: Any) -> Any:
    """LeRobot's `DiffusionModel.compute_loss` (epsilon prediction, no padding mask): encode the history (a
    random crop per camera batch in training mode), noise the target chunk at uniform random timesteps
    (diffusers' add_noise: sqrt(abar_t) x0 + sqrt(1 - abar_t) eps) and regress the noise (or, for
    prediction_type "sample", the chunk). Every draw comes from `gen`."""
    import torch
    import torch.nn.functional as F

    cfg = model.cfg
    cond = model.encode(images, state, env_state, generator=gen)
    noise = torch.randn(target.shape, generator=gen)
    t = torch.randint(0, cfg.num_train_timesteps, (target.shape[0],), generator=gen)
    abar = cfg.make_scheduler().alphas_cumprod[t][:, None, None]
    noisy = abar**0.5 * target + (1 - abar) ** 0.5 * noise
    pred = model.unet(noisy, t, cond)
    return F.mse_loss(pred, noise if cfg.prediction_type == "epsilon" else target)


def _arrays(dataset: Any, cfg: TrainDiffusionDemoConfig) -> dict[str, Any]:
    """Per frame of every successful episode: (episode, index) and the episodes' arrays."""
    from hotloop.train.data import successful_episodes

    episodes: list[dict[str, np.ndarray]] = []
    index: list[tuple[int, int]] = []
    for ep in successful_episodes(dataset, cfg.views):
        images = np.stack([ep.images[v] for v in cfg.views], axis=1)  # (T, C, H, W, 3)
        e = len(episodes)
        episodes.append(
            {"state": ep.state.astype(np.float32), "action": ep.action.astype(np.float32), "images": images}
        )
        last = max(1, len(ep.action) - cfg.drop_n_last_frames)
        index.extend((e, t) for t in range(last))
    return {"episodes": episodes, "index": index}


def train_diffusion_demo(
    cfg: TrainDiffusionDemoConfig, out_dir: Folder, dataset_dir: Folder | None = None, progress: bool = True
) -> dict[str, Any]:
    """Train a Diffusion Policy on `dataset_dir` (or on episodes recorded into `out_dir`); the checkpoint
    (config.json, model.safetensors, processors) is written into `out_dir`."""
    import torch

    from hotloop.io import save_tensors
    from hotloop.lerobot.features import NormMode, transform
    from hotloop.train.data import check_finite
    from hotloop.train.run import TrainingRun, final

    run = TrainingRun.start(out_dir, cfg, progress)
    dataset, recorded = run.dataset(dataset_dir, cfg)
    data = _arrays(dataset, cfg)
    eps = data["episodes"]
    for e in eps:
        check_finite({"state": e["state"], "action": e["action"]}, f"the dataset {dataset.root}")
    h, w = eps[0]["images"].shape[2:4]
    if cfg.crop > min(h, w):
        raise ConfigError(f"the dataset's views are {h}x{w} px; the crop {cfg.crop} must fit in them")
    stats = dataset_stats(dataset, cfg.views)
    config_json = lerobot_config(cfg, eps[0]["state"].shape[1], eps[0]["action"].shape[1], (h, w))
    gen = torch.Generator().manual_seed(cfg.seed)
    model = new_model(config_json, run.out, gen, cfg.backbone_widths).train()
    tstat = {
        k: {s: torch.as_tensor(np.asarray(v), dtype=torch.float32) for s, v in sub.items()}
        for k, sub in stats.items()
    }

    def norm(x: torch.Tensor, key: str, mode: NormMode) -> torch.Tensor:
        return transform(x, mode, tstat[key], 1e-8, inverse=False)

    # Normalised once (the processors' arithmetic); images per batch (uint8 in memory).
    states = [norm(torch.from_numpy(e["state"]), "observation.state", NormMode.MIN_MAX) for e in eps]
    actions = [norm(torch.from_numpy(e["action"]), "action", NormMode.MIN_MAX) for e in eps]
    images = [torch.from_numpy(e["images"]) for e in eps]
    index = data["index"]
    o, horizon = cfg.n_obs_steps, cfg.horizon
    obs_offsets = torch.arange(-(o - 1), 1)
    act_offsets = torch.arange(-(o - 1), horizon - (o - 1))

    def sample(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        st, im, ac = [], [], []
        for r in rows.tolist():
            e, t = index[r]
            n = len(actions[e])
            oi, ai = (t + obs_offsets).clamp(0, n - 1), (t + act_offsets).clamp(0, n - 1)
            st.append(states[e][oi])
            ac.append(actions[e][ai])
            im.append(images[e][oi])
        pix = torch.stack(im).permute(0, 1, 2, 5, 3, 4).to(torch.float32) / 255  # (B, O, C, 3, H, W)
        for c, view in enumerate(cfg.views):
            pix[:, :, c] = norm(pix[:, :, c], f"observation.images.{view}", NormMode.MEAN_STD)
        return torch.stack(st), pix, torch.stack(ac)

    def step_loss(step: int) -> dict[str, Any]:
        state, pix, target = sample(torch.randint(0, len(index), (cfg.batch,), generator=gen))
        return {"loss": diffusion_loss(model, pix, state, None, target, gen)}

    losses = run.train(list(model.parameters()), step_loss, "train-demo diffusion")["loss"]
    model.eval()
    tensors = {"diffusion." + k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_tensors(tensors, str(run.out / "model.safetensors"), metadata={"format": "pt"})
    write_processors(run.out, config_json, stats)
    data = {"episodes_used": len(eps), "frames": len(index), "recorded": recorded}
    finals = {"final_loss": final(losses)}
    summary = run.write_summary(
        "demo.json", cfg, dataset, model, run.training_summary(data, finals), family="diffusion"
    )
    run.write_losses({"loss": losses}, losses, "Diffusion Policy on conveyor-pick (epsilon MSE)")
    return summary


TRAINER = DemoTrainer(
    TrainDiffusionDemoConfig, train_diffusion_demo, "demo:conveyor-diffusion", ship_checkpoint("diffusion"),
    wrote="the LeRobot checkpoint {out} (hotloop bench|eval|compile {out}; loss curve {out}/loss.png)",
)  # fmt: skip
