"""Fewer denoising steps: what each step count costs in action error and closed-loop success, and a step
distillation that trains the expert to land in N_small Euler steps where the teacher needs 10.

The flow integrator accumulates error over its steps, so the step count is judged on the final chunk
under the same noise as the reference (cosine, per-dimension error normalised by the action spread,
smoothness), and, for targets with a task, by success through `hotloop eval`'s machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.compress.distill import DistillConfig, teacher_actions, train_resumable
from hotloop.errors import ConfigError
from hotloop.models.pi0 import PiModel
from hotloop.families.pi.sampling import PiObservation

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
    from hotloop.families.pi.sampling import make_noise, sample_actions

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


def shared_times(small_steps: int, teacher_steps: int) -> list[tuple[int, int]]:
    """(student state index, teacher state index) pairs at the same flow time, final chunk last."""
    return [
        (k, k * teacher_steps // small_steps)
        for k in range(1, small_steps + 1)
        if k * teacher_steps % small_steps == 0
    ]


def check_step_distill(small_steps: int, teacher_steps: int) -> None:
    check_steps((small_steps, teacher_steps), "--recipe step-distill")
    if small_steps >= teacher_steps:
        raise ConfigError(
            f"--recipe step-distill:{small_steps}: the student must take fewer steps than the teacher's "
            f"{teacher_steps}; use step-distill:N with 1 <= N < {teacher_steps}"
        )


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
    check_step_distill(small_steps, teacher_steps)
    if obs.batch < 1:
        raise ConfigError("--recipe step-distill: no observations to distill on")
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    # (student state, teacher state, weight) at the flow times both visit; the final chunk has weight 1
    matched = [
        (k, j, 1.0 if k == small_steps else opts.intermediate_weight)
        for k, j in shared_times(small_steps, teacher_steps)
    ]
    matched = [m for m in matched if m[2] > 0]
    shape = (teacher.cfg.chunk_size, teacher.cfg.max_action_dim)
    frozen_prefix = opts.train == "expert"
    params = expert_parameters(student) if frozen_prefix else None

    @torch.no_grad()
    def teacher_states(o: PiObservation, noise: Tensor) -> list[Tensor]:
        return integrate(teacher, o, noise, teacher_steps)

    @torch.no_grad()
    def frozen_cache(o: PiObservation) -> Any:
        return student.prefix(student.vision(o.images), o.image_masks, o.lang_tokens, o.lang_masks)

    def start(n: int, gen: torch.Generator | None) -> Tensor:
        if opts.noise == "zero":
            return torch.zeros(n, *shape)
        return torch.randn((n, *shape), generator=gen)

    # From x = 0 the teacher's states are a function of the observation alone: compute them once.
    fixed: list[Tensor] | None = None
    if opts.noise == "zero":
        from hotloop.compress.adapters import select

        parts = [teacher_states(select(obs, list(range(i, min(i + 64, obs.batch)))), start(min(64, obs.batch - i), None))
                 for i in range(0, obs.batch, 64)]  # fmt: skip
        fixed = [torch.cat([p[j] for p in parts]) for j in range(teacher_steps + 1)]

    def loss_on(o: PiObservation, idx: list[int] | None, noise: Tensor) -> Tensor:
        target = teacher_states(o, noise) if fixed is None else [s[idx] for s in fixed]
        cache = frozen_cache(o) if frozen_prefix else None
        got = integrate(student, o, noise, small_steps, cache)
        total = sum((w * F.mse_loss(got[k], target[j]) for k, j, w in matched), torch.zeros(()))
        total = total + opts.first_action_weight * F.mse_loss(got[-1][:, 0], target[-1][:, 0])
        return total / (sum(w for _, _, w in matched) + opts.first_action_weight)

    def loss_fn(gen: torch.Generator) -> Tensor:
        from hotloop.compress.adapters import select

        idx = torch.randperm(obs.batch, generator=gen)[: min(config.batch, obs.batch)].tolist()
        return loss_on(select(obs, idx), idx, start(len(idx), gen))

    @torch.no_grad()
    def fixed_set_mse() -> float:
        """Final-chunk MSE on the first (up to) 64 training observations under one fixed start, so the
        figures before and after training compare (a fit figure, not a held-out one)."""
        from hotloop.compress.adapters import select

        idx = list(range(min(64, obs.batch)))
        noise = start(len(idx), torch.Generator().manual_seed(config.seed + 777))
        o = select(obs, idx)
        target = teacher_states(o, noise)[-1] if fixed is None else fixed[-1][idx]
        return float(F.mse_loss(integrate(student, o, noise, small_steps)[-1], target))

    before = fixed_set_mse()
    kind = f"step-distill:{small_steps}:{opts.noise}:{opts.train}:{opts.intermediate_weight}:{opts.first_action_weight}"
    state = train_resumable(student, loss_fn, config, checkpoint_dir, kind, on_step, progress, params)
    return {
        "small_steps": small_steps,
        "teacher_steps": teacher_steps,
        "steps": state.step,
        "observations": int(obs.batch),
        "options": asdict(opts),
        "matched_times": [1.0 - k / small_steps for k, _, _ in matched],
        "chunk_mse_before": before,
        "chunk_mse_after": fixed_set_mse(),
        "config": asdict(config),
    }


__all__ = ["StepDistillOptions", "closed_loop_sweep", "step_distill", "step_sweep", "teacher_actions"]
