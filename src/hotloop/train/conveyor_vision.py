"""`hotloop train-demo --variant vision`: train `demo:conveyor-vision` (pi0.5 at the `pi05:mini` size).

The recipe of `demo:conveyor` (DART noise, recovery starts, ordinal state-bin embeddings, zero-noise
sampling) with the box taken out of the state: the model gets the end effector and grip opening only, and
must find the box in the camera images: the 64 px top view, which shows where it is on the belt, and the
wrist view (a camera on the gripper looking between the fingers), which shows it close up for the last
centimetres that the top view's 16 px patches blur. Two additions make that learnable on two CPU cores:

- **A box-localisation auxiliary loss.** A linear probe on the vision tower's patch features predicts the
  box position (normalised), supervised by the simulator's box position. The probe is a training-time
  head only (it is not saved; the policy never receives the box pose): it gives the vision tower a dense
  signal of where the box is from the first step, where the flow-matching loss alone gives a weak,
  indirect one and the tower takes thousands of steps to start localising.
- **Several flow-matching draws per observation.** The vision tower and the VLM run once per image; the
  expert is evaluated at `noise_draws` (noise, time) pairs against that one prefix, so each expensive
  forward pass yields more action supervision.

Everything is seeded and torch runs deterministic CPU kernels: the same config and thread count give the
same weights. The shipped weights are stored as float16 (half the bytes; loaded as float32).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.train.demo_trainer import DemoTrainer
from hotloop.train.options import CameraDemoOptions
from hotloop.train.run import Folder


@dataclass(frozen=True)
class TrainVisionDemoConfig(CameraDemoOptions):
    episodes: int = 500
    ordinal_state_embeddings: bool = True
    model: str = "pi05:mini"  # its `views` is set to len(views)
    steps: int = 2000  # the shipped weights (24 min on one thread of a 2-core EPYC); docs/closed-loop.md
    batch: int = 24
    noise_draws: int = 2  # flow-matching (noise, time) draws per observation, sharing one prefix
    aux_weight: float = 1.0  # weight of the box-localisation probe's loss (training only)
    min_lr: float = 3e-5
    warmup: int = 50
    grad_clip: float = 1.0
    store_dtype: str = "float16"  # what model.safetensors holds; loaded as float32

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_positive("noise_draws")
        if self.aux_weight < 0:
            raise ConfigError(f"train-demo aux_weight must be >= 0 (got {self.aux_weight})")
        if self.store_dtype not in ("float16", "float32"):
            raise ConfigError(f"train-demo store_dtype must be float16 or float32 (got {self.store_dtype!r})")


@dataclass
class _Arrays:
    images: np.ndarray  # (N, V, H, W, 3) uint8, the views in model order
    tokens: np.ndarray  # (N, L) int64: prompt + proprioceptive state bins
    token_masks: np.ndarray  # (N, L) bool
    actions: np.ndarray  # (N, H, max_action_dim) float32, normalised, zero-padded
    box: np.ndarray  # (N, 3) float32: normalised box position, the probe's label (never a model input)
    action_dim: int


def _build_arrays(
    dataset: Any, cfg_model: Any, horizon: int, views: tuple[str, ...], gantry: bool = True
) -> tuple[_Arrays, Any, int]:
    """The training arrays. `gantry`: the conveyor-pick layout (proprioceptive state, actions relative to
    the hand, the box position as the probe's label); otherwise the dataset's own state and actions as
    they are, and no probe label (zeros: the probe is off)."""
    from hotloop.demos.conveyor import to_relative
    from hotloop.demos.conveyor_vision import proprio_state
    from hotloop.train.data import chunk_indices, successful_episodes
    from hotloop.train.pi_arrays import padded_actions, quantile_norm, quantiles, state_tokens

    images, states, chunks, boxes = [], [], [], []
    used = 0
    for ep in successful_episodes(dataset, views):
        used += 1
        idx, _ = chunk_indices(len(ep.action), horizon)
        if gantry:
            chunks.append(to_relative(ep.action[idx], ep.state))
            states.append(proprio_state(ep.state))
            boxes.append(np.asarray(ep.state, dtype=np.float32)[:, 4:7])
        else:  # another task's layout: nothing is known of which entries are the hand or an object
            chunks.append(np.asarray(ep.action, dtype=np.float32)[idx])
            states.append(np.asarray(ep.state, dtype=np.float32))
            boxes.append(np.zeros((len(ep.action), 3), dtype=np.float32))
        images.append(np.stack([ep.images[v] for v in views], axis=1))
    state = np.concatenate(states)
    rel = np.concatenate(chunks)
    box = np.concatenate(boxes)
    norm = quantile_norm(state, rel)
    tokens, masks = state_tokens(norm, state, cfg_model)
    b_lo, b_hi = quantiles(box)
    nbox = ((box - b_lo) / (b_hi - b_lo) * 2.0 - 1.0).astype(np.float32) if gantry else box
    arrays = _Arrays(
        np.concatenate(images), tokens, masks, padded_actions(norm, rel, cfg_model), nbox, rel.shape[-1]
    )
    return arrays, norm, used


def _store_weights(folder: Path, dtype_name: str) -> None:
    """Rewrite model.safetensors with its float tensors in `dtype_name` (the loader casts them back)."""
    import torch
    from safetensors.torch import load_file

    from hotloop.io import save_tensors

    if dtype_name == "float32":
        return
    dtype = getattr(torch, dtype_name)
    path = folder / "model.safetensors"
    tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in load_file(str(path)).items()}
    save_tensors(tensors, str(path), metadata={"format": "pt"})


def train_vision_demo(
    cfg: TrainVisionDemoConfig, out_dir: Folder, dataset_dir: Folder | None = None, progress: bool = True
) -> dict[str, Any]:
    """Train demo:conveyor-vision's pi0.5-mini on `dataset_dir` (or on episodes recorded into `out_dir`)."""
    import torch
    import torch.nn.functional as F

    from hotloop.families.pi.checkpoint import save_lerobot_checkpoint
    from hotloop.families.pi.sampling import sample_time
    from hotloop.families.pi.training import new_model, repeat_cache
    from hotloop.models.configs import get_pi_config
    from hotloop.train.data import check_finite, has_gantry_layout
    from hotloop.train.pi_arrays import action_mask
    from hotloop.train.run import TrainingRun, final

    run = TrainingRun.start(out_dir, cfg, progress)
    dataset, recorded = run.dataset(dataset_dir, cfg)
    model_cfg = dataclasses.replace(get_pi_config(cfg.model), views=len(cfg.views))
    horizon = model_cfg.chunk_size
    # conveyor-pick's layout gets its recipe; another task's dataset is learnt in its own state and actions
    gantry = has_gantry_layout(dataset)
    arrays, norm, used = _build_arrays(dataset, model_cfg, horizon, cfg.views, gantry)
    aux_weight = cfg.aux_weight if gantry else 0.0  # no box to localise in another task's state
    check_finite({"actions": arrays.actions, "box": arrays.box}, f"the dataset {dataset.root}")
    if arrays.images.shape[2] != model_cfg.vision.image_size:
        raise ConfigError(
            f"the dataset's images are {arrays.images.shape[2]} px; {cfg.model} takes "
            f"{model_cfg.vision.image_size} px (record with --image-size {model_cfg.vision.image_size})"
        )
    n = arrays.images.shape[0]

    gen = torch.Generator().manual_seed(cfg.seed)
    model = new_model(model_cfg, gen, cfg.ordinal_state_embeddings)
    # The box probe: every view's patch features (B, V*T, W) flattened -> normalised box xyz. Training only.
    nv = len(cfg.views)
    probe = torch.nn.Linear(nv * model_cfg.vision.tokens_per_view * model_cfg.vision.width, 3)
    with torch.no_grad():
        probe.weight.normal_(0.0, 0.1 / probe.weight.shape[1] ** 0.5, generator=gen)
        probe.bias.zero_()
    model.train()
    images = torch.from_numpy(arrays.images)
    tokens = torch.from_numpy(arrays.tokens)
    token_masks = torch.from_numpy(arrays.token_masks)
    actions = torch.from_numpy(arrays.actions)
    boxes = torch.from_numpy(arrays.box)
    mask = action_mask(model_cfg, arrays.action_dim)
    ones = torch.ones(cfg.batch, nv, dtype=torch.bool)
    k = cfg.noise_draws

    def step_loss(step: int) -> dict[str, Any]:
        idx = torch.randint(0, n, (cfg.batch,), generator=gen)
        img = images[idx].permute(0, 1, 4, 2, 3).flatten(0, 1).float().div_(127.5).sub_(1.0)
        feats = model.vision_tower(img).reshape(cfg.batch, -1, model_cfg.vision.width)  # (B, V*T, W)
        image_tokens = model.projector(feats)
        cache = model.prefix(image_tokens, ones, tokens[idx], token_masks[idx])
        target = actions[idx].repeat_interleave(k, dim=0)
        noise = torch.randn(target.shape, generator=gen)
        t = sample_time(target.shape[0], gen)
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * target
        v_t = model.denoise_step(repeat_cache(cache, k), x_t, t)
        per = F.mse_loss(v_t, noise - target, reduction="none")
        flow = (per * mask).sum() / (mask.sum() * per.shape[0] * per.shape[1])
        aux = F.mse_loss(probe(feats.flatten(1)), boxes[idx]) if aux_weight else torch.zeros(())
        return {"loss": flow + aux_weight * aux, "flow": flow, "box": aux}

    history = run.train([*model.parameters(), *probe.parameters()], step_loss, "train-demo vision")
    losses, aux_losses = history["flow"], history["box"]
    model.eval()
    save_lerobot_checkpoint(model, model_cfg, run.out, norm_stats=norm)
    _store_weights(run.out, cfg.store_dtype)
    own = {
        "variant": "vision",
        "model": cfg.model,
        "horizon": horizon,
        "action_dim": arrays.action_dim,
        **_layout(dataset, gantry),
        "prompt_tokens": [1, 2, 3],
        "zero_noise": True,
        "stored_dtype": cfg.store_dtype,
    }
    data = {"episodes_used": used, "frames": int(n), "recorded": recorded}
    finals = {"final_loss": final(losses), "final_box_probe_mse": final(aux_losses)}
    summary = run.write_summary("demo.json", cfg, dataset, model, run.training_summary(data, finals), **own)
    run.write_losses(
        {"flow": losses, "box_probe": aux_losses},
        losses,
        "demo:conveyor-vision training (flow-matching loss)",
    )
    return summary


def _layout(dataset: Any, gantry: bool) -> dict[str, Any]:
    """demo.json's description of the numbers the model reads and writes: `state_layout` / `action_layout`
    tell the policy wrapper (`hotloop.demos.conveyor.DemoConveyorPolicy`) which transforms to apply."""
    if gantry:
        return {
            "state_layout": "gantry",
            "action_layout": "ee_relative",
            "state_transform": "ee xyz, grip opening only (hotloop.demos.conveyor_vision.proprio_state); "
            "the box is seen only in the camera image",
            "action_transform": "xyz relative to the ee at observation time, absolute grip",
        }
    return {
        "state_layout": "dataset",
        "action_layout": "absolute",
        "state_names": [str(n) for n in dataset.features["observation.state"].get("names") or []]
        or [f"state_{i}" for i in range(dataset.widths["observation.state"])],
        "state_transform": "the dataset's own state, as recorded",
        "action_transform": "the dataset's own actions, absolute",
    }


def ship_vision_assets(run_dir: str | Path) -> Path:
    """Copy a trained run's checkpoint files into the package's assets (what `demo:conveyor-vision` loads)."""
    from hotloop.demos.conveyor_vision import ASSET_DIR
    from hotloop.train.conveyor import SHIPPED_FILES
    from hotloop.train.run import ship

    return ship(run_dir, ASSET_DIR, SHIPPED_FILES, "hotloop train-demo --variant vision")


TRAINER = DemoTrainer(
    TrainVisionDemoConfig, train_vision_demo, "demo:conveyor-vision", ship_vision_assets,
    finals=(("loss", "final_loss"), ("box probe", "final_box_probe_mse")),
)  # fmt: skip
