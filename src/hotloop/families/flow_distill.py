"""What step distillation of the flow families (pi0/pi0.5, SmolVLA) shares: the step counts it takes, the
flow times a student and its teacher both visit, and the teacher frozen for it."""

from __future__ import annotations

from torch import nn

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


__all__ = ["check_step_distill", "matched_states", "shared_times"]
