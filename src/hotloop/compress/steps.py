"""Fewer denoising steps: what each step count costs in action error and closed-loop success, for any
family whose sampler has a step count (`Capabilities.step_reduction`). Training a model to land in fewer
steps is a family's own (pi: `hotloop.families.pi.compression.step_distill`).

The flow integrator accumulates error over its steps, so the step count is judged on the final chunk
under the same noise as the reference (cosine, per-dimension error normalised by the action spread,
smoothness), and, for targets with a task, by success through `hotloop eval`'s machinery.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.errors import ConfigError

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
    family: Any,
    model: Any,
    obs: Any,
    ladder: tuple[int, ...] = DEFAULT_LADDER,
    reference_steps: int = 10,
    action_dim: int | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Action error and smoothness of each step count against `reference_steps`, same noise throughout
    (`family`: the model's `PolicyFamily`)."""
    check_steps(ladder)
    if not family.capabilities.step_reduction:
        raise ConfigError(f"family {family.name} has no step count to reduce")
    cfg = family.config_of(model)
    shape = family.default_shape(cfg, family.batch_size(obs))
    noise = family.make_noise(cfg, shape, family.batch_size(obs), torch.Generator().manual_seed(seed))
    ref = family.sample_actions(model, obs, noise, reference_steps)
    dim = action_dim or ref.shape[-1]
    rows = []
    for n in ladder:
        got = ref if n == reference_steps else family.sample_actions(model, obs, noise, n)
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
    from hotloop.closedloop.eval_run import EvalRequest, run_eval

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


__all__ = ["action_agreement", "check_steps", "closed_loop_sweep", "smoothness", "step_sweep"]
