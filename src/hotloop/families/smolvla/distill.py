"""SmolVLA's `distill` recipe step: the vision tower and connector of a `vision-res` student retrained
toward the full-resolution teacher, everything that reads their tokens (VLM, state token, action expert)
kept frozen, so the student changes only where `vision-res` changed it.

The student sees each observation at its own resolution (`fit_images` resizes the teacher's), the teacher
at the checkpoint's. Their token counts differ, so nothing inside the prefix can be compared position by
position; what both produce is the action expert's velocity. Loss per batch, at the same noise and flow
time for both (pi's distillation toward the teacher, `hotloop.families.pi.compression.distill`):

    velocity MSE   |v_student(x_t, t) - v_teacher(x_t, t)|^2
    action         |(x_t - t v_student) - (x_t - t v_teacher)|^2   (the one-step estimates of the chunk)

x_t = t noise + (1 - t) a, a the teacher's own chunk (its config's steps) for the observation (or, with
`--distill-target data`, the recorded chunk), t ~ LeRobot's Beta(1.5, 1) schedule. The loop is
`hotloop.nn.resumable.train_resumable`, shared with every other fine-tune (resumable after an interrupt).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.families.smolvla.observation import SmolVLAObservation, select
from hotloop.models.smolvla import SmolVLAModel, euler

TRAINED = ("vlm_with_expert.vlm.model.vision_model.", "vlm_with_expert.vlm.model.connector.")


def vision_parameters(model: SmolVLAModel) -> list[nn.Parameter]:
    return [p for n, p in model.named_parameters() if n.startswith(TRAINED)]


def _cache(model: SmolVLAModel, obs: SmolVLAObservation) -> tuple[Tensor, Tensor, Tensor]:
    return model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks, obs.state)


def _sample_time(batch: int, gen: torch.Generator) -> Tensor:
    """LeRobot's flow times: Beta(1.5, 1) * 0.999 + 0.001, by inversion so that `gen` draws them."""
    return torch.rand(batch, generator=gen).pow(1.0 / 1.5) * 0.999 + 0.001


@torch.no_grad()
def teacher_chunks(teacher: SmolVLAModel, obs: SmolVLAObservation, seed: int, batch: int = 32) -> Tensor:
    """The teacher's own chunks (its config's steps) under a fixed noise: what x_t is built from."""
    cfg = teacher.cfg
    gen = torch.Generator().manual_seed(seed)
    out = []
    for start in range(0, obs.batch, batch):
        o = select(obs, list(range(start, min(start + batch, obs.batch))))
        noise = torch.randn(o.batch, cfg.chunk_size, cfg.max_action_dim, generator=gen)
        out.append(euler(teacher, *_cache(teacher, o), noise, cfg.num_steps))
    return torch.cat(out)


def loss_terms(
    teacher: SmolVLAModel,
    student: SmolVLAModel,
    obs: SmolVLAObservation,
    chunks: Tensor,
    noise: Tensor,
    time: Tensor,
) -> dict[str, Tensor]:
    t = time[:, None, None]
    x_t = t * noise + (1 - t) * chunks
    with torch.no_grad():
        k, v, pad = _cache(teacher, obs)
        v_teacher = teacher.denoise_step(k, v, pad, x_t, time)
    k, v, pad = _cache(student, obs)
    v_student = student.denoise_step(k, v, pad, x_t, time)
    return {
        "velocity": F.mse_loss(v_student, v_teacher),
        "action": F.mse_loss(x_t - t * v_student, x_t - t * v_teacher),
    }


def distill_vision(
    teacher: SmolVLAModel,
    student: SmolVLAModel,
    obs: SmolVLAObservation,
    actions: Tensor | None,
    config: Any,
    checkpoint_dir: Path | None = None,
    on_step: Callable[[int, float], None] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Train `student`'s vision tower and connector in place toward `teacher` (`config`: steps, batch, lr,
    seed, checkpoint_every); the loss before and after on a fixed draw over the first 64 observations."""
    from hotloop.nn.resumable import train_resumable

    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    cfg = teacher.cfg
    if actions is None:
        chunks = teacher_chunks(teacher, obs, config.seed)
    else:  # recorded chunks, padded to the model's action slots
        chunks = F.pad(actions.float(), (0, cfg.max_action_dim - actions.shape[-1]))

    def batch_loss(o: SmolVLAObservation, a: Tensor, gen: torch.Generator) -> Tensor:
        noise = torch.randn(a.shape, generator=gen)
        terms = loss_terms(teacher, student, o, a, noise, _sample_time(o.batch, gen))
        return terms["velocity"] + terms["action"]

    def loss_fn(gen: torch.Generator) -> Tensor:
        idx = torch.randperm(obs.batch, generator=gen)[: min(config.batch, obs.batch)].tolist()
        return batch_loss(select(obs, idx), chunks[idx], gen)

    @torch.no_grad()
    def held() -> float:
        idx = list(range(min(64, obs.batch)))
        return float(
            batch_loss(select(obs, idx), chunks[idx], torch.Generator().manual_seed(config.seed + 777))
        )

    before = held()
    kind = f"smolvla-vision-distill:{'data' if actions is not None else 'teacher'}"
    state = train_resumable(
        student, loss_fn, config, checkpoint_dir, kind, on_step, progress, vision_parameters(student)
    )
    return {
        "trained": "vision tower + connector",
        "targets": "recorded actions" if actions is not None else "teacher actions",
        "steps": state.step,
        "observations": int(obs.batch),
        "loss_before": before,
        "loss_after": held(),
        "config": asdict(config),
    }


__all__ = ["distill_vision", "loss_terms", "teacher_chunks", "vision_parameters"]
