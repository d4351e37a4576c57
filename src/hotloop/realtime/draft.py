"""Speculative chunks (`--strategy draft`): a cheap draft chunk, checked by the full model, kept where it agrees.

After Realtime-VLA FLASH (Niu et al. 2026, "Realtime-VLA FLASH: Speculative Inference Framework for
Diffusion-based VLAs", arXiv:2605.13778): speculative decoding (Leviathan, Kalman, Matias 2023; Chen et al.
2023) carried over to flow-matching action chunks. A draft is proposed without running the denoising
loop; the full model checks it with one or a few evaluations of its velocity network and the robot executes
the longest prefix the model agrees with; where it does not, the full path runs.

The draft here costs nothing: the executing chunk itself, shifted by the actions executed since it was
made (row i is meant for the period starting i periods after this observation, as RTC's rows are), its
tail padded by repeating its last action to the full horizon. It travels in the observation as RTC's
previous actions (`hotloop.realtime.rtc.PREV_ACTIONS_KEY`, with `MODE_KEY` "draft"), so every policy
that can take RTC's inputs receives it the same way, over the wire too.

Verification (this package's flow convention: t from 1 = noise to 0 = actions, v toward the noise): for
each t in `VERIFY_TIMES` (one, 0.3, by default: K = 1 evaluation) the draft is noised to
x_t = t·eps + (1 − t)·draft from the sampler's own fixed start (`eps`: the policy's fixed draw, or 0 for a
policy sampled from x = 0), the model's velocity is taken once, and its prediction of the clean chunk
x̂0 = x_t − t·v is compared with the draft row by row: err_i = max over t and over the action's
dimensions of |x̂0 − draft|_i, in the model's normalized action units. A chunk the model would make
itself is (close to) a fixed point, x̂0 ≈ draft; where the model plans otherwise it pulls x̂0 toward its
own plan (on demo:conveyor by 0.7-0.8 of the difference at t = 0.3). The accepted prefix is the rows
before the first err_i > tolerance (`DEFAULT_TOLERANCE`, `--draft-tolerance`).

The largest coordinate, not the RMS over the row: quantile normalization makes some dimensions coarse (on
demo:conveyor one unit of x is 34 cm, of y 7.5 cm), so an RMS over the row let a plan 6 cm behind the
box in x through, and the robot closed beside it (docs/realtime.md has the runs).

Outcome, per call (`DraftOutcome`):
- speculative: at least `min_rows` rows accepted (half the horizon, and more than the delay d): the
  answer is those rows only, and nothing else runs. Cost: vision + prefix + K expert evaluations.
- full: fewer accepted: the full denoising loop runs, conditioned on the executing chunk as `rtc-soft`
  is (`soft_prefix_sample_actions`), with the accepted rows held exactly (the mask's hard part is
  max(d, accepted)). Cost: vision + prefix + K + N expert evaluations; the prefix cache is computed once
  per call and shared by the check and the loop.

The answer carries `DRAFT_KEY`: what was offered, accepted and kept, the expert evaluations run and the
call's work as a fraction of a full inference's (`DraftCost`): vision + prefix + N loop steps, counted in
the family's analytic FLOPs (`hotloop.families.pi.roofline`, `hotloop.families.smolvla.roofline`), which
are the same on every machine and every run. A simulated latency (`--latency fixed:MS`, `replay:`) stands
for a full inference, the path `rtc-soft` takes on every call, and a draft call is charged that latency
times its work (`hotloop.realtime.runner.SimulatedEngine`); `--latency measured` charges the wall time the
call took. The fraction is a count of work, not of this machine's time: a tiny model's steps are dominated
by per-kernel overhead, and the run's JSON reports the calls' wall times by path beside it.

A student's chunk as the draft (`--draft-from STUDENT`, FLASH's own design): the draft is then a fresh
chunk, proposed for this observation by a one-step student (`hotloop compress TARGET --recipe onestep`,
docs/onestep.md) whose vision and VLM are the teacher's own tensors, so the student needs only its expert
on the teacher's prefix cache: a call costs vision + prefix + the student's steps (1 for `onestep`, 2
for `onestep:2`) + the K check evaluations (+ N loop steps on the full path). Its row i is for the period starting i periods after this
observation, like the shifted draft's, but rows before the delay d are not the student's to give: the
robot executes the executing chunk's rows [0, d) while this call runs (`splice_by_time` starts the answer
at the first period after it is ready, and a shorter call starts it among rows the executing chunk
already planned), so the draft checked and answered is the executing chunk's rows [0, d), then the
student's chunk handed over from the executing one by `rtc-soft`'s soft mask (`prefix_weights`: row i is
W_i prev_i + (1 - W_i) student_i over the overlap, the student's alone after it; cut in at d instead, a
fresh plan every 2 periods switched plans and lost success, docs/realtime.md), and those d rows count as
accepted whatever the check says of them (`held`): what is decided is whether the draft's rows from d on
are kept. That is `rtc-soft`'s convention too (its
first d rows are the executing chunk's, held exactly), so the answer's first d rows are the same on
every path, and the full path is `rtc-soft`'s sampler with rows [0, max(d, accepted)) held: the
executing chunk's, then the draft's accepted ones. `DraftOutcome.source` says which draft a call had
("shifted" or "student"); the scheduler refuses an answer whose source is not the strategy's
(`draft_source`), so a policy that silently ignored the student is caught.

This module imports torch only inside its functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

DRAFT_KEY = "draft"  # the answer's per-call statistics (a dict of plain numbers)
# Who can check a draft: a policy whose velocity network can be called at any flow time.
DRAFT_FAMILIES = (
    "pi0 / pi0.5 in PyTorch (demo:conveyor, pi checkpoint folders) and SmolVLA (eager, or a plan that kept "
    "the step engine)"
)


def draft_refusal(name: str) -> str:
    """The one line a policy that cannot check a draft is refused with (before any episode)."""
    return (
        f"--strategy draft checks each chunk with the policy's velocity network, and {name} has none it can "
        f"call (ACT and Diffusion have none; nor a compiled pi artifact); it is for {DRAFT_FAMILIES}: use "
        "--strategy rtc-soft or async"
    )


TOLERANCE_KEY = "draft_tolerance"  # the observation's tolerance (normalized action units)

# Where a draft comes from: "shifted", the executing chunk (every policy that checks drafts), or "student",
# a one-step student's chunk handed over from the executing one (`--draft-from STUDENT`, pi0 / pi0.5 in PyTorch).
SHIFTED, STUDENT = "shifted", "student"
DRAFT_SOURCES = (SHIFTED, STUDENT)
DRAFT_FROM_FLAG = "--draft-from"
STUDENT_FAMILIES = "pi0 / pi0.5 in PyTorch (demo:conveyor, pi checkpoint folders)"


def check_source(value: str) -> str:
    """A draft source named in `DRAFT_SOURCES`; anything else is a ConfigError."""
    from hotloop.errors import ConfigError

    if value not in DRAFT_SOURCES:
        raise ConfigError(f"draft_source must be one of {', '.join(DRAFT_SOURCES)} (got {value!r})")
    return value


def student_refusal(student: str, why: str) -> str:
    """The one line `--draft-from STUDENT` is refused with (before any episode): the flag, the student, and
    `why` (which says the fix)."""
    return f"{DRAFT_FROM_FLAG} {student}: {why}"


def source_of(stats: dict[str, Any]) -> str:
    """The draft source a call's statistics name (answers from before sources were named: "shifted")."""
    return str(stats.get("source") or SHIFTED)


# The flow times the draft is checked at. One, at 0.3: near the data the model already pulls x̂0 most of the
# way to its own plan, and its own chunk is closest to a fixed point there; at 0.6 its own 10-step chunk
# misses its one-step prediction by more than the plans the check must tell apart (docs/realtime.md).
VERIFY_TIMES: tuple[float, ...] = (0.3,)
# The largest error (normalized action units, the largest coordinate of a row) a row may have and be
# accepted. demo:conveyor at 200 ms, seeds 0-49: 0.1, 0.15, 0.2 gave 49, 48, 35 of 50; on 200 fresh seeds
# 0.1 kept rtc-soft's success at 150 and 250 ms, where 0.15 lost 6 and 3 episodes (docs/realtime.md).
DEFAULT_TOLERANCE = 0.1
MAX_TOLERANCE = 100.0


def check_tolerance(value: float) -> float:
    """The tolerance as a float; anything but a finite number in (0, MAX_TOLERANCE] is a ConfigError."""
    from hotloop.errors import ConfigError

    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"--draft-tolerance must be a number (got {value!r})")
    if not 0 < value <= MAX_TOLERANCE:
        raise ConfigError(
            f"--draft-tolerance must be > 0 and at most {MAX_TOLERANCE:g} normalized action units "
            f"(got {value:g}; the default is {DEFAULT_TOLERANCE:g})"
        )
    return float(value)


def tolerance_of(obs: dict[str, Any]) -> float:
    """The observation's tolerance (`TOLERANCE_KEY`), else `DEFAULT_TOLERANCE`; a bad value is the sender's
    ConfigError."""
    from hotloop.errors import ConfigError

    if TOLERANCE_KEY not in obs:
        return DEFAULT_TOLERANCE
    try:
        value = float(np.asarray(obs[TOLERANCE_KEY]).reshape(()))
    except (TypeError, ValueError):
        raise ConfigError(f"observation {TOLERANCE_KEY!r} must be a number") from None
    try:
        return check_tolerance(value)
    except ConfigError as e:
        raise ConfigError(f"observation {TOLERANCE_KEY!r}: {e}") from None


def min_rows(horizon: int, delay: int) -> int:
    """The fewest accepted rows a speculative answer keeps: half the horizon (what `async` keeps in hand
    when it asks for the next chunk, enough to cover a full inference), and more than the delay d (the
    rows the robot executes while this answer is computed are gone when it arrives)."""
    return max(1, min(horizon, max(horizon // 2, delay + 1)))


def draft_rows(prev: np.ndarray, horizon: int) -> np.ndarray:
    """The draft (horizon, D) from the executing chunk's remaining rows `prev` (n, D): cut to the horizon,
    the tail padded by repeating the last row."""
    prev = np.asarray(prev)
    n = min(len(prev), horizon)
    if n == 0:
        raise ValueError("a draft needs at least one row")
    out = np.empty((horizon, prev.shape[1]), dtype=prev.dtype)
    out[:n] = prev[:n]
    out[n:] = prev[n - 1]
    return out


@dataclass(frozen=True)
class Verification:
    accepted: int  # rows before the first one over the tolerance
    errors: np.ndarray  # (rows,) the per-row error (max over the times)
    evals: int  # velocity evaluations run


Velocity = Callable[["Tensor", "Tensor"], "Tensor"]  # (x (B, chunk, A) f32, t (B,) f32) -> v


def verify(
    velocity: Velocity,
    draft: Tensor,
    noise: Tensor,
    rows: int,
    action_dim: int,
    tolerance: float,
    times: Sequence[float] | None = None,
) -> Verification:
    """Check `draft` (1, chunk, A), model space, against the model at `times` (default `VERIFY_TIMES`):
    see the module docstring. Rows past `rows` (the horizon) and columns past `action_dim` are not
    compared."""
    import torch

    times = VERIFY_TIMES if times is None else tuple(times)

    target = draft.to(torch.float32)
    eps = noise.to(device=target.device, dtype=torch.float32)
    worst = torch.zeros(rows, dtype=torch.float32, device=target.device)
    with torch.no_grad():
        for t_value in times:
            t = torch.full((target.shape[0],), float(t_value), dtype=torch.float32, device=target.device)
            x_t = t_value * eps + (1.0 - t_value) * target
            x0 = x_t - t_value * velocity(x_t, t)
            diff = (x0 - target)[0, :rows, :action_dim]
            worst = torch.maximum(worst, diff.abs().amax(dim=-1))
    errors = worst.cpu().numpy().astype(np.float64)
    return Verification(accepted_prefix(errors, tolerance), errors, len(times))


def accepted_prefix(errors: np.ndarray, tolerance: float, held: int = 0) -> int:
    """The rows before the first one from `held` on whose error is over `tolerance` (NaN counts as over);
    the first `held` rows count as accepted whatever their error (a student's draft: the executing chunk's
    rows the robot runs during the call, see the module docstring)."""
    errors = np.asarray(errors, dtype=np.float64)
    held = max(0, min(int(held), len(errors)))
    bad = np.flatnonzero(~(errors[held:] <= tolerance))
    return held + int(bad[0]) if bad.size else len(errors)


@dataclass(frozen=True)
class DraftCost:
    """A family's cost model for a draft call, in any one unit (the analytic FLOPs of the family's
    roofline): vision + prefix (`encode`), one velocity evaluation with one flow time for the chunk
    (`step`, the check's), one with a time per token (`token_step`, the loop of `rtc-soft`'s sampler the
    full path runs), and the loop's `num_steps`. A full inference is encode + N token steps."""

    encode: float
    step: float
    token_step: float
    num_steps: int

    @property
    def full(self) -> float:
        return self.encode + self.num_steps * self.token_step

    def fraction(self, checks: int, loop: bool, drafts: int = 0) -> float:
        """The work of a call that ran `checks` check evaluations, `drafts` evaluations of a student's expert
        to propose the draft (`--draft-from`: its steps, each one time for the chunk, the same size as the
        teacher's), and the loop when `loop`, as a fraction of a full inference's."""
        evals = checks + drafts
        work = self.encode + evals * self.step + (self.num_steps * self.token_step if loop else 0.0)
        return work / self.full

    def describe(self, drafts: int = 0) -> dict[str, Any]:
        return {
            "unit": "FLOP",
            "encode": self.encode,
            "step": self.step,
            "token_step": self.token_step,
            "num_steps": self.num_steps,
            "draft_steps": drafts,
            "speculative_fraction": round(self.fraction(len(VERIFY_TIMES), False, drafts), 4),
            "full_fraction": round(self.fraction(len(VERIFY_TIMES), True, drafts), 4),
        }


@dataclass(frozen=True)
class DraftOutcome:
    """What one draft call did (`stats()` is the answer's `DRAFT_KEY`)."""

    offered: int  # rows of the executing chunk sent (before padding)
    horizon: int  # rows verified (the draft's length)
    accepted: int  # the accepted prefix (a student's draft: its `held` rows included)
    speculative: bool  # the accepted rows were the answer (no denoising loop ran)
    evals: int  # the teacher's expert evaluations run: K, or K + N
    work: float  # the call's work as a fraction of a full inference's (a student's steps included)
    kept: int  # rows of the answer: the accepted ones (speculative), else the horizon
    source: str = SHIFTED  # where the draft came from (`DRAFT_SOURCES`)
    held: int = 0  # a student's draft: its first rows, the executing chunk's (the delay d)
    draft_evals: int = 0  # the student's expert evaluations that proposed the draft (its steps)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "offered": self.offered,
            "rows": self.horizon,
            "accepted": self.accepted,
            "speculative": self.speculative,
            "evals": self.evals,
            "work": round(self.work, 6),
        }
        if self.source == STUDENT:
            out["held"] = self.held
            out["draft_evals"] = self.draft_evals
        return out


def outcome_of(output: Any) -> dict[str, Any] | None:
    """A policy answer's draft statistics, or None (not a draft call)."""
    if not isinstance(output, dict):
        return None
    stats = output.get(DRAFT_KEY)
    return stats if isinstance(stats, dict) else None


def work_of(output: Any) -> float | None:
    """The work fraction a draft answer reports (None for any other answer, or a value that is not a
    positive finite number)."""
    stats = outcome_of(output)
    if stats is None:
        return None
    work = stats.get("work")
    if isinstance(work, bool) or not isinstance(work, int | float) or not math.isfinite(work) or work <= 0:
        return None
    return float(work)


def summarize_calls(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Acceptance over draft calls' statistics: calls, the speculative share, rows accepted of rows
    verified, the mean accepted prefix and the mean work."""
    n = len(calls)
    spec = sum(1 for c in calls if c.get("speculative"))
    rows = sum(int(c.get("rows") or 0) for c in calls)
    accepted = sum(int(c.get("accepted") or 0) for c in calls)
    work = [float(c["work"]) for c in calls if c.get("work") is not None]
    return {
        "source": merged_source(source_of(c) for c in calls),
        "calls": n,
        "speculative_calls": spec,
        "full_calls": n - spec,
        "call_acceptance": spec / n if n else None,
        "rows_verified": rows,
        "rows_accepted": accepted,
        "row_acceptance": accepted / rows if rows else None,
        "mean_accepted": accepted / n if n else None,
        "mean_work": float(np.mean(work)) if work else None,
    }


def merged_source(sources: Iterable[str]) -> str | None:
    """The draft source of many calls: theirs when they agree, "mixed" when not, None for no calls."""
    seen = set(sources)
    if not seen:
        return None
    return seen.pop() if len(seen) == 1 else "mixed"
