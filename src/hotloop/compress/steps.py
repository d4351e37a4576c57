"""Fewer denoising steps: what each step count costs in action error and closed-loop success, and a step
distillation that trains the expert to land in N_small Euler steps where the teacher needs 10.

The flow integrator accumulates error over its steps, so the step count is judged on the final chunk
under the same noise as the reference (cosine, per-dimension error normalised by the action spread,
smoothness), and, for targets with a task, by success through `hotloop eval`'s machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.compress.distill import DistillConfig, sample_batch, teacher_actions, train_resumable
from hotloop.errors import ConfigError
from hotloop.models.pi0 import PiModel
from hotloop.sampling import PiObservation

DEFAULT_LADDER = (10, 5, 3, 2, 1)


def check_steps(values: tuple[int, ...], flag: str = "--steps") -> tuple[int, ...]:
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise ConfigError(f"{flag} takes positive step counts, e.g. 10,5,3,2,1 (got {values!r})")
    return values


def smoothness(chunks: Tensor) -> float:
    """Mean |second difference| along the chunk (lower is smoother), in the model's normalised units."""
    if chunks.shape[1] < 3:
        return 0.0
    return float((chunks[:, 2:] - 2 * chunks[:, 1:-1] + chunks[:, :-2]).abs().mean())


def action_agreement(ref: Tensor, got: Tensor, action_dim: int) -> dict[str, float]:
    """Cosine of the flattened chunks (worst sample), max abs error and error / action spread."""
    r, g = ref[..., :action_dim].flatten(1).double(), got[..., :action_dim].flatten(1).double()
    cos = F.cosine_similarity(r, g, dim=1).min()
    spread = ref[..., :action_dim].reshape(-1, action_dim).std(0).clamp_min(1e-6)
    norm_err = ((ref[..., :action_dim] - got[..., :action_dim]).abs() / spread).amax()
    return {"cosine": float(cos), "max_abs": float((r - g).abs().max()), "max_norm_error": float(norm_err)}


@torch.no_grad()
def step_sweep(
    model: PiModel,
    obs: PiObservation,
    ladder: tuple[int, ...] = DEFAULT_LADDER,
    reference_steps: int = 10,
    action_dim: int | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Action error and smoothness of each step count against `reference_steps`, same noise throughout."""
    from hotloop.sampling import make_noise, sample_actions

    check_steps(ladder)
    dim = action_dim or model.cfg.max_action_dim
    noise = make_noise(model, obs.batch, torch.Generator().manual_seed(seed))
    ref = sample_actions(model, obs, noise=noise, num_steps=reference_steps)
    rows = []
    for n in ladder:
        got = (
            ref
            if n == reference_steps
            else sample_actions(model, obs, noise=noise, num_steps=n, validate=False)
        )
        rows.append({"steps": n, **action_agreement(ref, got, dim), "smoothness": smoothness(got[..., :dim])})
    return rows


def closed_loop_sweep(
    target: str,
    ladder: tuple[int, ...],
    episodes: int,
    task: str = "conveyor-pick",
    workers: int = 2,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Success at each step count through `hotloop eval`'s machinery (seeds 0..episodes-1 at every point)."""
    from hotloop.sim.eval_run import EvalRequest, run_eval

    check_steps(ladder)
    out = []
    for n in ladder:
        run = run_eval(
            EvalRequest(target=target, task=task, episodes=episodes, workers=workers, num_steps=n),
            progress=progress,
        )
        out.append(
            {
                "steps": n,
                "episodes": run["episodes"],
                "success_rate": run["success_rate"],
                "success_ci95": run["success_ci95"],
                "jerk": run.get("jerk"),
            }
        )
    return out


def integrate(model: PiModel, obs: PiObservation, noise: Tensor, num_steps: int) -> Tensor:
    """Euler integration from t = 1 to 0 with gradients (sample_actions is inference-only)."""
    cache = model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks)
    x = noise.float()
    for k in range(num_steps):
        t = torch.tensor(1.0 - k / num_steps, dtype=torch.float32)
        x = x + (-1.0 / num_steps) * model.denoise_step(cache, x, t, obs.state)
    return x


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
) -> dict[str, Any]:
    """Train `student` (in place) so that `small_steps` Euler steps reproduce the teacher's
    `teacher_steps`-step chunk from the same noise; the loss is the chunk MSE through the whole integral."""
    check_steps((small_steps, teacher_steps), "--recipe step-distill")
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)

    def targets(noise: Tensor, o: PiObservation) -> Tensor:
        from hotloop.sampling import sample_actions

        return sample_actions(teacher, o, noise=noise, num_steps=teacher_steps, validate=False)

    dummy = torch.zeros(obs.batch, teacher.cfg.chunk_size, teacher.cfg.max_action_dim)

    def loss_fn(gen: torch.Generator) -> Tensor:
        o, _, noise, _ = sample_batch(obs, dummy, config.batch, gen)
        return F.mse_loss(integrate(student, o, noise, small_steps), targets(noise, o))

    @torch.no_grad()
    def held_out() -> float:
        noise = torch.randn(dummy.shape, generator=torch.Generator().manual_seed(config.seed + 777))
        return float(F.mse_loss(integrate(student, obs, noise, small_steps), targets(noise, obs)))

    before = held_out()
    state = train_resumable(
        student, loss_fn, config, checkpoint_dir, f"step-distill:{small_steps}", on_step, progress
    )
    return {
        "small_steps": small_steps,
        "teacher_steps": teacher_steps,
        "steps": state.step,
        "chunk_mse_before": before,
        "chunk_mse_after": held_out(),
        "config": asdict(config),
    }


__all__ = ["closed_loop_sweep", "step_distill", "step_sweep", "teacher_actions"]
