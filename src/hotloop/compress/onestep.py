"""`onestep[:K]`: a one- or two-step student of a flow-matching policy, taught by the policy itself.

    hotloop compress demo:conveyor --data DIR --recipe onestep,quantize,compile -o ART

The method is SnapFlow's self-distillation (Luan et al. 2026, "SnapFlow: One-Step Action
Generation for Flow-Matching VLAs via Progressive Self-Distillation", arXiv:2604.05656), fitted to a plan
that runs a fixed number of steps:

- Self-distillation: the student starts as the policy's own weights and learns from the policy's own
  trajectories; no other model is involved. Only the denoising side trains (action expert, action and
  time projections); vision and the VLM stay the teacher's, so the prefix cache is unchanged.
- Shortcut (consistency) targets: a student step of size h = 1/K from grid time t must land where the
  teacher's own Euler integration lands at t - h (its N reference steps over that interval), i.e. its
  velocity must be the shortcut velocity (x_t - x_{t-h}) / h of the teacher's trajectory (shortcut models,
  Frans et al. 2024, arXiv:2410.12557). The loss is taken at every student grid time, the student
  integrating from its own states (so a second step learns to correct the first).
- Progressive (off by default: `progressive`): the step count falls in stages (for N = 10 and K = 1: 5,
  then 2, then 1 step), each stage starting from the previous one, every stage's targets on the teacher's
  trajectory; the last stage gets `final_fraction` of the training. Measured on demo:conveyor at the same
  400 steps it lost 33 points of closed-loop success against training the K-step student directly
  (59/100 against 92/100, docs/onestep.md): the earlier stages take training from the one that ships.
- On the student's own states (optional, `rounds` > 1; the recipe's flow demo targets): the last stage is
  cut into rounds, and after each the student drives the task for a few episodes; the observations it
  meets there are labelled with the teacher's trajectories and join the training set (DAgger, Ross et al.
  2011, arXiv:1011.0686). A student taught only on the teacher's states drifts on its own, where the
  teacher never went; closed-loop success follows those drifts (docs/step-distillation.md). The recipe
  plays the rounds under the executions the student is judged at, in turn (`--onestep-rounds-under`):
  async at 200 ms meets other states than sync at 0 ms (stale chunks executed open loop), and a student
  that met only one of them lost points at the other.
- Flow anchor: SnapFlow mixes plain flow-matching samples on the recorded data into every batch so the
  network keeps its velocity field (also the Flow-Anchored Consistency Model's lesson, Peng et al. 2025,
  arXiv:2507.03738): x_t = t eps + (1 - t) a for a recorded chunk a of `--data`, target eps - a, weight
  `anchor_weight`.

Two things are left out, on purpose. SnapFlow adds a zero-initialised target-time embedding so that one
network serves both the local velocity and the one-step jump; a K-step plan only ever evaluates K fixed
grid times, so that embedding would be a constant per plan (foldable into the time projection's bias) and
the student needs no new input: its artifacts load and export like any other plan of the family. And
SnapFlow computes its two-step targets from the network's current velocity; here they come from the
frozen starting model's N-step trajectory, computed once before training, with the prefix cache of every
observation (vision and VLM are frozen, so it is the student's too): a step costs only the student's K
denoising steps, no teacher pass and no prefix, which keeps it within the time of `distill` on the same
target. The learning rate decays along one cosine over all rounds.

The family supplies the model calls (`FlowStudent`); this module holds the method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.errors import ConfigError

MAX_STUDENT_STEPS = 2  # `onestep` is 1 network evaluation, `onestep:2` two
NOISE_MODES = ("random", "zero")


def check_onestep(student_steps: int, teacher_steps: int, label: str = "onestep") -> None:
    """K in 1..2, fewer than the teacher's steps, and dividing them (the grid times are the teacher's)."""
    if (
        isinstance(student_steps, bool)
        or not isinstance(student_steps, int)
        or not (1 <= student_steps <= MAX_STUDENT_STEPS)
    ):
        raise ConfigError(
            f"--recipe {label}: the student takes 1 or 2 steps (onestep or onestep:2), got {student_steps!r}"
        )
    if student_steps >= teacher_steps:
        raise ConfigError(
            f"--recipe {label}: the student must take fewer steps than the {teacher_steps} it learns from"
        )
    if teacher_steps % student_steps:
        raise ConfigError(
            f"--recipe {label}: {student_steps} steps do not divide the teacher's {teacher_steps}, so the "
            "student's grid times are not on the teacher's trajectory; use onestep (1 step)"
        )


def stage_schedule(student_steps: int, teacher_steps: int, progressive: bool = True) -> tuple[int, ...]:
    """The step counts the student is trained at, in order: every divisor of the teacher's count between
    K and the teacher's (exclusive), largest first, then K (10 -> K=1: 5, 2, 1; K=2: 5, 2)."""
    if not progressive:
        return (student_steps,)
    between = [n for n in range(teacher_steps - 1, student_steps, -1) if teacher_steps % n == 0]
    # a stage must share the final grid's times (K | n), or its states would not be the final stage's
    return (*[n for n in between if n % student_steps == 0], student_steps)


@dataclass(frozen=True)
class OnestepConfig:
    """Optimiser settings (the recipe's --distill-steps / --distill-batch / --distill-lr / --seed) and the
    method's knobs. `final_fraction`: the share of the steps the last stage gets (the earlier stages
    split the rest evenly); `anchor_weight`: the flow-matching anchor's weight (0 without recorded
    actions); `noise`: where the policy starts its flow (`zero`: x = 0, the demo policies; `random`:
    N(0, 1)); `noise_draws`: start draws per observation under `random` (their targets are computed once)."""

    steps: int = 400
    batch: int = 16
    lr: float = 3e-4
    seed: int = 0
    checkpoint_every: int = 50
    progressive: bool = False
    final_fraction: float = 0.6
    anchor_weight: float = 0.1
    noise: str = "random"
    noise_draws: int = 4
    rounds: int = 1
    # extra weight on the final chunk's first action, the only one a sync loop executes (step-distill's
    # `--first-action-weight`): a student whose first actions come out short finishes late at sync 0 ms
    first_action_weight: float = 0.0
    # the decay of an exponential moving average of the student's weights (0: off), the weights it ships
    # with: the average of the last ~1 / (1 - decay) steps instead of the last step's (consistency models
    # ship theirs, Song et al. 2023, arXiv:2303.01469)
    average: float = 0.0

    def __post_init__(self) -> None:
        for name in ("steps", "batch", "checkpoint_every", "noise_draws", "rounds"):
            if getattr(self, name) < 1:
                raise ConfigError(
                    f"onestep {name.replace('_', ' ')} must be >= 1 (got {getattr(self, name)})"
                )
        if not self.lr > 0:
            raise ConfigError(f"onestep lr must be > 0 (got {self.lr})")
        if not 0 < self.final_fraction <= 1:
            raise ConfigError(f"onestep final fraction must be in (0, 1] (got {self.final_fraction})")
        if not self.anchor_weight >= 0:
            raise ConfigError(f"onestep anchor weight must be >= 0 (got {self.anchor_weight})")
        if not self.first_action_weight >= 0:
            raise ConfigError(f"--first-action-weight must be >= 0 (got {self.first_action_weight})")
        if not (self.average == 0 or 0 < self.average < 1):
            raise ConfigError(f"--onestep-average must be 0 (off) or in (0, 1) (got {self.average})")
        if self.noise not in NOISE_MODES:
            raise ConfigError(f"onestep noise must be one of {', '.join(NOISE_MODES)} (got {self.noise!r})")


class FlowStudent(Protocol):
    """What a flow family gives the method: its prefix cache, its velocity, its observation batching and
    the parameters of its denoising side."""

    chunk_shape: tuple[int, int]  # (chunk_size, max_action_dim) of one sample

    def prefix(self, model: nn.Module, obs: Any) -> Any: ...

    def velocity(self, model: nn.Module, cache: Any, obs: Any, x: Tensor, t: Tensor) -> Tensor:
        """v(x, t) (B, chunk, dim); t is (B,)."""
        ...

    def select(self, obs: Any, index: list[int]) -> Any: ...

    def concat(self, a: Any, b: Any) -> Any:
        """Two observation batches as one."""
        ...

    def batch_size(self, obs: Any) -> int: ...

    def stack_prefix(self, caches: list[Any]) -> Any:
        """Prefix caches of several observation batches as one batch."""
        ...

    def select_prefix(self, cache: Any, index: list[int]) -> Any: ...

    def denoising_parameters(self, model: nn.Module) -> list[nn.Parameter]: ...


def integrate(
    flow: FlowStudent, model: nn.Module, cache: Any, obs: Any, start: Tensor, steps: int
) -> list[Tensor]:
    """Euler from t = 1 to 0 in `steps` steps exactly as the family's engines run it (t = 1 + k dt):
    every state, the start first and the chunk last; differentiable."""
    states = [start.float()]
    dt = -1.0 / steps
    for k in range(steps):
        t = torch.full((start.shape[0],), 1.0 + k * dt, dtype=torch.float32)
        states.append(states[-1] + dt * flow.velocity(model, cache, obs, states[-1], t))
    return states


@dataclass
class TeacherTrajectories:
    """The teacher's states at every one of its grid times for each (observation, start) pair, computed
    once: row r is observation `obs_index[r]` from start `starts[r]`. `prefix`: the prefix cache of every
    observation (row i of the batch: observation i), computed once as well: vision and VLM are frozen, so
    the student's prefix is the teacher's for the whole training, and a training step costs only the
    denoising side (the prefix was two thirds of a step's time on demo:conveyor when each step ran it)."""

    obs_index: list[int]
    starts: Tensor  # (R, chunk, dim)
    states: Tensor  # (R, N + 1, chunk, dim), states[:, 0] == starts
    prefix: Any = None


@torch.no_grad()
def prefixes(flow: FlowStudent, model: nn.Module, obs: Any, rows: int = 64) -> Any:
    """The prefix cache of every observation of `obs`, `rows` at a time, as one batch."""
    n = flow.batch_size(obs)
    return flow.stack_prefix(
        [flow.prefix(model, flow.select(obs, list(range(lo, min(lo + rows, n))))) for lo in range(0, n, rows)]
    )


@torch.no_grad()
def teacher_trajectories(
    flow: FlowStudent, teacher: nn.Module, obs: Any, teacher_steps: int, config: OnestepConfig
) -> TeacherTrajectories:
    n = flow.batch_size(obs)
    draws = 1 if config.noise == "zero" else config.noise_draws
    gen = torch.Generator().manual_seed(config.seed + 4242)
    index, starts, states, caches = [], [], [], []
    for lo in range(0, n, 64):
        rows = list(range(lo, min(lo + 64, n)))
        part = flow.select(obs, rows)
        cache = flow.prefix(teacher, part)
        caches.append(cache)
        for _ in range(draws):
            start = (
                torch.zeros(len(rows), *flow.chunk_shape)
                if config.noise == "zero"
                else torch.randn((len(rows), *flow.chunk_shape), generator=gen)
            )
            index += rows
            starts.append(start)
            states.append(torch.stack(integrate(flow, teacher, cache, part, start, teacher_steps), dim=1))
    return TeacherTrajectories(index, torch.cat(starts), torch.cat(states), flow.stack_prefix(caches))


def trajectory_loss(
    flow: FlowStudent,
    student: nn.Module,
    obs: Any,
    cache: Any,
    start: Tensor,
    target: Tensor,
    steps: int,
    teacher_steps: int,
    action_dim: int | None = None,
    first_action_weight: float = 0.0,
) -> Tensor:
    """Mean over the student's grid times of |x_k - X(t_k)|^2 / h^2 (the shortcut-velocity error), the
    student integrating from `start`; `target`: the teacher's states (B, N + 1, chunk, dim); `cache`: the
    observations' (frozen) prefix. `action_dim`: the chunk's dimensions the policy executes; the final
    chunk is judged on those alone (the others are padding the plan drops), the states between on all
    (the next step reads them). `first_action_weight` w: the final term is (chunk + w first action) /
    (1 + w)."""
    got = integrate(flow, student, cache, obs, start, steps)
    stride = teacher_steps // steps
    h2 = (1.0 / steps) ** 2
    used = slice(None) if action_dim is None else slice(0, action_dim)
    terms = [
        F.mse_loss(got[k][..., used if k == steps else slice(None)],
                   target[:, k * stride][..., used if k == steps else slice(None)]) / h2
        for k in range(1, steps + 1)
    ]  # fmt: skip
    if first_action_weight:
        first = F.mse_loss(got[steps][:, 0, used], target[:, -1, 0, used]) / h2
        terms[-1] = (terms[-1] + first_action_weight * first) / (1 + first_action_weight)
    return torch.stack(terms).mean()


def anchor_loss(
    flow: FlowStudent,
    student: nn.Module,
    obs: Any,
    cache: Any,
    actions: Tensor,
    gen: torch.Generator,
    sample_time: Callable[[int, torch.Generator], Tensor],
) -> Tensor:
    """Flow matching on recorded chunks: |v(t eps + (1 - t) a, t) - (eps - a)|^2 at the family's training
    time distribution; `cache`: the observations' (frozen) prefix."""
    a = actions.float()
    eps = torch.randn(a.shape, generator=gen)
    t = sample_time(a.shape[0], gen)
    x_t = t[:, None, None] * eps + (1 - t[:, None, None]) * a
    return F.mse_loss(flow.velocity(student, cache, obs, x_t, t), eps - a)


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def stage_steps(config: OnestepConfig, stages: tuple[int, ...]) -> list[int]:
    """Optimiser steps per stage: the last gets `final_fraction` of them, the others share the rest."""
    if len(stages) == 1:
        return [config.steps]
    last = max(1, round(config.steps * config.final_fraction))
    return [*split(config.steps - last, len(stages) - 1), last]


def merge(
    flow: FlowStudent, a: TeacherTrajectories, obs_a: Any, b: TeacherTrajectories, obs_b: Any
) -> tuple[TeacherTrajectories, Any]:
    """Trajectories (and their observations) of two sets as one."""
    offset = flow.batch_size(obs_a)
    joined = TeacherTrajectories(
        a.obs_index + [i + offset for i in b.obs_index],
        torch.cat([a.starts, b.starts]),
        torch.cat([a.states, b.states]),
        flow.stack_prefix([a.prefix, b.prefix]),
    )
    return joined, flow.concat(obs_a, obs_b)


def cosine_lr(total: int, floor: float = 0.1) -> Callable[[int], float]:
    """The learning rate's factor at optimiser step i of `total`: cosine from 1 to `floor`."""
    import math

    return lambda i: floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(i, total) / max(1, total)))


# The student's own observations for a round of on-policy training: (student, round) -> a batch, or None.
Explore = Callable[[nn.Module, int], Any]


def train_onestep(
    flow: FlowStudent,
    teacher: nn.Module,
    student: nn.Module,
    obs: Any,
    actions: Tensor | None,
    student_steps: int,
    teacher_steps: int,
    config: OnestepConfig,
    sample_time: Callable[[int, torch.Generator], Tensor],
    work: Path | None = None,
    progress: bool = False,
    anchor_obs: Any = None,
    explore: Explore | None = None,
    action_dim: int | None = None,
) -> dict[str, Any]:
    """Train `student` (in place) into a `student_steps`-step plan of `teacher`'s `teacher_steps`.
    `obs`: the observations the trajectories start from; `anchor_obs` / `actions`: recorded frames and
    their normalised chunks for the flow anchor (None: no anchor); `explore`: the student's own
    observations between the last stage's `config.rounds` rounds; `action_dim`: the chunk dimensions the
    policy executes (None: all). Resumable from `work`."""
    from hotloop.nn.resumable import WeightAverage, train_resumable

    check_onestep(student_steps, teacher_steps)
    if flow.batch_size(obs) < 1:
        raise ConfigError("--recipe onestep: no observations to distill on")
    import time

    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    t0 = time.perf_counter()
    trajectories = teacher_trajectories(flow, teacher, obs, teacher_steps, config)
    anchored = actions is not None and anchor_obs is not None and config.anchor_weight > 0
    anchor_prefix = prefixes(flow, teacher, anchor_obs) if anchored else None
    t_targets = time.perf_counter() - t0
    t_explore = 0.0
    stages = stage_schedule(student_steps, teacher_steps, config.progressive)
    budget = stage_steps(config, stages)
    rounds = config.rounds if explore is not None else 1
    # (student steps, optimiser steps) per training phase: the last stage in `rounds` parts
    phases = [(n, b) for n, b in zip(stages[:-1], budget[:-1], strict=True)]
    phases += [(stages[-1], b) for b in split(budget[-1], rounds)]
    params = flow.denoising_parameters(student)
    average = WeightAverage(params, config.average) if config.average else None
    first = trajectories

    @torch.no_grad()
    def fit(steps: int) -> float:
        """Final-chunk MSE of `steps` steps on the first (up to) 64 starting trajectories (a fit figure), on
        the executed dimensions."""
        idx = list(range(min(64, len(first.obs_index))))
        rows = [first.obs_index[i] for i in idx]
        o = flow.select(obs, rows)
        got = integrate(flow, student, flow.select_prefix(first.prefix, rows), o, first.starts[idx], steps)
        used = slice(None) if action_dim is None else slice(0, action_dim)
        return float(F.mse_loss(got[-1][..., used], first.states[idx, -1][..., used]))

    before = fit(student_steps)
    t0 = time.perf_counter()
    history: list[dict[str, Any]] = []
    explored: list[int] = []
    # One cosine decay over every phase (`done`: the optimiser steps of the earlier ones). At 1600 steps it
    # left the student 12.6 mm from the teacher's chunks where a constant rate left 13.8 (demo:conveyor,
    # observations of async 200 ms episodes held out).
    done = 0
    schedule = cosine_lr(config.steps)
    for phase, (steps, n_opt) in enumerate(phases):
        if phase >= len(stages) and explore is not None:  # a later round: the student's own states first
            t1 = time.perf_counter()
            if average is not None:  # the round plays the weights the student would ship
                average.swap()
            new_obs = explore(student, phase - len(stages) + 1)
            if average is not None:
                average.swap()
            new = teacher_trajectories(flow, teacher, new_obs, teacher_steps, config)
            trajectories, obs = merge(flow, trajectories, obs, new, new_obs)
            explored.append(flow.batch_size(new_obs))
            t_explore += time.perf_counter() - t1
        rows = len(trajectories.obs_index)
        if n_opt < 1:
            continue

        def loss_fn(
            gen: torch.Generator,
            steps: int = steps,
            rows: int = rows,
            traj: TeacherTrajectories = trajectories,
            obs: Any = obs,
        ) -> Tensor:
            idx = torch.randperm(rows, generator=gen)[: min(config.batch, rows)].tolist()
            which = [traj.obs_index[i] for i in idx]
            loss = trajectory_loss(
                flow, student, flow.select(obs, which), flow.select_prefix(traj.prefix, which),
                traj.starts[idx], traj.states[idx], steps, teacher_steps, action_dim, config.first_action_weight,
            )  # fmt: skip
            if anchored:
                assert actions is not None
                n = flow.batch_size(anchor_obs)
                j = torch.randperm(n, generator=gen)[: min(config.batch, n)].tolist()
                loss = loss + config.anchor_weight * anchor_loss(
                    flow, student, flow.select(anchor_obs, j), flow.select_prefix(anchor_prefix, j),
                    actions[j], gen, sample_time,
                )  # fmt: skip
            return loss

        stage_config = StageSettings(n_opt, config.lr, config.seed + 1000 * phase, config.checkpoint_every)
        kind = f"onestep:{student_steps}:{steps}:{phase}:{rows}:{asdict(config)}:{action_dim}"
        checkpoint = None if work is None else work / f"phase-{phase}-{steps}"

        def lr_at(i: int, done: int = done) -> float:
            return schedule(done + i)

        state = train_resumable(
            student, loss_fn, stage_config, checkpoint, kind, None, progress, params, lr_at, average
        )
        done += n_opt
        history.append(
            {
                "steps": steps,
                "trajectories": rows,
                "optimizer_steps": state.step,
                "loss_first": state.losses[0] if state.losses else None,
                "loss_last": float(sum(state.losses[-10:]) / max(1, len(state.losses[-10:]))),
            }
        )
    if average is not None:  # the student ships the average
        average.swap()
    return {
        "method": "SnapFlow-style self-distillation (arXiv:2604.05656)",
        "student_steps": student_steps,
        "teacher_steps": teacher_steps,
        "stages": history,
        "trajectories": len(trajectories.obs_index),
        "observations": flow.batch_size(obs),
        "explored_observations": explored,
        "anchor": None
        if not anchored
        else {"weight": config.anchor_weight, "frames": flow.batch_size(anchor_obs)},
        "action_dim": action_dim,
        "chunk_mse_before": before,
        "chunk_mse_after": fit(student_steps),
        # wall time of this process (another run of the machine's slows it alike)
        "seconds": {
            "teacher_trajectories": round(t_targets, 2),
            "rounds": round(t_explore, 2),
            "training": round(time.perf_counter() - t0 - t_explore, 2),
        },
        "config": asdict(config),
    }


@dataclass(frozen=True)
class StageSettings:
    """One stage's optimiser settings, as `train_resumable` reads them (part of its checkpoint identity)."""

    steps: int
    lr: float
    seed: int
    checkpoint_every: int


@dataclass(frozen=True)
class OnestepJob:
    """One `onestep[:K]` step as the recipe hands it to a family (`compression().onestep`): `student` (a
    trainable copy, trained in place) learns in `student_steps` what `teacher` samples in `teacher_steps`.
    `obs`: the observations the teacher's trajectories start from; `calib`: the recorded frames and chunks
    of the anchor (a `CalibrationSet`, or None); `config`: `OnestepConfig`; `work`: the resumable
    checkpoints' folder; `explore` and `action_dim`: the flow families' closed-loop rounds and padded
    action dimensions (Diffusion has neither)."""

    teacher: nn.Module
    student: nn.Module
    obs: Any
    calib: Any
    student_steps: int
    teacher_steps: int
    config: OnestepConfig
    work: Path | None = None
    progress: bool = False
    explore: Explore | None = None
    action_dim: int | None = None


class FlowOnestepSteps:
    """`onestep[:K]` as a flow family's compression steps (pi, SmolVLA): the check and the training are
    the method's own; a family states only its `FlowStudent` (`flow_student`)."""

    def flow_student(self, model: Any) -> FlowStudent:
        raise NotImplementedError

    def check_onestep(
        self, student_steps: int, teacher_steps: int, earlier: tuple[str, ...] = (), model: Any = None
    ) -> None:
        check_onestep(student_steps, teacher_steps)

    def onestep(self, job: OnestepJob) -> dict[str, Any]:
        return train_flow_onestep(self.flow_student(job.teacher), job)


__all__ = [
    "MAX_STUDENT_STEPS",
    "FlowOnestepSteps",
    "FlowStudent",
    "OnestepConfig",
    "OnestepJob",
    "check_onestep",
    "integrate",
    "stage_schedule",
    "teacher_trajectories",
    "train_onestep",
]


def train_flow_onestep(flow: FlowStudent, job: OnestepJob) -> dict[str, Any]:
    """`train_onestep` as the recipe calls it for a flow family: the trajectories start from `job.obs`, the
    anchor is `job.calib`'s recorded frames and chunks (a `CalibrationSet`, or None)."""
    from hotloop.families.pi.sampling import sample_time

    calib = job.calib
    return train_onestep(
        flow, job.teacher, job.student, job.obs, None if calib is None else calib.actions, job.student_steps,
        job.teacher_steps, job.config, sample_time, job.work, job.progress, None if calib is None else calib.obs,
        job.explore, job.action_dim,
    )  # fmt: skip
