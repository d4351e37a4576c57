"""What step distillation of the flow families (pi0/pi0.5, SmolVLA) shares: the step counts it takes, the
flow times a student and its teacher both visit, the teacher frozen for it, the start noise, the loss, the
report, and the compression step the recipe calls (`FlowStepDistillSteps`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.errors import ConfigError


def check_step_distill(small_steps: int, teacher_steps: int) -> None:
    for value in (small_steps, teacher_steps):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"--recipe step-distill takes positive step counts, e.g. 10,5,3,2,1 (got {(small_steps, teacher_steps)!r})"
            )
    if small_steps >= teacher_steps:
        raise ConfigError(
            f"--recipe step-distill:{small_steps}: the student must take fewer steps than the teacher's "
            f"{teacher_steps}; use step-distill:N with 1 <= N < {teacher_steps}"
        )


def shared_times(small_steps: int, teacher_steps: int) -> list[tuple[int, int]]:
    """(student state index, teacher state index) pairs at the same flow time, final chunk last."""
    return [
        (k, k * teacher_steps // small_steps)
        for k in range(1, small_steps + 1)
        if k * teacher_steps % small_steps == 0
    ]


def matched_states(
    teacher: nn.Module, batch: int, small_steps: int, teacher_steps: int, intermediate_weight: float
) -> list[tuple[int, int, float]]:
    """Checks the step counts and the batch, freezes the teacher, and returns (student state, teacher
    state, weight) at the flow times both visit with a weight above 0; the final chunk has weight 1."""
    check_step_distill(small_steps, teacher_steps)
    if batch < 1:
        raise ConfigError("--recipe step-distill: no observations to distill on")
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    matched = [
        (k, j, 1.0 if k == small_steps else intermediate_weight)
        for k, j in shared_times(small_steps, teacher_steps)
    ]
    return [m for m in matched if m[2] > 0]


def start_noise(mode: str, shape: tuple[int, int]) -> Callable[[int, torch.Generator | None], Tensor]:
    """The start x at t = 1 of `n` chunks of `shape`: N(0, 1) drawn from the generator, or zeros for the
    `noise` mode "zero" (policies that always sample from x = 0)."""

    def start(n: int, gen: torch.Generator | None) -> Tensor:
        if mode == "zero":
            return torch.zeros(n, *shape)
        return torch.randn((n, *shape), generator=gen)

    return start


def matched_loss(
    got: list[Tensor], target: list[Tensor], matched: list[tuple[int, int, float]], first_action_weight: float
) -> Tensor:
    """The student's states `got` against the teacher's `target`: the weighted MSE at the `matched_states`,
    plus `first_action_weight` on the final chunk's first action, over the sum of the weights."""
    total = sum((w * F.mse_loss(got[k], target[j]) for k, j, w in matched), torch.zeros(()))
    total = total + first_action_weight * F.mse_loss(got[-1][:, 0], target[-1][:, 0])
    return total / (sum(w for _, _, w in matched) + first_action_weight)


def step_distill_report(
    small_steps: int,
    teacher_steps: int,
    steps_done: int,
    observations: int,
    options: Any,
    matched: list[tuple[int, int, float]],
    mse: tuple[float, float],
    config: Any,
) -> dict[str, Any]:
    """The details a step distillation reports; `mse`: the fixed set's final-chunk MSE before and after."""
    return {
        "small_steps": small_steps,
        "teacher_steps": teacher_steps,
        "steps": steps_done,
        "observations": observations,
        "options": asdict(options),
        "matched_times": [1.0 - k / small_steps for k, _, _ in matched],
        "chunk_mse_before": mse[0],
        "chunk_mse_after": mse[1],
        "config": asdict(config),
    }


def optimiser_config(config_type: Callable[..., Any], settings: dict[str, Any]) -> Any:
    """The recipe's distillation settings (steps, batch, lr, seed) as a family's optimiser config."""
    return config_type(
        steps=settings["steps"], batch=settings["batch"], lr=settings["lr"], seed=settings["seed"]
    )


@dataclass(frozen=True)
class StepDistillJob:
    """One `step-distill:N` step as the recipe hands it to a family (`compression().step_distill`):
    `student` (trained in place) learns to land in `small_steps` where `teacher` lands in `teacher_steps`,
    from `obs`. `settings`: the recipe's optimiser settings (steps, batch, lr, seed); `options`: the
    family's `StepDistillOptions` as keywords; `work`: the resumable checkpoints' folder."""

    teacher: nn.Module
    student: nn.Module
    obs: Any
    small_steps: int
    teacher_steps: int
    settings: dict[str, Any]
    options: dict[str, Any]
    work: Path | None = None
    progress: bool = False


class FlowStepDistillSteps:
    """`step-distill:N` as a flow family's compression steps (pi, SmolVLA): the check is the shared one, and
    the recipe's settings and options reach the family's trainer alike; a family states only that trainer
    (`step_distiller`)."""

    def step_distiller(self) -> tuple[Callable[..., dict[str, Any]], Callable[..., Any], Callable[..., Any]]:
        """(the family's `step_distill`, its optimiser config class, its `StepDistillOptions`)."""
        raise NotImplementedError

    def check_step_distill(self, small_steps: int, teacher_steps: int) -> None:
        check_step_distill(small_steps, teacher_steps)

    def step_distill(self, job: StepDistillJob) -> dict[str, Any]:
        train, config_type, options_type = self.step_distiller()
        config = optimiser_config(config_type, job.settings)
        return train(
            job.teacher, job.student, job.obs, job.small_steps, config, job.teacher_steps, job.work,
            progress=job.progress, options=options_type(**job.options),
        )  # fmt: skip


__all__ = [
    "FlowStepDistillSteps",
    "StepDistillJob",
    "check_step_distill",
    "matched_loss",
    "matched_states",
    "optimiser_config",
    "shared_times",
    "start_noise",
    "step_distill_report",
]
