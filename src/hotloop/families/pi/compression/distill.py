"""Distillation recovery: an fp32 teacher teaches a compressed (pruned) student, resumably.

Loss per batch, at the same noise and flow time for both models:
    velocity MSE   |v_student(x_t, t) - v_teacher(x_t, t)|^2
    action L2      |(x_t - t v_student) - â|^2  (the student's one-step estimate of the clean chunk)
    features       |h_student - h_teacher|^2 at chosen layers (widths are kept by pruning; after
                   `vision-res` the teacher's image tokens are area-pooled onto the student's grid)
x_t is built from `a`: the recorded action chunk when episodes are given, else the teacher's own sampled
chunk, so the student can be distilled on observations alone. â is `a` for recorded chunks; toward the
teacher it is the teacher's own one-step estimate (x_t - t v_teacher): a one-step estimate is a mean over
the chunks x_t could lead to, not the one sample `a`, so pulling toward `a` pulls the student away from
the teacher (measured on a pruned pi05:small: velocity error up a third, final-action cosine down).

The loop is `hotloop.nn.resumable.train_resumable`, shared with step distillation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.pi.sampling import PiObservation
from hotloop.models.pi0 import PiModel
from hotloop.nn.resumable import check_settings, train_resumable


@dataclass(frozen=True)
class DistillConfig:
    steps: int = 200
    batch: int = 8
    lr: float = 3e-4
    velocity_weight: float = 1.0
    action_weight: float = 1.0
    feature_weight: float = 0.1
    feature_layers: tuple[str, ...] = ("vision", "expert.last")  # "vision", "vlm.I", "expert.I|last"
    checkpoint_every: int = 50
    seed: int = 0

    def __post_init__(self) -> None:
        check_settings(self, "distillation")
        for name in self.feature_layers:
            if name != "vision" and not (
                name.split(".")[0] in ("vlm", "expert")
                and len(name.split(".")) == 2
                and (name.split(".")[1] == "last" or name.split(".")[1].lstrip("-").isdigit())
            ):
                raise ConfigError(f"feature layer {name!r}: use vision, vlm.I, expert.I or expert.last")


def _layer(model: PiModel, name: str) -> nn.Module:
    if name == "vision":
        return model.projector
    stack, index = name.split(".")
    layers = getattr(model, stack).layers
    i = len(layers) - 1 if index == "last" else int(index)
    if stack == "vlm" and i % len(layers) == len(layers) - 1:
        raise ConfigError(f"feature layer {name}: the VLM's last layer only yields K/V; pick an earlier one")
    return layers[i]  # type: ignore[no-any-return]


@contextmanager
def capture_features(model: PiModel, names: tuple[str, ...]) -> Iterator[dict[str, Tensor]]:
    """Outputs (hidden states) of the named layers during the forward passes inside the block."""
    store: dict[str, Tensor] = {}
    handles = []
    for name in names:

        def hook(_m: nn.Module, _a: Any, out: Any, name: str = name) -> None:
            store[name] = out[0] if isinstance(out, tuple) else out

        handles.append(_layer(model, name).register_forward_hook(hook))
    try:
        yield store
    finally:
        for h in handles:
            h.remove()


def feature_target(name: str, teacher: Tensor, student: Tensor) -> Tensor:
    """The teacher's features at layer `name` as the student's shape. After `vision-res` the student's
    vision tower yields a coarser square grid of image tokens (N, s*s, W) than the teacher's (N, g*g, W):
    each student token covers the region of a g/s x g/s block of teacher tokens, whose mean is its target
    (area pooling). The prefix-length features of a VLM layer have no such one-to-one region: refused."""
    if teacher.shape == student.shape:
        return teacher
    if name != "vision":
        raise ConfigError(
            f"feature layer {name}: the student's prefix is shorter than the teacher's (vision-res); "
            "distill its features at vision or expert layers"
        )
    n, t, w = teacher.shape
    g, s = math.isqrt(t), math.isqrt(student.shape[1])
    grid = teacher.reshape(n, g, g, w).permute(0, 3, 1, 2)
    return F.adaptive_avg_pool2d(grid, s).permute(0, 2, 3, 1).reshape(n, s * s, w)


def velocity(model: PiModel, obs: PiObservation, x_t: Tensor, t: Tensor) -> Tensor:
    cache = model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks)
    return model.denoise_step(cache, x_t, t, obs.state)


def teacher_actions(teacher: PiModel, obs: PiObservation, seed: int, num_steps: int | None = None) -> Tensor:
    """The teacher's chunks for every observation under a fixed noise (pseudo-labels without episodes)."""
    from hotloop.families.pi.sampling import make_noise, sample_actions

    noise = make_noise(teacher, obs.batch, torch.Generator().manual_seed(seed))
    return sample_actions(teacher, obs, noise=noise, num_steps=num_steps, validate=False)


def distill_loss(
    teacher: PiModel,
    student: PiModel,
    obs: PiObservation,
    actions: Tensor,
    noise: Tensor,
    time: Tensor,
    config: DistillConfig,
    toward_teacher: bool = False,
) -> tuple[Tensor, dict[str, float]]:
    t = time[:, None, None]
    x_t = t * noise + (1 - t) * actions
    with torch.no_grad(), capture_features(teacher, config.feature_layers) as f_teacher:
        v_teacher = velocity(teacher, obs, x_t, time)
    with capture_features(student, config.feature_layers) as f_student:
        v_student = velocity(student, obs, x_t, time)
    terms = {
        "velocity": F.mse_loss(v_student, v_teacher),
        "action": F.mse_loss(x_t - t * v_student, x_t - t * v_teacher if toward_teacher else actions),
        "features": sum(
            (
                F.mse_loss(f_student[n].float(), feature_target(n, f_teacher[n].float(), f_student[n]))
                for n in config.feature_layers
            ),
            torch.zeros(()),
        ),
    }
    loss = (
        config.velocity_weight * terms["velocity"]
        + config.action_weight * terms["action"]
        + config.feature_weight * terms["features"]
    )
    return loss, {k: float(v.detach()) for k, v in terms.items()}


Batch = tuple[PiObservation, Tensor, Tensor, Tensor]


def sample_batch(
    obs: PiObservation, actions: Tensor, batch: int, gen: torch.Generator
) -> tuple[PiObservation, Tensor, Tensor, Tensor]:
    from hotloop.families.pi.batching import select

    idx = torch.randperm(obs.batch, generator=gen)[: min(batch, obs.batch)].tolist()
    a = actions[idx].float()
    noise = torch.randn(a.shape, generator=gen)
    from hotloop.families.pi.sampling import sample_time

    return select(obs, idx), a, noise, sample_time(len(idx), gen)


def distill(
    teacher: PiModel,
    student: PiModel,
    obs: PiObservation,
    actions: Tensor | None,
    config: DistillConfig,
    checkpoint_dir: Path | None = None,
    on_step: Callable[[int, float], None] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Train `student` in place toward `teacher`; returns the loss before/after on a fixed held set."""
    if student.cfg.vlm.width != teacher.cfg.vlm.width or student.cfg.expert.width != teacher.cfg.expert.width:
        raise ConfigError("distillation needs the teacher's widths in the student (prune heads/neurons only)")
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    toward_teacher = actions is None
    targets = actions if actions is not None else teacher_actions(teacher, obs, config.seed)
    before = evaluate(teacher, student, obs, targets, config, toward_teacher)

    def loss_fn(gen: torch.Generator) -> Tensor:
        o, a, noise, time = sample_batch(obs, targets, config.batch, gen)
        return distill_loss(teacher, student, o, a, noise, time, config, toward_teacher)[0]

    state = train_resumable(student, loss_fn, config, checkpoint_dir, "distill", on_step, progress)
    after = evaluate(teacher, student, obs, targets, config, toward_teacher)
    return {
        "steps": state.step,
        "targets": "recorded actions" if actions is not None else "teacher actions",
        "loss_before": before,
        "loss_after": after,
        "config": asdict(config),
    }


@torch.no_grad()
def evaluate(
    teacher: PiModel,
    student: PiModel,
    obs: PiObservation,
    actions: Tensor,
    config: DistillConfig,
    toward_teacher: bool = False,
) -> dict[str, float]:
    """The distillation loss over the whole set under one fixed noise/time draw (comparable across runs)."""
    gen = torch.Generator().manual_seed(config.seed + 12345)
    noise = torch.randn(actions.shape, generator=gen)
    from hotloop.families.pi.sampling import sample_time

    time = sample_time(obs.batch, gen)
    was = student.training
    student.eval()
    loss, terms = distill_loss(teacher, student, obs, actions.float(), noise, time, config, toward_teacher)
    student.train(was)
    return {"total": float(loss), **terms}
