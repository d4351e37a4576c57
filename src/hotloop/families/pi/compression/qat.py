"""Quantization-aware training: fine-tune with fake quantization when post-training quantization misses
the tolerance.

The student is a copy of the fp32 model whose linears (all but the protected ones and a mixed plan's
fp32 layers) compute with quantize-dequantized weights and inputs (`fake_quant`, straight-through
gradients). Loss per batch of recorded frames, at one draw of noise and time:

    flow matching  |v_student(x_t, t) - (noise - actions)|^2     (as `sampling.flow_matching_loss`)
  + distillation   |v_student(x_t, t) - v_teacher(x_t, t)|^2     (the fp32 model, frozen)

both over the target's real action columns. Every `checkpoint_every` steps the student, optimizer and
random-stream state are written atomically to `OUT/qat_checkpoint.pt`; a run started on the same
folder with the same settings resumes from there and ends with the same weights as an uninterrupted run.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.errors import CheckpointError, ConfigError
from hotloop.families.pi.sampling import PiObservation, sample_time
from hotloop.models.pi0 import PiModel
from hotloop.nn.fake_quant import attach_fake_quant, check_mode, detach_fake_quant, linear_layers

CHECKPOINT = "qat_checkpoint.pt"


@dataclass(frozen=True)
class QatConfig:
    mode: str = "int8"
    steps: int = 200
    batch: int = 8
    lr: float = 1e-4
    distill_weight: float = 1.0
    checkpoint_every: int = 25
    eval_size: int = 8  # the fixed evaluation rows (first of the calibration set), fixed noise and times
    seed: int = 0

    def __post_init__(self) -> None:
        check_mode(self.mode)
        for name in ("steps", "batch", "checkpoint_every", "eval_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if not 0 < self.lr < 1:
            raise ConfigError(f"--lr must be in (0, 1) (got {self.lr})")
        if self.distill_weight < 0:
            raise ConfigError(f"--distill-weight must be >= 0 (got {self.distill_weight})")


@dataclass(frozen=True)
class QatResult:
    steps_done: int
    resumed_from: int  # 0 when started fresh
    eval_loss_before: float
    eval_loss_after: float
    losses: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def velocity(model: PiModel, obs: PiObservation, x_t: Tensor, t: Tensor) -> Tensor:
    image_tokens = model.vision(obs.images)
    cache = model.prefix(image_tokens, obs.image_masks, obs.lang_tokens, obs.lang_masks)
    return model.denoise_step(cache, x_t, t, obs.state)


def qat_losses(
    student: PiModel,
    teacher: PiModel,
    obs: PiObservation,
    actions: Tensor,
    noise: Tensor,
    t: Tensor,
    mask: Tensor,
) -> tuple[Tensor, Tensor]:
    """(flow-matching loss, distillation loss), each averaged over the real action columns."""
    tt = t[:, None, None]
    x_t = tt * noise + (1 - tt) * actions
    v = velocity(student, obs, x_t, t)
    with torch.no_grad():
        v_teacher = velocity(teacher, obs, x_t, t)
    denom = mask.sum() * v.shape[0] * v.shape[1]
    fm = (F.mse_loss(v, (noise - actions).float(), reduction="none") * mask).sum() / denom
    kd = (F.mse_loss(v, v_teacher, reduction="none") * mask).sum() / denom
    return fm, kd


def quantized_layer_names(model: PiModel, fp32_layers: dict[str, list[str]] | None = None) -> list[str]:
    """Model-level names of the linears QAT fake-quantizes: all but protected and the plan's fp32 ones
    (named inside the plain sub-engines, mapped back to the model's modules by identity)."""
    names = linear_layers(model)
    if not fp32_layers:
        return sorted(names)
    from hotloop.families.pi.engines import PiEngineShape, build_pi_subengines

    engines = build_pi_subengines(model, PiEngineShape.of(model.cfg), torch.float32)  # shares the modules
    keep = {
        id(engines[sub].module.get_submodule(n))
        for sub, layer_names in fp32_layers.items()
        for n in layer_names
    }
    return sorted(n for n, m in names.items() if id(m) not in keep)


def _save(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def run_qat(
    model: PiModel,
    calib: Any,
    config: QatConfig,
    out: str | Path,
    action_dim: int,
    fp32_layers: dict[str, list[str]] | None = None,
    stop_after: int | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[PiModel, QatResult]:
    """Fine-tune a fake-quantized copy of `model` on `calib`; returns (student with plain linears, result).

    `stop_after` ends this call after that many steps (an interruption, as a killed run leaves it: the
    last checkpoint on disk); calling again resumes.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if len(calib) < config.batch:
        raise ConfigError(
            f"--batch {config.batch} is larger than the {len(calib)} calibration frames; lower it or "
            "sample more with --calibration-frames"
        )
    teacher = copy.deepcopy(model).float().eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    student = copy.deepcopy(model).float().train()
    for p in student.parameters():  # the model may come frozen (a recipe freezes every step's result)
        p.requires_grad_(True)
    layers = quantized_layer_names(student, fp32_layers)
    attach_fake_quant(student, layers, config.mode)
    opt = torch.optim.AdamW(student.parameters(), lr=config.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(config.seed)
    mask = torch.zeros(model.cfg.max_action_dim)
    mask[:action_dim] = 1.0
    n = len(calib)
    # The fixed evaluation set: first rows, noise and times drawn once from their own seed.
    ev = list(range(min(config.eval_size, n)))
    eval_gen = torch.Generator().manual_seed(config.seed + 7919)
    ev_noise = torch.randn(calib.actions[ev].shape, generator=eval_gen)
    ev_time = sample_time(len(ev), eval_gen)

    def eval_loss() -> float:
        student.eval()
        with torch.no_grad():
            fm, kd = qat_losses(student, teacher, calib.batch(ev), calib.actions[ev], ev_noise, ev_time, mask)
        student.train()
        return float(fm + config.distill_weight * kd)

    path = out / CHECKPOINT
    start, losses, before = 0, [], None
    settings = {**asdict(config), "layers": layers, "calibration": calib.sha256, "action_dim": action_dim}
    if path.is_file():
        try:
            state = torch.load(path, weights_only=False)
        except Exception as exc:  # noqa: BLE001 - torch raises several types on a damaged file
            raise CheckpointError(
                f"{path} cannot be read ({type(exc).__name__}); delete it to start over"
            ) from None
        if state.get("settings") != settings:
            raise CheckpointError(
                f"{path} was written by a QAT run with other settings; use a new -o folder or delete it"
            )
        student.load_state_dict(state["student"])
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        start, losses, before = int(state["step"]), list(state["losses"]), float(state["eval_before"])
    if before is None:
        before = eval_loss()
    resumed_from = start
    done_here = 0
    for step in range(start, config.steps):
        if stop_after is not None and done_here >= stop_after:
            break
        idx = torch.randint(0, n, (config.batch,), generator=gen).tolist()
        actions = calib.actions[idx]
        noise = torch.randn(actions.shape, generator=gen)
        t = sample_time(config.batch, gen)
        fm, kd = qat_losses(student, teacher, calib.batch(idx), actions, noise, t, mask)
        loss = fm + config.distill_weight * kd
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        done_here += 1
        if progress is not None:
            progress(step, losses[-1])
        if (step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps:
            _save(
                path,
                {
                    "step": step + 1,
                    "student": student.state_dict(),
                    "optimizer": opt.state_dict(),
                    "generator": gen.get_state(),
                    "losses": losses,
                    "eval_before": before,
                    "settings": settings,
                },
            )
    steps_done = start + done_here
    after = eval_loss()
    student.eval()
    result = QatResult(steps_done, resumed_from, before, after, tuple(losses))
    detach_fake_quant(student)
    return student, result
