"""`ddim:N,onestep[:K]` on a Diffusion Policy: a 1- or 2-step DDIM student of the policy's own N-step
DDIM sampler.

The student is the same U-Net with the checkpoint's scheduler switched to DDIM in K steps (what
`ddim:K` would sample, and what a LeRobot user gets from "noise_scheduler_type": "DDIM",
"num_inference_steps": K), trained so that its K deterministic steps from a start noise x_T land where
the teacher's N DDIM steps land from the same x_T. This is knowledge distillation of a deterministic
sampler (Luhman & Luhman 2021, arXiv:2101.02388), the teacher-ODE distillation that consistency
distillation builds on (Song et al. 2023, arXiv:2303.01469): a K-step plan evaluates the U-Net at K fixed
timesteps only, so the consistency condition along the whole trajectory reduces to its endpoints at
those timesteps. The observation encoder stays the teacher's; only the U-Net trains. As for the flow
families' student (`hotloop.compress.onestep`), the teacher's samples are computed once before training,
and the policy's own training loss on the recorded chunks of --data (epsilon regression at uniform
timesteps) is mixed in as an anchor.

The sampler must be deterministic: DDPM draws fresh noise at every step, so a DDPM policy is refused
before any work (`ddim:N,onestep:K` distils its DDIM N-step sampler instead).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.errors import ConfigError

if TYPE_CHECKING:
    from hotloop.compress.onestep import OnestepJob


def check_onestep(student_steps: int, teacher_steps: int, earlier: tuple[str, ...], model: Any) -> None:
    """K in 1..2 below the teacher's steps, and a deterministic (DDIM) sampler to learn from."""
    from hotloop.compress.onestep import MAX_STUDENT_STEPS

    label = "onestep" if student_steps == 1 else f"onestep:{student_steps}"
    if not 1 <= student_steps <= MAX_STUDENT_STEPS:
        raise ConfigError(f"--recipe {label}: the student takes 1 or 2 steps (onestep or onestep:2)")
    ddim = "ddim" in earlier or (model is not None and model.cfg.noise_scheduler_type == "DDIM")
    if not ddim:
        raise ConfigError(
            f"--recipe {label}: this Diffusion Policy samples with DDPM, which adds fresh noise at every step, "
            f"so there is no one trajectory to learn; put its DDIM sampler first, e.g. --recipe ddim:10,{label}"
        )
    if student_steps >= teacher_steps:
        raise ConfigError(
            f"--recipe {label}: the student must take fewer steps than the {teacher_steps} it learns from"
        )
    if model is not None:
        ddim = dataclasses.replace(model.cfg, noise_scheduler_type="DDIM", num_inference_steps=student_steps)
        first = int(ddim.make_scheduler().step_table(student_steps)["timestep"][0])
        if first == 0:
            # LeRobot's DDIM spaces its steps from t = 0 up (`leading`): one step is the U-Net at t = 0 alone,
            # where x_0 = x_t - sqrt(1 - alpha_bar_0) eps barely moves its start (0/200 on demo:conveyor-diffusion)
            raise ConfigError(
                f"--recipe {label}: DDIM in {student_steps} step evaluates the U-Net at t = 0 only, where it cannot "
                "move its start to an action; use onestep:2"
            )


def _rows(obs: Any, index: slice) -> Any:
    from hotloop.families.diffusion.engines import DiffusionObservation

    pick = lambda x: None if x is None else x[index]  # noqa: E731
    return DiffusionObservation(obs.state[index], pick(obs.images), pick(obs.env_state))


def _encode(model: Any, obs: Any) -> Tensor:
    return model.encode(obs.images, obs.state, obs.env_state)  # type: ignore[no-any-return]


def train_diffusion_onestep(job: OnestepJob) -> dict[str, Any]:
    """Train `job.student` (a DiffusionModel sampling DDIM in `student_steps`) in place toward `job.teacher`'s
    DDIM `teacher_steps`; `job.config`: `hotloop.compress.onestep.OnestepConfig`. Resumable from `job.work`."""
    from hotloop.compress.onestep import StageSettings, cosine_lr
    from hotloop.models.diffusion import TableSampler
    from hotloop.nn.resumable import train_resumable

    teacher, student, obs, calib, config = job.teacher, job.student, job.obs, job.calib, job.config
    student_steps, teacher_steps = job.student_steps, job.teacher_steps
    t_model: Any = teacher
    s_model: Any = student
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    n = int(obs.state.shape[0])
    if n < 1:
        raise ConfigError("--recipe onestep: no observations to distill on")
    cfg = t_model.cfg
    shape = (cfg.horizon, cfg.action_dim)
    teacher_sampler = TableSampler(t_model, cfg.make_scheduler(), teacher_steps)
    student_sampler = TableSampler(s_model, s_model.cfg.make_scheduler(), student_steps)
    import time

    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(config.seed + 4242)
    # `zero-noise` before onestep: the plan starts at x_T = 0, so there is one trajectory per observation
    from_zero = config.noise == "zero"
    draws = 1 if from_zero else config.noise_draws
    with torch.no_grad():
        cond = torch.cat([_encode(t_model, _rows(obs, slice(i, i + 64))) for i in range(0, n, 64)])
        rows = torch.arange(n).repeat(draws)
        starts = torch.randn((len(rows), *shape), generator=gen)
        if from_zero:
            starts.zero_()
        targets = torch.cat(
            [teacher_sampler(cond[rows[i : i + 256]], starts[i : i + 256]) for i in range(0, len(rows), 256)]
        )
    anchored = calib is not None and config.anchor_weight > 0
    if anchored:
        with torch.no_grad():
            anchor_cond = _encode(t_model, calib.obs)
        anchor_actions = calib.actions[..., : cfg.action_dim].float()
        alphas = cfg.make_scheduler().alphas_cumprod

    # The same first observations from start noise the student never trains on: a student that learnt its
    # training draws and not the teacher's map fits those and misses these (each episode draws its own).
    # From x_T = 0 there is no other start to try.
    held = rows[: min(64, len(rows))]
    held_starts = torch.randn(
        (len(held), *shape), generator=torch.Generator().manual_seed(config.seed + 4343)
    )
    with torch.no_grad():
        held_targets = None if from_zero else teacher_sampler(cond[held], held_starts)

    @torch.no_grad()
    def fit(fresh: bool = False) -> float | None:
        if fresh:
            if held_targets is None:
                return None
            return float(F.mse_loss(student_sampler(cond[held], held_starts), held_targets))
        idx = list(range(min(64, len(rows))))
        return float(F.mse_loss(student_sampler(cond[rows[idx]], starts[idx]), targets[idx]))

    def loss_fn(g: torch.Generator) -> Tensor:
        idx = torch.randperm(len(rows), generator=g)[: min(config.batch, len(rows))]
        loss = F.mse_loss(student_sampler(cond[rows[idx]], starts[idx]), targets[idx])
        if anchored:
            j = torch.randperm(len(anchor_actions), generator=g)[: min(config.batch, len(anchor_actions))]
            a = anchor_actions[j]
            eps = torch.randn(a.shape, generator=g)
            t = torch.randint(0, cfg.num_train_timesteps, (len(j),), generator=g)
            abar = alphas[t][:, None, None]
            pred = s_model.unet(abar**0.5 * a + (1 - abar) ** 0.5 * eps, t, anchor_cond[j])
            loss = loss + config.anchor_weight * F.mse_loss(
                pred, eps if cfg.prediction_type == "epsilon" else a
            )
        return loss

    before, before_fresh = fit(), fit(fresh=True)
    t_targets = time.perf_counter() - t0
    t0 = time.perf_counter()
    params = list(s_model.unet.parameters())
    stage = StageSettings(config.steps, config.lr, config.seed, config.checkpoint_every)
    kind = f"diffusion-onestep:{student_steps}:{teacher_steps}:{asdict(config)}"
    # the flow students' schedule (one cosine to a tenth): a constant rate left the last weights noisy, and
    # the closed loop of a 2-step student moved by tens of points from one run to the next
    state = train_resumable(
        student, loss_fn, stage, job.work, kind, None, job.progress, params, cosine_lr(config.steps)
    )
    return {
        "method": "DDIM sampler distillation (Luhman & Luhman 2021, arXiv:2101.02388)",
        "student_steps": student_steps,
        "teacher_steps": teacher_steps,
        "scheduler": "DDIM",
        "start": "x_T = 0 (zero-noise)" if from_zero else f"x_T ~ N(0, 1), {draws} draws an observation",
        "optimizer_steps": state.step,
        "lr_schedule": "cosine to 0.1",
        "loss_first": state.losses[0] if state.losses else None,
        "loss_last": float(sum(state.losses[-10:]) / max(1, len(state.losses[-10:]))),
        "trajectories": len(rows),
        "observations": n,
        "anchor": None if not anchored else {"weight": config.anchor_weight, "frames": len(anchor_actions)},
        "chunk_mse_before": before,
        "chunk_mse_after": fit(),
        "chunk_mse_fresh_noise_before": before_fresh,
        "chunk_mse_fresh_noise_after": fit(fresh=True),
        "seconds": {"teacher_samples": round(t_targets, 2), "training": round(time.perf_counter() - t0, 2)},
        "config": asdict(config),
    }


__all__ = ["check_onestep", "train_diffusion_onestep"]
