"""Real-time chunking (RTC): guided inpainting of the next chunk onto the one being executed.

Black, Galliker, Levine, "Real-Time Execution of Action Chunking Flow Policies" (2025), Algorithm 1,
in this package's flow convention (t runs from 1 = noise to 0 = actions, v points toward the noise,
x <- x + dt * v with dt = -1/N). While the robot executes the current chunk, the next one is sampled
with a correction that pulls its prediction of the final actions, x0 = x_t - t * v(x_t), toward the
previous chunk's unexecuted actions Y:

    g = (dx0/dx_t)^T [W * (Y - x0)]                    (one vector-Jacobian product through the model)
    x <- x + dt * (v - w(t) * g),   w(t) = min(beta, (t^2 + (1 - t)^2) / (t (1 - t)))

W is the paper's soft mask over the chunk: 1 on the first d actions (they are executed before the new
chunk arrives, so they must agree with what the robot does), then exponentially decaying weights over
the rest of the overlap with the previous chunk, then 0 where the previous chunk has no actions.
w(t) is the paper's (1 - tau) / (tau r_tau^2) with tau = 1 - t, clipped at beta (5 in the paper).

The guidance travels with the observation, so an openpi-style dict observation (a websocket client's)
carries it as three plain keys: `PREV_ACTIONS_KEY` ((n, action_dim) float32 actions in the robot's
action space, row i meant for the period starting at the observation time + i periods), `DELAY_KEY`
(d, an int) and `MAX_GUIDANCE_WEIGHT_KEY` (beta). A policy that applied them answers `GUIDED_KEY: True`.

A fourth key, `MODE_KEY`, picks how: "guided" (the default when absent: the sampler above) or "prefix"
(training-time action conditioning, `hotloop.families.pi.rtc_prefix`: the first d actions are given to a
model trained to continue them) or "soft-prefix" (the same conditioning over the whole soft mask: the
tail's tokens start part-way along the flow from the executing actions, `soft_prefix_sample_actions`).
A policy that applied a prefix mode answers it in `MODE_KEY` too, so a policy that only knows guidance
cannot be taken for one that conditioned on the prefix. "draft" (`--strategy draft`,
`hotloop.realtime.draft`) sends the same rows as a draft for the policy to check and keep where its model
agrees (with an optional `draft_tolerance`); the answer may then be shorter than the horizon.

A family implements the samplers (pi: `hotloop.families.pi.rtc`); this module holds what the wire, the
scheduler and every family share, and imports torch only inside `model_space_guidance`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor


PREV_ACTIONS_KEY = "rtc_prev_actions"
DELAY_KEY = "rtc_delay"
MAX_GUIDANCE_WEIGHT_KEY = "rtc_max_guidance_weight"
GUIDED_KEY = "rtc_guided"
MODE_KEY = "rtc_mode"
MODES = ("guided", "prefix", "soft-prefix", "draft")

# The clip on the guidance weight (beta): the paper uses 5, LeRobot defaults to 10. On demo:conveyor
# (20 episodes, docs/realtime.md) 20 was the best trade: at 300 ms async's success (15/20) with half its
# chunk jump; 50 smoothed more but lost success at 300 ms (8/20), 100 lost it at 200 ms, 200 diverged.
DEFAULT_MAX_GUIDANCE_WEIGHT = 20.0

# Bounds on what an observation's RTC keys may hold, checked where a request is validated (the server's
# spec check, `guidance_inputs`): a client's 1e30 clip, 3e38 actions or 1e15 delay must be that client's
# error, never an engine fault. Each is far beyond any real use (the clip: 50x the default; actions: robot
# units, metres or radians or pixels; delay and rows: control periods of one chunk) and, on demo:conveyor
# and pi05:tiny at every RTC mode, still samples finite chunks (tests/serve/test_rtc_bounds.py).
MAX_GUIDANCE_WEIGHT = 1000.0
MAX_ACTION_MAGNITUDE = 1e6
MAX_DELAY = 1000
MAX_PREV_ROWS = 1000


def guidance_problem(prev: np.ndarray | None, delay: int | None, max_weight: float | None) -> str | None:
    """What is wrong with an observation's RTC values (`PREV_ACTIONS_KEY` rows, `DELAY_KEY`,
    `MAX_GUIDANCE_WEIGHT_KEY`; None where absent), or None when they are within the bounds above."""
    if prev is not None:
        if prev.ndim != 2 or not 1 <= prev.shape[0] <= MAX_PREV_ROWS:
            rows = "has no rows" if prev.ndim == 2 and prev.shape[0] == 0 else f"has shape {prev.shape}"
            return (
                f"{PREV_ACTIONS_KEY!r} {rows}; send the executing chunk's remaining actions, 1 to "
                f"{MAX_PREV_ROWS} rows (or leave the key out)"
            )
        if prev.size and not np.isfinite(prev).all():
            return f"{PREV_ACTIONS_KEY!r} holds NaN or infinite values; send finite actions"
        peak = float(np.abs(prev).max()) if prev.size else 0.0
        if peak > MAX_ACTION_MAGNITUDE:
            return (
                f"{PREV_ACTIONS_KEY!r} holds {peak:g}; actions in the robot's units are at most "
                f"{MAX_ACTION_MAGNITUDE:g} in size"
            )
    if delay is not None and not 0 <= delay <= MAX_DELAY:
        return f"{DELAY_KEY!r} is {delay}; send the delay in control periods, 0 to {MAX_DELAY}"
    if max_weight is not None and not 0 <= max_weight <= MAX_GUIDANCE_WEIGHT:
        return (
            f"{MAX_GUIDANCE_WEIGHT_KEY!r} is {max_weight:g}; send a guidance clip from 0 to "
            f"{MAX_GUIDANCE_WEIGHT:g} (the paper uses 5, hotloop's default is {DEFAULT_MAX_GUIDANCE_WEIGHT:g})"
        )
    return None


def prefix_weights(delay: int, overlap: int, horizon: int) -> np.ndarray:
    """The soft mask W (horizon,): 1 for i < d, c_i (e^c_i - 1) / (e - 1) with
    c_i = (overlap - i) / (overlap - d + 1) for d <= i < overlap, 0 from `overlap` on."""
    overlap = max(0, min(overlap, horizon))
    d = max(0, min(delay, overlap))
    w = np.zeros(horizon, dtype=np.float64)
    w[:d] = 1.0
    i = np.arange(d, overlap)
    c = (overlap - i) / (overlap - d + 1)
    w[d:overlap] = c * np.expm1(c) / (math.e - 1.0)
    return w


def guidance_weight(t: float, max_weight: float) -> float:
    """min(beta, (t^2 + (1-t)^2) / (t (1-t))) at flow time t in [0, 1] (infinite at the ends: beta)."""
    if t <= 0.0 or t >= 1.0:
        return float(max_weight)
    return float(min(max_weight, (t * t + (1.0 - t) ** 2) / (t * (1.0 - t))))


def guidance_inputs(obs: dict[str, Any]) -> tuple[np.ndarray, int, float] | None:
    """(prev actions (n, D) float32, d, beta) from an observation, or None when it carries none."""
    if PREV_ACTIONS_KEY not in obs:
        return None
    from hotloop.errors import ConfigError

    try:
        prev = np.asarray(obs[PREV_ACTIONS_KEY], dtype=np.float64)
        delay = int(obs.get(DELAY_KEY, 0))
        beta = float(obs.get(MAX_GUIDANCE_WEIGHT_KEY, DEFAULT_MAX_GUIDANCE_WEIGHT))
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(
            f"observation {PREV_ACTIONS_KEY!r}, {DELAY_KEY!r} and {MAX_GUIDANCE_WEIGHT_KEY!r} must be numbers"
        ) from None
    problem = guidance_problem(prev, delay, beta)
    if problem is not None:  # a ConfigError: the input's fault, answered to its sender, never an engine fault
        raise ConfigError(f"observation {problem}")
    return prev.astype(np.float32), delay, beta


def guidance_mode(obs: dict[str, Any]) -> str:
    """The RTC mode an observation asks for: "guided" (also when it names none), "prefix" or "soft-prefix"."""
    mode = obs.get(MODE_KEY, "guided")
    if mode not in MODES:
        from hotloop.errors import ConfigError

        raise ConfigError(f"observation {MODE_KEY!r} must be one of {', '.join(MODES)}; got {mode!r}")
    return str(mode)


def model_space_guidance(
    prev: np.ndarray,
    delay: int,
    horizon: int,
    chunk_size: int,
    max_action_dim: int,
    to_model: Any,
) -> tuple[Tensor, Tensor]:
    """(prev (1, chunk_size, max_action_dim), weights (chunk_size, max_action_dim)) for
    `hotloop.families.pi.rtc.guided_sample_actions` from robot-space actions `prev` (n, D); `to_model` maps (n, D) robot actions
    to normalized model actions. Padded rows and action columns get weight 0."""
    import torch

    n = min(len(prev), horizon)
    target = np.zeros((1, chunk_size, max_action_dim), dtype=np.float32)
    target[0, :n, : prev.shape[1]] = to_model(prev[:n])
    weights = np.zeros((chunk_size, max_action_dim), dtype=np.float32)
    weights[:horizon, : prev.shape[1]] = prefix_weights(delay, n, horizon)[:, None]
    return torch.from_numpy(target), torch.from_numpy(weights)


def rtc_observation_spec(action_dim: int) -> dict[str, Any]:
    """The RTC keys a policy that applies them accepts (`hotloop.policy_spec.ArraySpec`s): the rest of the
    executing chunk (any number of rows), the delay d in control periods, the guidance clip and the mode.
    All optional: a robot sends them only while a chunk is executing."""
    from hotloop.policy_spec import ArraySpec
    from hotloop.realtime.draft import TOLERANCE_KEY

    return {
        PREV_ACTIONS_KEY: ArraySpec((-1, action_dim), "float32", optional=True),
        DELAY_KEY: ArraySpec((), "int64", optional=True),
        MAX_GUIDANCE_WEIGHT_KEY: ArraySpec((), "float32", optional=True),
        MODE_KEY: ArraySpec((), "str", optional=True),
        TOLERANCE_KEY: ArraySpec((), "float32", optional=True),
    }
