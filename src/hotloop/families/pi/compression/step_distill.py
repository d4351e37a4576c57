"""Step distillation: train pi's action expert so that N_small Euler steps land where the teacher's
reference steps do (`hotloop compress ... --recipe step-distill:N`; docs/step-distillation.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families.flow_distill import (
    check_step_distill,
    matched_loss,
    matched_states,
    shared_times,
    start_noise,
    step_distill_report,
)
from hotloop.families.pi.compression.distill import DistillConfig, teacher_actions
from hotloop.families.pi.sampling import PiObservation
from hotloop.models.pi0 import PiModel
from hotloop.nn.resumable import train_resumable


def integrate(
    model: PiModel, obs: PiObservation, noise: Tensor, num_steps: int, cache: Any = None
) -> list[Tensor]:
    """Euler integration from t = 1 to 0 with gradients (sample_actions is inference-only); returns every
    state x_0 (the noise) .. x_N (the chunk). `cache`: a prefix cache computed already (a frozen prefix)."""
    if cache is None:
        cache = model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks)
    states = [noise.float()]
    for k in range(num_steps):
        t = torch.tensor(1.0 + k * (-1.0 / num_steps), dtype=torch.float32)
        states.append(states[-1] + (-1.0 / num_steps) * model.denoise_step(cache, states[-1], t, obs.state))
    return states


NOISE_MODES = ("random", "zero")
TRAIN_PARTS = ("expert", "all")


@dataclass(frozen=True)
class StepDistillOptions:
    """How the student is taught (the optimiser settings are the shared `DistillConfig`).

    noise: "random" draws N(0, 1) start noise per batch; "zero" starts every chunk at x = 0, for
      policies that sample from x = 0 (`demo:conveyor`'s zero_noise): those only ever integrate from
      there, and a student taught on random draws spends itself on starts it will never see.
    train: "expert" trains what runs in the denoising loop (expert stack, action and time projections)
      and keeps vision + VLM frozen, so the prefix cache stays the teacher's; "all" trains everything.
    intermediate_weight: weight of matching the teacher's states at the flow times both integrators
      visit (10 teacher steps, 2 student steps: t = 0.5); the final chunk has weight 1.
    first_action_weight: extra weight on the chunk's first action, the only one a sync loop executes
      before it replans: a few percent of shrinkage there slows the whole episode down.
    """

    noise: str = "random"
    train: str = "expert"
    intermediate_weight: float = 0.0
    first_action_weight: float = 0.0

    def __post_init__(self) -> None:
        if self.noise not in NOISE_MODES:
            raise ConfigError(
                f"step distillation noise must be one of {', '.join(NOISE_MODES)} (got {self.noise!r})"
            )
        if self.train not in TRAIN_PARTS:
            raise ConfigError(
                f"step distillation trains one of {', '.join(TRAIN_PARTS)} (got {self.train!r})"
            )
        for name in ("intermediate_weight", "first_action_weight"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name.replace('_', ' ')} must be >= 0 (got {getattr(self, name)})")


PREFIX_MODULES = ("vision_tower", "projector", "embed_tokens", "vlm")


def expert_parameters(model: PiModel) -> list[torch.nn.Parameter]:
    """The parameters the denoising loop uses: everything outside vision and the VLM prefix."""
    return [p for n, p in model.named_parameters() if n.split(".")[0] not in PREFIX_MODULES]


def step_distill(
    teacher: PiModel,
    student: PiModel,
    obs: PiObservation,
    small_steps: int,
    config: DistillConfig,
    teacher_steps: int = 10,
    checkpoint_dir: Path | None = None,
    on_step: Callable[[int, float], None] | None = None,
    progress: bool = False,
    options: StepDistillOptions | None = None,
) -> dict[str, Any]:
    """Train `student` (in place) so that `small_steps` Euler steps reproduce the teacher's
    `teacher_steps`-step chunk from the same start; the loss is the chunk MSE through the whole integral,
    plus (optionally) the MSE to the teacher's states at the times both integrators share."""
    opts = options or StepDistillOptions()
    matched = matched_states(teacher, obs.batch, small_steps, teacher_steps, opts.intermediate_weight)
    shape = (teacher.cfg.chunk_size, teacher.cfg.max_action_dim)
    frozen_prefix = opts.train == "expert"
    params = expert_parameters(student) if frozen_prefix else None

    @torch.no_grad()
    def teacher_states(o: PiObservation, noise: Tensor) -> list[Tensor]:
        return integrate(teacher, o, noise, teacher_steps)

    @torch.no_grad()
    def frozen_cache(o: PiObservation) -> Any:
        return student.prefix(student.vision(o.images), o.image_masks, o.lang_tokens, o.lang_masks)

    start = start_noise(opts.noise, shape)

    # From x = 0 the teacher's states are a function of the observation alone: compute them once.
    fixed: list[Tensor] | None = None
    if opts.noise == "zero":
        from hotloop.families.pi.batching import select

        parts = [teacher_states(select(obs, list(range(i, min(i + 64, obs.batch)))), start(min(64, obs.batch - i), None))
                 for i in range(0, obs.batch, 64)]  # fmt: skip
        fixed = [torch.cat([p[j] for p in parts]) for j in range(teacher_steps + 1)]

    def loss_on(o: PiObservation, idx: list[int] | None, noise: Tensor) -> Tensor:
        target = teacher_states(o, noise) if fixed is None else [s[idx] for s in fixed]
        cache = frozen_cache(o) if frozen_prefix else None
        got = integrate(student, o, noise, small_steps, cache)
        return matched_loss(got, target, matched, opts.first_action_weight)

    def loss_fn(gen: torch.Generator) -> Tensor:
        from hotloop.families.pi.batching import select

        idx = torch.randperm(obs.batch, generator=gen)[: min(config.batch, obs.batch)].tolist()
        return loss_on(select(obs, idx), idx, start(len(idx), gen))

    @torch.no_grad()
    def fixed_set_mse() -> float:
        """Final-chunk MSE on the first (up to) 64 training observations under one fixed start, so the
        figures before and after training compare (a fit figure, not a held-out one)."""
        from hotloop.families.pi.batching import select

        idx = list(range(min(64, obs.batch)))
        noise = start(len(idx), torch.Generator().manual_seed(config.seed + 777))
        o = select(obs, idx)
        target = teacher_states(o, noise)[-1] if fixed is None else fixed[-1][idx]
        return float(F.mse_loss(integrate(student, o, noise, small_steps)[-1], target))

    before = fixed_set_mse()
    kind = f"step-distill:{small_steps}:{opts.noise}:{opts.train}:{opts.intermediate_weight}:{opts.first_action_weight}"
    state = train_resumable(student, loss_fn, config, checkpoint_dir, kind, on_step, progress, params)
    mse = (before, fixed_set_mse())
    return step_distill_report(
        small_steps, teacher_steps, state.step, int(obs.batch), opts, matched, mse, config
    )


__all__ = ["StepDistillOptions", "check_step_distill", "shared_times", "step_distill", "teacher_actions"]
