"""DDPM and DDIM noise schedulers with diffusers' numerics, without diffusers (and without its RNG).

LeRobot's Diffusion Policy builds `diffusers.DDPMScheduler` / `DDIMScheduler` (diffusers 0.38-0.39 at
LeRobot commit 7427f318; the two files are identical in both) from `num_train_timesteps`, `beta_start`,
`beta_end`, `beta_schedule`, `clip_sample`, `clip_sample_range` and `prediction_type`, leaving every other
argument at diffusers' default: timestep_spacing "leading", steps_offset 0, thresholding off, no zero-SNR
rescaling, DDPM variance_type "fixed_small", DDIM set_alpha_to_one True, and `step` called with eta 0.
Only those configurations are implemented; every coefficient is computed the way diffusers computes it
(float32 0-d tensors, the same expression order), so a step here equals a diffusers step bit for bit.

Two forms of one step:
- `step(model_output, t, sample, variance_noise)`: per call, diffusers' expressions. DDPM's variance noise
  is an argument: hotloop never draws from torch's global RNG (LeRobot does, inside diffusers).
- `step_table(n)` + `table_step(row, ...)`: the per-step coefficients precomputed as float32 rows, and a pure
  function of tensors, so a whole denoising loop traces as one graph with no Python control flow on tensor
  values. The generic expressions are chosen to round exactly like `step` (multiplying by 1, adding 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from hotloop.errors import ConfigError

SchedulerKind = Literal["DDPM", "DDIM"]
SCHEDULER_KINDS: tuple[str, ...] = ("DDPM", "DDIM")
PREDICTION_TYPES: tuple[str, ...] = ("epsilon", "sample", "v_prediction")
# The beta schedules each diffusers class implements (DDIM has neither "sigmoid" nor "laplace").
BETA_SCHEDULES: dict[str, tuple[str, ...]] = {
    "DDPM": ("linear", "scaled_linear", "squaredcos_cap_v2", "sigmoid", "laplace"),
    "DDIM": ("linear", "scaled_linear", "squaredcos_cap_v2"),
}


def _alpha_bar_betas(num_steps: int, transform: str, max_beta: float = 0.999) -> Tensor:
    """diffusers' `betas_for_alpha_bar`: Python float64 arithmetic, then one float32 tensor."""

    def alpha_bar(t: float) -> float:
        if transform == "cosine":
            return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
        lmb = -0.5 * math.copysign(1, 0.5 - t) * math.log(1 - 2 * math.fabs(0.5 - t) + 1e-6)  # laplace
        snr = math.exp(lmb)
        return math.sqrt(snr / (1 + snr))

    betas = [
        min(1 - alpha_bar((i + 1) / num_steps) / alpha_bar(i / num_steps), max_beta) for i in range(num_steps)
    ]
    return torch.tensor(betas, dtype=torch.float32)


def make_betas(
    kind: str, schedule: str, num_train_timesteps: int, beta_start: float, beta_end: float
) -> Tensor:
    """The float32 betas diffusers' `kind` scheduler builds for `schedule` (ConfigError if it has none)."""
    if schedule not in BETA_SCHEDULES.get(kind, ()):
        raise ConfigError(
            f"noise scheduler: field 'beta_schedule' is {schedule!r}; diffusers' {kind}Scheduler "
            f"(and so hotloop) implements {', '.join(BETA_SCHEDULES.get(kind, ()))}"
        )
    n = num_train_timesteps
    if schedule == "linear":
        return torch.linspace(beta_start, beta_end, n, dtype=torch.float32)
    if schedule == "scaled_linear":
        return torch.linspace(beta_start**0.5, beta_end**0.5, n, dtype=torch.float32) ** 2
    if schedule == "squaredcos_cap_v2":
        return _alpha_bar_betas(n, "cosine")
    if schedule == "laplace":
        return _alpha_bar_betas(n, "laplace")
    return torch.sigmoid(torch.linspace(-6, 6, n)) * (beta_end - beta_start) + beta_start  # sigmoid


@dataclass(frozen=True)
class StepOutput:
    prev_sample: Tensor
    pred_original_sample: Tensor


class _Scheduler:
    """What DDPM and DDIM share: the beta schedule, "leading" timesteps, x0 and its clipping."""

    kind: SchedulerKind

    def __init__(
        self,
        num_train_timesteps: int = 1000,
        beta_start: float = 0.0001,
        beta_end: float = 0.02,
        beta_schedule: str = "linear",
        clip_sample: bool = True,
        clip_sample_range: float = 1.0,
        prediction_type: str = "epsilon",
    ) -> None:
        if isinstance(num_train_timesteps, bool) or not isinstance(num_train_timesteps, int):
            raise ConfigError(f"noise scheduler: field 'num_train_timesteps' is {num_train_timesteps!r}")
        if num_train_timesteps < 1:
            raise ConfigError(
                f"noise scheduler: field 'num_train_timesteps' is {num_train_timesteps}; it must be >= 1"
            )
        if prediction_type not in PREDICTION_TYPES:
            raise ConfigError(
                f"noise scheduler: field 'prediction_type' is {prediction_type!r}; diffusers' "
                f"{self.kind}Scheduler implements {', '.join(PREDICTION_TYPES)}"
            )
        self.num_train_timesteps = num_train_timesteps
        self.beta_schedule = beta_schedule
        self.clip_sample = bool(clip_sample)
        self.clip_sample_range = float(clip_sample_range)
        self.prediction_type = prediction_type
        self.betas = make_betas(self.kind, beta_schedule, num_train_timesteps, beta_start, beta_end)
        self.alphas = 1.0 - self.betas
        self.alphas_cumprod = torch.cumprod(self.alphas, dim=0)
        self.one = torch.tensor(1.0)  # alpha_prod before the first training step (DDPM; DDIM's final)
        self.num_inference_steps: int | None = None
        self.timesteps = torch.from_numpy(np.arange(0, num_train_timesteps)[::-1].copy().astype(np.int64))

    def _leading_timesteps(self, num_inference_steps: int) -> Tensor:
        """diffusers' "leading" spacing with steps_offset 0: (0..n-1) * (N // n), descending."""
        n, big_n = num_inference_steps, self.num_train_timesteps
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= big_n:
            raise ConfigError(
                f"noise scheduler: field 'num_inference_steps' is {n!r}; it must be an integer in "
                f"1..num_train_timesteps ({big_n}), as diffusers requires"
            )
        step_ratio = big_n // n
        return torch.from_numpy((np.arange(0, n) * step_ratio).round()[::-1].copy().astype(np.int64))

    def set_timesteps(self, num_inference_steps: int) -> Tensor:
        """Fix the inference timesteps (descending, int64) and return them."""
        self.timesteps = self._leading_timesteps(num_inference_steps)
        self.num_inference_steps = num_inference_steps
        return self.timesteps

    def _x0(self, model_output: Tensor, sample: Tensor, a: Tensor, b: Tensor) -> Tensor:
        """diffusers' predicted x0 (formula 15 of DDPM) for the prediction type; alpha a, 1 - alpha b."""
        if self.prediction_type == "epsilon":
            return (sample - b ** (0.5) * model_output) / a ** (0.5)
        if self.prediction_type == "sample":
            return model_output
        return (a**0.5) * sample - (b**0.5) * model_output  # v_prediction

    def x0_error_gain(self, timesteps: Tensor) -> Tensor:
        """Per timestep, how much an error in the model output is multiplied in the predicted x0 (at least 1).

        For epsilon prediction x0 = (x_t - sqrt(1 - a) eps) / sqrt(a), so an eps that is off by e gives an x0
        off by sqrt((1 - a) / a) e: 64x at DDPM's second step of the squaredcos schedule. A comparison of x0
        with a reference made on another CPU judges it in the model output's units through this gain.
        Sample prediction returns the output itself, v prediction scales it by sqrt(1 - a) <= 1: gain 1."""
        a = self.alphas_cumprod[timesteps.long()].double()
        if self.prediction_type != "epsilon":
            return torch.ones_like(a)
        return torch.clamp(((1 - a) / a).sqrt(), min=1.0)

    def _clip(self, x0: Tensor) -> Tensor:
        if self.clip_sample:
            return x0.clamp(-self.clip_sample_range, self.clip_sample_range)
        return x0

    def _x0_row(self, a: Tensor, b: Tensor) -> dict[str, Tensor]:
        """x0 = (x0_sample * sample - x0_model * model_output) / x0_div, rounding like `_x0`."""
        one, zero = torch.ones(()), torch.zeros(())
        if self.prediction_type == "epsilon":
            return {"x0_sample": one, "x0_model": b ** (0.5), "x0_div": a ** (0.5)}
        if self.prediction_type == "sample":
            return {"x0_sample": zero, "x0_model": -one, "x0_div": one}
        return {"x0_sample": a**0.5, "x0_model": b**0.5, "x0_div": one}

    def _clip_value(self) -> Tensor:
        return torch.tensor(self.clip_sample_range if self.clip_sample else math.inf, dtype=torch.float32)

    def _row(self, t: int, prev_t: int) -> dict[str, Tensor]:
        raise NotImplementedError

    def step_table(self, num_inference_steps: int) -> dict[str, Tensor]:
        """Per-step coefficients for the timesteps `set_timesteps(num_inference_steps)` gives, as float32
        tensors with one row per step along dim 0 (plus "timestep", int64); does not change `self`."""
        timesteps = self._leading_timesteps(num_inference_steps)
        ts = [int(t) for t in timesteps]
        rows = [self._row(t, self._prev(ts, i, num_inference_steps)) for i, t in enumerate(ts)]
        table = {key: torch.stack([row[key] for row in rows]).to(torch.float32) for key in rows[0]}
        table["timestep"] = timesteps
        return table

    def _prev(self, timesteps: list[int], index: int, num_inference_steps: int) -> int:
        raise NotImplementedError

    def step_output(
        self, model_output: Tensor, timestep: int | Tensor, sample: Tensor, variance_noise: Tensor | None
    ) -> StepOutput:
        raise NotImplementedError

    def step(
        self,
        model_output: Tensor,
        timestep: int | Tensor,
        sample: Tensor,
        variance_noise: Tensor | None = None,
    ) -> Tensor:
        """x_t -> x_prev: diffusers' `step(...).prev_sample`."""
        return self.step_output(model_output, timestep, sample, variance_noise).prev_sample


class DDPMScheduler(_Scheduler):
    """diffusers' DDPMScheduler: variance_type "fixed_small", "leading" timesteps, no thresholding."""

    kind: SchedulerKind = "DDPM"

    def previous_timestep(self, t: int) -> int:
        """The next timestep of the schedule (-1 after the last); t - 1 before `set_timesteps`."""
        if self.num_inference_steps is None:
            return t - 1
        ts = [int(x) for x in self.timesteps]
        if t not in ts:
            raise ValueError(f"timestep {t} is not one of the scheduler's timesteps {ts}")
        return self._prev(ts, ts.index(t), self.num_inference_steps)

    def _prev(self, timesteps: list[int], index: int, num_inference_steps: int) -> int:
        # diffusers looks the timestep up in its schedule once num_inference_steps is set.
        return -1 if index == len(timesteps) - 1 else timesteps[index + 1]

    def _variance(self, t: int, prev_t: int) -> Tensor:
        """diffusers' `_get_variance` for "fixed_small": the posterior variance, clamped at 1e-20."""
        a = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one
        current_beta_t = 1 - a / a_prev
        variance = (1 - a_prev) / (1 - a) * current_beta_t
        return torch.clamp(variance, min=1e-20)

    def step_output(
        self, model_output: Tensor, timestep: int | Tensor, sample: Tensor, variance_noise: Tensor | None
    ) -> StepOutput:
        """x_t -> x_{t-1} exactly as `DDPMScheduler.step`; `variance_noise` (shaped like the sample) is the
        z diffusers would draw for t > 0 (required there, ignored at t = 0 where nothing is added)."""
        t = int(timestep)
        prev_t = self.previous_timestep(t)
        a = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one
        beta_prod_t = 1 - a
        beta_prod_t_prev = 1 - a_prev
        current_alpha_t = a / a_prev
        current_beta_t = 1 - current_alpha_t
        x0 = self._clip(self._x0(model_output, sample, a, beta_prod_t))
        x0_coeff = (a_prev ** (0.5) * current_beta_t) / beta_prod_t
        sample_coeff = current_alpha_t ** (0.5) * beta_prod_t_prev / beta_prod_t
        prev = x0_coeff * x0 + sample_coeff * sample
        if t > 0:
            if variance_noise is None:
                raise ValueError(
                    f"DDPM adds variance noise at timestep {t} > 0: pass variance_noise (shaped like the "
                    "sample); hotloop never draws it from torch's global RNG"
                )
            prev = prev + (self._variance(t, prev_t) ** 0.5) * variance_noise
        else:
            prev = prev + 0  # diffusers adds the integer 0 at t = 0 (turns -0.0 into 0.0)
        return StepOutput(prev, x0)

    def _row(self, t: int, prev_t: int) -> dict[str, Tensor]:
        a = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one
        beta_prod_t = 1 - a
        current_alpha_t = a / a_prev
        current_beta_t = 1 - current_alpha_t
        row = self._x0_row(a, beta_prod_t)
        row["clip"] = self._clip_value()
        row["mean_x0"] = (a_prev ** (0.5) * current_beta_t) / beta_prod_t
        row["mean_sample"] = current_alpha_t ** (0.5) * (1 - a_prev) / beta_prod_t
        row["noise_std"] = self._variance(t, prev_t) ** 0.5 if t > 0 else torch.zeros(())
        return row


class DDIMScheduler(_Scheduler):
    """diffusers' DDIMScheduler: set_alpha_to_one True, "leading" timesteps, eta as LeRobot leaves it (0)."""

    kind: SchedulerKind = "DDIM"

    def __init__(self, *schedule: Any, eta: float = 0.0, **schedule_fields: Any) -> None:
        """The schedule's arguments (`_Scheduler`'s, in its order), and `eta`: the noise diffusers' DDIM step
        adds (LeRobot calls it with none: 0)."""
        super().__init__(*schedule, **schedule_fields)
        if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not math.isfinite(eta) or eta < 0:
            raise ConfigError(f"noise scheduler: field 'eta' is {eta!r}; it must be a finite number >= 0")
        self.eta = float(eta)  # LeRobot calls step() without eta: 0, deterministic
        self.final_alpha_cumprod = self.one  # set_alpha_to_one=True

    def previous_timestep(self, t: int) -> int:
        if self.num_inference_steps is None:
            raise ValueError("DDIM needs set_timesteps() before step(), as in diffusers")
        return t - self.num_train_timesteps // self.num_inference_steps

    def _prev(self, timesteps: list[int], index: int, num_inference_steps: int) -> int:
        return timesteps[index] - self.num_train_timesteps // num_inference_steps

    def _alphas(self, t: int, prev_t: int) -> tuple[Tensor, Tensor]:
        a = self.alphas_cumprod[t]
        return a, (self.alphas_cumprod[prev_t] if prev_t >= 0 else self.final_alpha_cumprod)

    def _std(self, t: int, prev_t: int) -> Tensor:
        a, a_prev = self._alphas(t, prev_t)
        beta_prod_t, beta_prod_t_prev = 1 - a, 1 - a_prev
        variance = (beta_prod_t_prev / beta_prod_t) * (1 - a / a_prev)
        return self.eta * variance ** (0.5)

    def step_output(
        self, model_output: Tensor, timestep: int | Tensor, sample: Tensor, variance_noise: Tensor | None
    ) -> StepOutput:
        """x_t -> x_prev exactly as `DDIMScheduler.step(eta=self.eta)`; the noise is used only if eta > 0."""
        t = int(timestep)
        prev_t = self.previous_timestep(t)
        a, a_prev = self._alphas(t, prev_t)
        beta_prod_t = 1 - a
        x0 = self._x0(model_output, sample, a, beta_prod_t)
        if self.prediction_type == "epsilon":
            eps = model_output
        elif self.prediction_type == "sample":
            eps = (sample - a ** (0.5) * x0) / beta_prod_t ** (0.5)  # from the unclipped x0
        else:
            eps = (a**0.5) * model_output + (beta_prod_t**0.5) * sample
        x0 = self._clip(x0)
        std_dev_t = self._std(t, prev_t)
        direction = (1 - a_prev - std_dev_t**2) ** (0.5) * eps
        prev = a_prev ** (0.5) * x0 + direction
        if self.eta > 0:
            if variance_noise is None:
                raise ValueError("DDIM with eta > 0 adds variance noise: pass variance_noise")
            prev = prev + std_dev_t * variance_noise
        return StepOutput(prev, x0)

    def _row(self, t: int, prev_t: int) -> dict[str, Tensor]:
        a, a_prev = self._alphas(t, prev_t)
        beta_prod_t = 1 - a
        one, zero = torch.ones(()), torch.zeros(())
        row = self._x0_row(a, beta_prod_t)
        # eps = (eps_sample * sample - eps_model * model_output) / eps_div
        if self.prediction_type == "epsilon":
            row.update(eps_sample=zero, eps_model=-one, eps_div=one)
        elif self.prediction_type == "sample":
            row.update(eps_sample=one, eps_model=a ** (0.5), eps_div=beta_prod_t ** (0.5))
        else:
            row.update(eps_sample=beta_prod_t**0.5, eps_model=-(a**0.5), eps_div=one)
        std_dev_t = self._std(t, prev_t)
        row["clip"] = self._clip_value()
        row["prev_x0"] = a_prev ** (0.5)
        row["prev_eps"] = (1 - a_prev - std_dev_t**2) ** (0.5)
        row["noise_std"] = std_dev_t if self.eta > 0 else torch.zeros(())
        return row


Scheduler = DDPMScheduler | DDIMScheduler


def make_scheduler(
    kind: str,
    *,
    num_train_timesteps: int,
    beta_start: float,
    beta_end: float,
    beta_schedule: str,
    clip_sample: bool,
    clip_sample_range: float,
    prediction_type: str,
) -> Scheduler:
    """LeRobot's `_make_noise_scheduler`: "DDPM" or "DDIM" with the arguments LeRobot passes."""
    args = (num_train_timesteps, beta_start, beta_end, beta_schedule, clip_sample, clip_sample_range)
    if kind == "DDPM":
        return DDPMScheduler(*args, prediction_type)
    if kind == "DDIM":
        return DDIMScheduler(*args, prediction_type)
    raise ConfigError(
        f"noise scheduler: field 'noise_scheduler_type' is {kind!r}; hotloop implements "
        f"{', '.join(SCHEDULER_KINDS)} (LeRobot's choices)"
    )


def table_row(table: dict[str, Tensor], index: int) -> dict[str, Tensor]:
    """Row `index` of a `step_table` (0-d tensors), without the int64 "timestep"."""
    return {key: value[index] for key, value in table.items() if key != "timestep"}


def table_step(
    row: dict[str, Tensor], model_output: Tensor, sample: Tensor, variance_noise: Tensor | None = None
) -> Tensor:
    """One scheduler step from a `step_table` row: pure tensor arithmetic, traceable.

    The row's keys (fixed per scheduler, so Python branching on them is static) say DDPM or DDIM. DDPM
    rows need `variance_noise` (its std is 0 in the last row, where the noise is multiplied away); DDIM
    rows use it only when given (std 0 at eta 0).
    """
    x0 = (row["x0_sample"] * sample - row["x0_model"] * model_output) / row["x0_div"]
    x0 = torch.clamp(x0, min=-row["clip"], max=row["clip"])
    if "mean_x0" in row:  # DDPM
        if variance_noise is None:
            raise ValueError("a DDPM table step needs variance_noise (shaped like the sample)")
        prev = row["mean_x0"] * x0 + row["mean_sample"] * sample
        return prev + row["noise_std"] * variance_noise
    eps = (row["eps_sample"] * sample - row["eps_model"] * model_output) / row["eps_div"]
    prev = row["prev_x0"] * x0 + row["prev_eps"] * eps
    if variance_noise is not None:
        prev = prev + row["noise_std"] * variance_noise
    return prev


__all__ = [
    "BETA_SCHEDULES",
    "DDIMScheduler",
    "DDPMScheduler",
    "PREDICTION_TYPES",
    "SCHEDULER_KINDS",
    "Scheduler",
    "StepOutput",
    "make_betas",
    "make_scheduler",
    "table_row",
    "table_step",
]
