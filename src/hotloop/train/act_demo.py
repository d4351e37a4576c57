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

from dataclasses import dataclass
from typing import Any

from hotloop.errors import ConfigError
from hotloop.train.demo_trainer import TRY_EVAL, DemoTrainer, ship_checkpoint
from hotloop.train.lerobot_frames import IMAGES_PREFIX
from hotloop.train.options import CameraDemoOptions
from hotloop.train.run import Folder


@dataclass(frozen=True)
class TrainActDemoConfig(CameraDemoOptions):
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
    # From scratch (LeRobot's 1e-5 is for a pretrained backbone); weight decay 1e-4 and clipping at 10 as
    # LeRobot's ACT preset (the options' defaults).
    lr: float = 3e-4

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_positive("chunk_size", "n_action_steps")
        if self.n_action_steps > self.chunk_size:
            raise ConfigError(f"n_action_steps {self.n_action_steps} exceeds chunk_size {self.chunk_size}")


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
    from hotloop.train.data import view_sizes

    camera_shapes = [(3, h, w) for h, w in view_sizes(dataset, cfg.views)]
    sizes = {name: getattr(cfg, name) for name in _MODEL_SIZES}
    return ACTConfig(
        cameras=tuple(IMAGES_PREFIX + view for view in cfg.views),
        camera_shapes=tuple(camera_shapes),
        state_dim=int(dataset.features["observation.state"]["shape"][0]),
        env_state_dim=None,
        action_dim=int(dataset.features["action"]["shape"][0]),
        feedforward_activation="relu", pre_norm=False, use_vae=True, temporal_ensemble_coeff=None,
        replace_final_stride_with_dilation=False,
        backbone_shapes=tuple(
            sorted(resnet_shapes(cfg.vision_backbone, cfg.stem_width, cfg.stage_widths).items())
        ),
        **sizes,
    )  # fmt: skip


# The ACTConfig fields the demo's options set under the same name.
_MODEL_SIZES = (
    "chunk_size", "n_action_steps", "dim_model", "n_heads", "dim_feedforward", "n_encoder_layers",
    "n_decoder_layers", "latent_dim", "n_vae_encoder_layers", "vision_backbone",
)  # fmt: skip


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


def train_act_demo(
    cfg: TrainActDemoConfig, out_dir: Folder, dataset_dir: Folder | None = None, progress: bool = True
) -> dict[str, Any]:
    """Train the demo ACT on `dataset_dir` (or on episodes recorded into `out_dir/dataset`) and write the
    checkpoint folder `out_dir`."""
    import torch

    from hotloop.families.act.checkpoint_io import save_act_checkpoint, write_processors
    from hotloop.lerobot.processors import read_policy_processors
    from hotloop.train.act_loss import act_loss
    from hotloop.train.data import check_finite
    from hotloop.train.lerobot_frames import training_frames
    from hotloop.train.run import TrainingRun, final

    run = TrainingRun.start(out_dir, cfg, progress)
    dataset, recorded = run.dataset(dataset_dir, cfg)
    act_cfg = model_config(cfg, dataset)
    frames, stats, used = training_frames(dataset, cfg.views, cfg.chunk_size)
    check_finite({"state": frames.state, "actions": frames.actions}, f"the dataset {dataset.root}")
    # The processors first: training normalises through the very files the checkpoint ships.
    write_processors(run.out, act_cfg, stats)
    pre, _ = read_policy_processors(run.out)
    model = new_model(act_cfg, cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    n = len(frames.state)
    images, state, actions, is_pad = frames.tensors()

    def step_loss(step: int) -> dict[str, Any]:
        idx = torch.randint(0, n, (cfg.batch,), generator=gen)
        raw: dict[str, Any] = {"observation.state": state[idx], "action": actions[idx]}
        for v, view in enumerate(cfg.views):  # uint8 (B, H, W, 3) -> float in [0, 1], channels first
            raw[IMAGES_PREFIX + view] = images[idx, v].permute(0, 3, 1, 2).float() / 255
        batch = pre(raw)
        cameras = [batch[c] for c in act_cfg.cameras]
        return act_loss(model, cameras, batch["observation.state"], None, batch["action"], is_pad[idx],
                        cfg.kl_weight, cfg.dropout)  # fmt: skip

    history = run.train([p for p in model.parameters() if p.requires_grad], step_loss, "train-demo act")
    model.eval()
    save_act_checkpoint(run.out, model, act_cfg, stats, dropout=cfg.dropout, kl_weight=cfg.kl_weight,
                        optimizer_lr=cfg.lr, optimizer_weight_decay=cfg.weight_decay,
                        optimizer_lr_backbone=cfg.lr)  # fmt: skip
    data = {"episodes_used": used, "frames": int(n), "recorded": recorded}
    finals = {"final_l1": final(history["l1"]), "final_kld": final(history["kld"])}
    summary = run.write_summary(
        "train.json", cfg, dataset, model, run.training_summary(data, finals), family="act"
    )
    run.write_losses(history, history["l1"], "ACT demo training (L1 on normalised actions)")
    return summary


TRAINER = DemoTrainer(
    TrainActDemoConfig, train_act_demo, "demo:conveyor-act", ship_checkpoint("act"),
    finals=(("L1", "final_l1"), ("KL", "final_kld")), wrote=TRY_EVAL,
)  # fmt: skip

__all__ = ["TRAINER", "TrainActDemoConfig", "model_config", "new_model", "train_act_demo"]
