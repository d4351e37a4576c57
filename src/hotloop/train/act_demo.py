"""`hotloop train-demo --family act`: train a small LeRobot ACT on recorded conveyor-pick episodes, on CPU,
into a LeRobot checkpoint folder (a target like any LeRobot ACT: `hotloop eval OUT`, `compile OUT`...).

What is LeRobot's (commit 7427f318) and what is this demo's own choice:

- **Objective**: LeRobot's `ACTPolicy.forward` (`hotloop.train.act_loss`): L1 over the unpadded actions
  plus kl_weight (10) times the VAE latent's KL divergence, dropout 0.1; the chunk's actions past the
  episode end are padded with the last one and masked (`action_is_pad`), as LeRobot's dataset pads them.
- **Initialisation**: LeRobot's: torchvision's ResNet init (kaiming normal, fan out) with frozen batch
  norms at identity statistics (no pretrained backbone: nothing may be downloaded), xavier uniform for
  every matrix of the transformer encoder and decoder, nn.MultiheadAttention's own for the VAE encoder.
- **Normalisation**: MEAN_STD for images, state and actions (ACTConfig's default), with statistics
  computed as LeRobot's `compute_stats` computes them (per episode: images subsampled by
  `sample_indices`, per channel over pixels in [0, 1]; vectors per dimension; then aggregated with the
  parallel variance formula), written as the checkpoint's processors, and the training batches are
  normalised by those very processors.
- **Sizes** (this demo's): 64 px top and wrist views, a resnet18 at a quarter of its widths, D = 64, two
  encoder layers, chunk 10 (one second at 10 Hz) of which 5 actions run per inference. Sized to train in
  under 20 minutes on one core of the 2-core EPYC (`steps`, `batch`).
- **Optimiser**: the shared loop (`hotloop.train.loop`: AdamW, warm-up and cosine decay, clipping at 10
  as LeRobot's ACT preset) at a from-scratch learning rate (LeRobot's 1e-5 is for a pretrained backbone).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.io import atomic_write_json

IMAGES_PREFIX = "observation.images."


@dataclass(frozen=True)
class TrainActDemoConfig:
    task: str = "conveyor-pick"
    difficulty: str = "medium"
    episodes: int = 300
    action_noise: float = 0.01  # DART, as the other demos
    recovery_starts: float = 0.3
    record_seed: int = 10_000  # disjoint from evaluation seeds (0, 1, ...)
    views: tuple[str, ...] = ("top", "wrist")
    chunk_size: int = 10
    n_action_steps: int = 5
    vision_backbone: str = "resnet18"
    stem_width: int = 16
    stage_widths: tuple[int, int, int, int] = (16, 32, 64, 128)
    dim_model: int = 64
    n_heads: int = 4
    dim_feedforward: int = 256
    n_encoder_layers: int = 2
    n_decoder_layers: int = 1
    latent_dim: int = 16
    n_vae_encoder_layers: int = 2
    kl_weight: float = 10.0  # LeRobot's
    dropout: float = 0.1  # LeRobot's
    steps: int = 3000
    batch: int = 32
    lr: float = 3e-4
    min_lr: float = 1e-5
    warmup: int = 100
    weight_decay: float = 1e-4  # LeRobot's
    grad_clip: float = 10.0  # LeRobot's ACT preset
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("episodes", "steps", "batch", "threads", "chunk_size", "n_action_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.n_action_steps > self.chunk_size:
            raise ConfigError(f"n_action_steps {self.n_action_steps} exceeds chunk_size {self.chunk_size}")
        if not 0 < self.lr < 1:
            raise ConfigError(f"train-demo lr must be in (0, 1) (got {self.lr})")
        from hotloop.train.loop import check_view_names  # which exist: the dataset says (training_views)

        check_view_names(self.views)


def resnet_shapes(backbone: str, stem: int, widths: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """torchvision's ResNet trunk weight shapes (its module names) at the given widths."""
    from hotloop.models.resnet import BACKBONES

    kind, blocks = BACKBONES[backbone]
    shapes: dict[str, tuple[int, ...]] = {"conv1.weight": (stem, 3, 7, 7)}

    def norm(name: str, c: int) -> None:
        for p in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{name}.{p}"] = (c,)

    norm("bn1", stem)
    prev = stem
    for i, (w, n) in enumerate(zip(widths, blocks, strict=True)):
        for j in range(n):
            name = f"layer{i + 1}.{j}"
            out = w if kind == "basic" else 4 * w
            convs = [(w, prev, 3), (w, w, 3)] if kind == "basic" else [(w, prev, 1), (w, w, 3), (4 * w, w, 1)]
            for k, (o, c_in, size) in enumerate(convs, start=1):
                shapes[f"{name}.conv{k}.weight"] = (o, c_in, size, size)
                norm(f"{name}.bn{k}", o)
            if j == 0 and (i > 0 or prev != out):  # torchvision: a stride or a width change
                shapes[f"{name}.downsample.0.weight"] = (out, prev, 1, 1)
                norm(f"{name}.downsample.1", out)
            prev = out
    return shapes


def model_config(cfg: TrainActDemoConfig, dataset: Any) -> Any:
    """The ACTConfig of the demo for `dataset`'s views, state and action widths."""
    from hotloop.models.act import ACTConfig

    cameras, camera_shapes = [], []
    for view in cfg.views:
        key = IMAGES_PREFIX + view
        if key not in dataset.features:
            raise ConfigError(
                f"the dataset {dataset.root} has no {view} view (it has {', '.join(dataset.image_keys) or 'none'}); "
                f"record one with `hotloop record --views {','.join(cfg.views)}` (or drop --dataset)"
            )
        h, w = (int(v) for v in dataset.features[key]["shape"][:2])
        cameras.append(key)
        camera_shapes.append((3, h, w))
    return ACTConfig(
        cameras=tuple(cameras),
        camera_shapes=tuple(camera_shapes),
        state_dim=int(dataset.features["observation.state"]["shape"][0]),
        env_state_dim=None,
        action_dim=int(dataset.features["action"]["shape"][0]),
        chunk_size=cfg.chunk_size,
        n_action_steps=cfg.n_action_steps,
        dim_model=cfg.dim_model,
        n_heads=cfg.n_heads,
        dim_feedforward=cfg.dim_feedforward,
        feedforward_activation="relu",
        n_encoder_layers=cfg.n_encoder_layers,
        n_decoder_layers=cfg.n_decoder_layers,
        pre_norm=False,
        use_vae=True,
        latent_dim=cfg.latent_dim,
        n_vae_encoder_layers=cfg.n_vae_encoder_layers,
        temporal_ensemble_coeff=None,
        vision_backbone=cfg.vision_backbone,
        replace_final_stride_with_dilation=False,
        backbone_shapes=tuple(
            sorted(resnet_shapes(cfg.vision_backbone, cfg.stem_width, cfg.stage_widths).items())
        ),
    )


def new_model(act_cfg: Any, seed: int) -> Any:
    """A freshly initialised ACTModel, initialised as LeRobot's ACT (see the module docstring)."""
    import torch
    from torch import nn

    from hotloop.models.act import ACTModel
    from hotloop.models.act_layers import Attention

    torch.manual_seed(seed)
    model = ACTModel(act_cfg)
    for module in model.modules():
        if isinstance(module, Attention):  # nn.MultiheadAttention._reset_parameters
            nn.init.xavier_uniform_(module.in_proj_weight)
            nn.init.zeros_(module.in_proj_bias)
            nn.init.zeros_(module.out_proj.bias)
    for module in model.trunk.modules():  # torchvision ResNet.__init__
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    for p in [*model.encoder.parameters(), *model.decoder.parameters()]:  # ACT._reset_parameters
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model.train()


def _running(batch: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's RunningQuantileStats over one batch (rows are samples): mean, mean of squares -> std."""
    x = batch.astype(np.result_type(batch.dtype, np.float32), copy=False)
    mean = np.mean(x, axis=0)
    std = np.sqrt(np.maximum(0, np.mean(x**2, axis=0) - mean**2))
    return {
        "min": np.min(x, axis=0),
        "max": np.max(x, axis=0),
        "mean": mean,
        "std": std,
        "count": np.array([len(x)]),
    }


def sample_indices(n: int) -> list[int]:
    """LeRobot's compute_stats.sample_indices (estimate_num_samples with its defaults)."""
    samples = max(min(100, n), min(int(n**0.75), 10_000))
    return [int(i) for i in np.round(np.linspace(0, n - 1, samples)).astype(int)]


def episode_stats(ep: Any, views: tuple[str, ...]) -> dict[str, dict[str, np.ndarray]]:
    """compute_episode_stats: vectors per dimension; images per channel over the sampled frames (uint8
    channels first, reduced over frames and pixels, then / 255, kept as (3, 1, 1))."""
    out = {"observation.state": _running(ep.state), "action": _running(ep.action)}
    for view in views:
        frames = ep.images[view][sample_indices(len(ep.images[view]))]  # (N, H, W, 3) uint8
        pixels = frames.reshape(-1, 3)  # (N*H*W, C): the (0, 2, 3) reduction of channels-first images
        stats = _running(pixels)
        out[IMAGES_PREFIX + view] = {
            k: v if k == "count" else (v / 255.0).reshape(3, 1, 1) for k, v in stats.items()
        }
    return out


def aggregate(stats: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """aggregate_feature_stats: count-weighted means, the parallel variance, min of mins, max of maxes."""
    out = {}
    for key in stats[0]:
        per = [s[key] for s in stats]
        means = np.stack([s["mean"] for s in per])
        variances = np.stack([s["std"] ** 2 for s in per])
        counts = np.stack([s["count"] for s in per])
        total = counts.sum(axis=0)
        while counts.ndim < means.ndim:
            counts = np.expand_dims(counts, axis=-1)
        mean = (means * counts).sum(axis=0) / total
        variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
        out[key] = {
            "min": np.min(np.stack([s["min"] for s in per]), axis=0),
            "max": np.max(np.stack([s["max"] for s in per]), axis=0),
            "mean": mean,
            "std": np.sqrt(variance),
        }
    return out


@dataclass
class _Frames:
    images: np.ndarray  # (N, V, H, W, 3) uint8
    state: np.ndarray  # (N, S) float32
    actions: np.ndarray  # (N, chunk, A) float32, past the episode end: its last action
    is_pad: np.ndarray  # (N, chunk) bool


def training_frames(dataset: Any, views: tuple[str, ...], chunk: int) -> tuple[_Frames, Any, int]:
    """Every frame of the successful episodes, their action chunks (padded and masked past the end as
    LeRobot's delta_timestamps pad them), and the LeRobot statistics of those episodes."""
    images, states, actions, pads, stats = [], [], [], [], []
    for i in range(len(dataset)):
        if not dataset.episodes[i].get("success", True):
            continue
        ep = dataset.episode(i)
        missing = [v for v in views if v not in ep.images]
        if missing:
            raise ConfigError(f"episode {i} of {dataset.root} has no {', '.join(missing)} view")
        t = len(ep.action)
        idx = np.arange(t)[:, None] + np.arange(chunk)[None, :]
        images.append(np.stack([ep.images[v] for v in views], axis=1))
        states.append(np.asarray(ep.state, dtype=np.float32))
        actions.append(np.asarray(ep.action, dtype=np.float32)[np.minimum(idx, t - 1)])
        pads.append(idx >= t)
        stats.append(episode_stats(ep, views))
    if not stats:
        raise ConfigError(f"the dataset {dataset.root} has no successful episodes to learn from")
    frames = _Frames(
        np.concatenate(images), np.concatenate(states), np.concatenate(actions), np.concatenate(pads)
    )
    return frames, aggregate(stats), len(stats)


def train_act_demo(
    cfg: TrainActDemoConfig, out_dir: str | Path, dataset_dir: str | Path | None = None, progress: bool = True
) -> dict[str, Any]:
    """Train the demo ACT on `dataset_dir` (or on episodes recorded into `out_dir/dataset`) and write the
    checkpoint folder `out_dir`."""
    import torch

    from hotloop.families.act.checkpoint_io import save_act_checkpoint, write_processors
    from hotloop.lerobot.processors import read_policy_processors
    from hotloop.train.act_loss import act_loss
    from hotloop.train.conveyor import plot_loss
    from hotloop.train.loop import Schedule, check_finite, dataset_task, prepare_dataset, run_training

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    t_start = time.perf_counter()
    dataset, recorded = prepare_dataset(
        dataset_dir,
        out,
        {
            "task": cfg.task,
            "episodes": cfg.episodes,
            "difficulty": cfg.difficulty,
            "seed": cfg.record_seed,
            "action_noise": cfg.action_noise,
            "recovery_starts": cfg.recovery_starts,
            "views": cfg.views,
        },
    )
    t_recorded = time.perf_counter()
    act_cfg = model_config(cfg, dataset)
    frames, stats, used = training_frames(dataset, cfg.views, cfg.chunk_size)
    check_finite({"state": frames.state, "actions": frames.actions}, f"the dataset {dataset.root}")
    # The processors first: training normalises through the very files the checkpoint ships.
    write_processors(out, act_cfg, stats)
    pre, _ = read_policy_processors(out)
    model = new_model(act_cfg, cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    n = len(frames.state)
    images = torch.from_numpy(frames.images)
    state = torch.from_numpy(frames.state)
    actions = torch.from_numpy(frames.actions)
    is_pad = torch.from_numpy(frames.is_pad)

    def step_loss(step: int) -> dict[str, Any]:
        idx = torch.randint(0, n, (cfg.batch,), generator=gen)
        raw: dict[str, Any] = {"observation.state": state[idx], "action": actions[idx]}
        for v, view in enumerate(cfg.views):  # uint8 (B, H, W, 3) -> float in [0, 1], channels first
            raw[IMAGES_PREFIX + view] = images[idx, v].permute(0, 3, 1, 2).float() / 255
        batch = pre(raw)
        terms = act_loss(
            model,
            [batch[c] for c in act_cfg.cameras],
            batch["observation.state"],
            None,
            batch["action"],
            is_pad[idx],
            cfg.kl_weight,
            cfg.dropout,
        )
        return terms

    schedule = Schedule(cfg.steps, cfg.lr, cfg.min_lr, cfg.warmup, cfg.weight_decay, cfg.grad_clip)
    params = [p for p in model.parameters() if p.requires_grad]
    history = run_training(params, step_loss, schedule, "train-demo act", progress)
    t_trained = time.perf_counter()
    model.eval()
    save_act_checkpoint(out, model, act_cfg, stats, dropout=cfg.dropout, kl_weight=cfg.kl_weight,
                        optimizer_lr=cfg.lr, optimizer_weight_decay=cfg.weight_decay,
                        optimizer_lr_backbone=cfg.lr)  # fmt: skip
    plot_loss(history["l1"], out / "loss.png", title="ACT demo training (L1 on normalised actions)")
    summary = {
        "family": "act",
        "task": dataset_task(dataset, cfg.task),  # what the episodes were recorded on
        "difficulty": cfg.difficulty,
        "parameters": sum(p.numel() for p in model.parameters()),
        "views": list(cfg.views),
        "config": asdict(cfg),
        "training": {
            "episodes_used": used,
            "frames": int(n),
            "recorded": recorded,
            "record_s": round(t_recorded - t_start, 1),
            "train_s": round(t_trained - t_recorded, 1),
            "total_s": round(time.perf_counter() - t_start, 1),
            "final_l1": float(np.mean(history["l1"][-100:])),
            "final_kld": float(np.mean(history["kld"][-100:])),
            "torch": torch.__version__,
            "threads": cfg.threads,
        },
    }
    atomic_write_json(out / "train.json", summary)
    atomic_write_json(out / "loss.json", {k: [round(x, 5) for x in v] for k, v in history.items()})
    return summary


def run_from_cli(
    out: Path,
    *,
    steps: int | None,
    episodes: int | None,
    dataset: Path | None,
    seed: int,
    threads: int | None,
    views: tuple[str, ...] | None = None,
) -> None:
    """`hotloop train-demo --family act`."""
    import typer

    from hotloop.train.loop import cli_updates

    updates = cli_updates(seed, views, steps, episodes, threads)
    cfg = dataclasses.replace(TrainActDemoConfig(), **updates)
    summary = train_act_demo(cfg, out, dataset_dir=dataset)
    tr = summary["training"]
    typer.echo(
        f"trained {summary['parameters'] / 1e6:.2f} M parameters in {tr['train_s']:.0f} s (recording "
        f"{tr['record_s']:.0f} s); final L1 {tr['final_l1']:.4f}, KL {tr['final_kld']:.4f}; wrote the "
        f"checkpoint {out} (try `hotloop eval {out} --task {summary['task']}`)"
    )


__all__ = ["TrainActDemoConfig", "model_config", "new_model", "run_from_cli", "train_act_demo"]
