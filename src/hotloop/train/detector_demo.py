"""`hotloop train-demo --variant detector`: train `demo:detector`, the learned box detector of conveyor-pick.

Frames: the scripted expert's episodes rendered at 128 px (the largest resolution trained at; smaller
inputs are area-averaged from it), labelled from the simulator (`hotloop.perception.detector_data`), or
the top views of a dataset `hotloop record` wrote (`--dataset`). Training is multi-scale: each step
draws its batch at the next of `resolutions` in turn, so one set of weights serves every point of the
resolution curve. Augmentation: horizontal flips (the top camera sits on the belt's centre line, so a
mirrored view is a view the camera could take), brightness and contrast jitter and pixel noise (a
little robustness to lighting and sensor noise, which `--perturb` probes).

Loss (CenterNet's): penalty-reduced focal loss on the centre heatmap against a Gaussian around the
centre cell, L1 on the centre's offset inside its cell and on the box size at that cell.

After training, the detector is scored on held-out seeds (`HELD_OUT_SEED`...): at every trained
resolution on the 128 px renders, and at 64 px on native 64 px renders (what the closed loop's camera
gives) beside the colour threshold on the same frames; the numbers go to detector.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError
from hotloop.train.demo_trainer import DemoTrainer
from hotloop.train.options import TrainOptions, summary_config
from hotloop.train.run import Folder


@dataclass(frozen=True)
class TrainDetectorConfig(TrainOptions):
    episodes: int = 400  # expert episodes rendered for training (seeds from record_seed)
    held_out: int = 40  # held-out episodes for the report (seeds from HELD_OUT_SEED)
    every: int = 1  # keep every n-th control step's frame
    size: int = 128  # render size (px)
    resolutions: tuple[int, ...] = (32, 48, 64, 96, 128)
    width: int = 16
    lr: float = 3e-3
    min_lr: float = 1e-4
    warmup: int = 50
    grad_clip: float = 5.0
    record_seed: int = 10_000
    # Closed-loop episodes of the chain whose frames join the expert's (`hotloop.train.detector_rollouts`):
    # the frames the deployed chain meets, which the expert's episodes do not show (seeds from rollout_seed).
    rollouts: int = 0
    rollout_seed: int = 20_000
    rollout_pipeline: str = "detector:model=learned"
    store_dtype: str = "float16"

    def __post_init__(self) -> None:
        from hotloop.perception.learned_detector import check_resolution

        super().__post_init__()
        self.check_positive("every", "held_out")
        if self.rollouts < 0:
            raise ConfigError(f"--rollouts must be >= 0 (got {self.rollouts})")
        if self.rollouts:  # a bad chain fails here, before any frame is rendered
            from hotloop.train.detector_rollouts import check_rollout_pipeline

            check_rollout_pipeline(self.rollout_pipeline)
        for r in self.resolutions:
            check_resolution(r, "train-demo resolution")


def _targets(centre: Any, bbox: Any, visible: Any, grid: int) -> tuple[Any, Any, Any, Any, Any]:
    """Heatmap (B, g, g), positive mask (B, g, g), offset (B, 2), size (B, 2) and centre cell (B, 2)."""
    import torch

    from hotloop.perception.learned_detector import SIZE_SCALE

    b = centre.shape[0]
    c = centre * grid  # in cells
    cell = c.floor().clamp(0, grid - 1).long()
    size = (bbox[:, 2:] - bbox[:, :2]).clamp(min=0)
    sigma = (0.25 * size.mean(dim=1) * grid).clamp(min=0.6)
    coords = torch.arange(grid, dtype=torch.float32) + 0.5
    dx = coords[None, None, :] - c[:, 0, None, None]
    dy = coords[None, :, None] - c[:, 1, None, None]
    heat = torch.exp(-(dx**2 + dy**2) / (2 * sigma[:, None, None] ** 2))
    pos = torch.zeros(b, grid, grid, dtype=torch.bool)
    rows = torch.arange(b)
    pos[rows, cell[:, 1], cell[:, 0]] = True
    pos &= visible[:, None, None]
    heat = torch.where(pos, torch.ones_like(heat), heat) * visible[:, None, None]
    return heat, pos, c - cell.float(), size * SIZE_SCALE, cell


def detector_loss(out: Any, centre: Any, bbox: Any, visible: Any) -> dict[str, Any]:
    """CenterNet's loss terms for one batch of output maps (B, 5, g, g) and labels."""
    import torch
    import torch.nn.functional as F

    grid = out.shape[-1]
    heat, pos, offset, size, cell = _targets(centre, bbox, visible, grid)
    logit = out[:, 0]
    p = torch.sigmoid(logit)
    # Penalty-reduced focal loss (alpha 2, beta 4), in log-sigmoid form for stability.
    pos_loss = -F.logsigmoid(logit) * (1 - p) ** 2
    neg_loss = -F.logsigmoid(-logit) * p**2 * (1 - heat) ** 4
    n_pos = pos.sum().clamp(min=1)
    focal = (torch.where(pos, pos_loss, neg_loss)).sum() / n_pos
    rows = torch.arange(out.shape[0])
    at = out[rows, :, cell[:, 1], cell[:, 0]]  # (B, 5) at each centre cell
    vis = visible.float()[:, None]
    off = (F.l1_loss(torch.sigmoid(at[:, 1:3]), offset, reduction="none") * vis).sum() / n_pos
    wh = (F.l1_loss(at[:, 3:5], size, reduction="none") * vis).sum() / n_pos
    return {"loss": focal + off + 0.5 * wh, "heat": focal, "offset": off, "size": wh}


def train_detector(
    cfg: TrainDetectorConfig, out_dir: Folder, dataset_dir: Folder | None = None, progress: bool = True
) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from hotloop.perception.detector_data import (
        HELD_OUT_SEED,
        concat_frames,
        frames_from_dataset,
        render_frames,
    )
    from hotloop.perception.detector_eval import evaluate_colour, evaluate_learned
    from hotloop.perception.learned_detector import DetectorConfig, DetectorModel, build_network
    from hotloop.sim.tasks.conveyor import BOX_HALF
    from hotloop.sim.tasks.gantry import BELT_TOP
    from hotloop.train.data import check_dataset_dir
    from hotloop.train.run import TrainingRun, final

    run = TrainingRun.start(out_dir, cfg, progress)
    if dataset_dir is not None:
        train = frames_from_dataset(check_dataset_dir(dataset_dir))
    else:
        seeds = range(cfg.record_seed, cfg.record_seed + cfg.episodes)
        train = render_frames(seeds, cfg.size, every=cfg.every, progress=progress)
    expert_frames = len(train)
    rollouts: dict[str, Any] | None = None
    if cfg.rollouts:
        from hotloop.train.detector_rollouts import rollout_frames

        seen, rollouts = rollout_frames(
            range(cfg.rollout_seed, cfg.rollout_seed + cfg.rollouts), train.size, cfg.rollout_pipeline,
            every=cfg.every, progress=progress,
        )  # fmt: skip
        rollouts["frames"] = len(seen)
        train = concat_frames([train, seen])
    run.data_done()

    gen = torch.Generator().manual_seed(cfg.seed)
    net = build_network(cfg.width)
    images = torch.from_numpy(train.images)  # uint8, converted per batch
    centres = torch.from_numpy(train.centre)
    boxes = torch.from_numpy(train.bbox)
    visible = torch.from_numpy(train.visible)
    n = len(train)

    def step_loss(step: int) -> dict[str, Any]:
        res = cfg.resolutions[step % len(cfg.resolutions)]
        idx = torch.randint(0, n, (cfg.batch,), generator=gen)
        x = images[idx].permute(0, 3, 1, 2).float().div_(255.0)
        if x.shape[-1] != res:
            mode = "area" if res < x.shape[-1] else "bilinear"
            x = F.interpolate(x, size=(res, res), mode=mode)
        c, bb = centres[idx].clone(), boxes[idx].clone()
        flip = torch.rand(cfg.batch, generator=gen) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        c[flip, 0] = 1.0 - c[flip, 0]
        bb[flip, 0], bb[flip, 2] = 1.0 - boxes[idx][flip, 2], 1.0 - boxes[idx][flip, 0]
        gain = 0.75 + 0.5 * torch.rand(cfg.batch, 1, 1, 1, generator=gen)
        shift = 0.1 * (torch.rand(cfg.batch, 1, 1, 1, generator=gen) - 0.5)
        noise = 0.03 * torch.rand(cfg.batch, 1, 1, 1, generator=gen) * torch.randn(x.shape, generator=gen)
        x = (x * gain + shift + noise).clamp_(0.0, 1.0)
        return detector_loss(net(x), c, bb, visible[idx])

    net.train()
    history = run.train(list(net.parameters()), step_loss, "train-demo detector")
    net.eval()

    plane_z = BELT_TOP + BOX_HALF
    config = DetectorConfig(width=cfg.width, resolutions=tuple(cfg.resolutions))
    model = DetectorModel(net, config)
    held = range(HELD_OUT_SEED, HELD_OUT_SEED + cfg.held_out)
    frames_hi = render_frames(held, cfg.size, progress=progress)
    frames_hi.save(run.out / "held_out.npz")  # for `hotloop perception-curve demo:detector --data`
    frames_64 = render_frames(held, 64, progress=progress)
    evaluation = {
        "held_out_seeds": [held.start, held.stop - 1],
        "per_resolution": {
            str(r): evaluate_learned(model, frames_hi, r, plane_z).to_dict() for r in cfg.resolutions
        },
        "camera_64px": {
            "learned": evaluate_learned(model, frames_64, 64, plane_z).to_dict(),
            "colour_threshold": evaluate_colour(frames_64, plane_z).to_dict(),
        },
    }
    losses = [sum(t) for t in zip(history["heat"], history["offset"], history["size"], strict=True)]
    model.meta = {
        "variant": "detector",
        "task": "conveyor-pick",
        "parameters": model.parameters,
        "evaluation": evaluation,
        "training": {
            **run.training_summary(
                {
                    "frames": n,
                    "expert_frames": expert_frames,
                    "rollouts": rollouts,
                    "source": str(dataset_dir) if dataset_dir is not None else f"rendered {cfg.size} px",
                },
                {"final_loss": final(losses, last=50)},
                data_phase="data",
            ),
            "config": summary_config(cfg),
        },
    }
    model.save(run.out, cfg.store_dtype)
    run.write_losses(history, losses, "demo:detector training (focal + offset + size loss)")
    return model.meta


def _report(meta: dict[str, Any], out: Path) -> str:
    tr, ev = meta["training"], meta["evaluation"]["camera_64px"]
    learned, colour = ev["learned"], ev["colour_threshold"]
    return (
        f"trained {meta['parameters']} parameters on {tr['frames']} frames in {tr['train_s']:.0f} s "
        f"(frames {tr['data_s']:.0f} s); held out at 64 px: centre p50 {_mm(learned['centre_mm_p50'])} "
        f"(colour threshold {_mm(colour['centre_mm_p50'])}), detection {learned['detection_rate']:.1%} "
        f"({colour['detection_rate']:.1%}), IoU {learned['iou']:.2f} ({colour['iou']:.2f}); wrote {out}"
    )


def _mm(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} mm"


SHIPPED = ("detector.safetensors", "detector.json", "loss.png")


def ship_detector(run_dir: str | Path) -> Path:
    """Copy a trained detector into the package assets (what `demo:detector` loads)."""
    from hotloop.perception.learned_detector import ASSET_DIR
    from hotloop.train.run import ship

    return ship(run_dir, ASSET_DIR, SHIPPED, "hotloop train-demo --variant detector")


TRAINER = DemoTrainer(TrainDetectorConfig, train_detector, "demo:detector", ship_detector, report=_report)
