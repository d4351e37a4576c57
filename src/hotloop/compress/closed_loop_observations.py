"""The observations a policy meets when it drives its task itself, recorded at the model's input.

`onestep`'s on-policy rounds (docs/onestep.md) need the states the *student* visits: a student taught only
where the teacher goes drifts where it goes itself. The episodes are played by `hotloop eval`'s own
episode runner (the target's policy, adapted to the task as eval adapts it, simulated latency), with the
student's weights loaded into that policy's model and its step count; every model observation the policy
computes is kept. Works for any target whose policy holds its model as `.model` and builds model inputs
in `.observation` (SmolVLA checkpoints, pi policies, Diffusion policies, whose `.observation()` reads
their history; a pi demo wraps its pi policy as `.pi`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from hotloop.compress.rollouts import ROLLOUT_SEED_BASE
from hotloop.errors import ConfigError, HotloopError


def _model_policy(policy: Any) -> Any:
    inner = getattr(policy, "pi", policy)
    if not hasattr(inner, "model") or not hasattr(inner, "observation"):
        raise ConfigError(
            f"{type(policy).__name__} does not expose its model and observations; the student's own "
            "closed-loop rounds need a SmolVLA or pi policy (use --onestep-rounds 1)"
        )
    return inner


@dataclass(frozen=True)
class StartingAtZero:
    """Weights played from x = 0 (a candidate after the recipe step `zero-noise`): the target's policy draws
    its start, the plan being judged does not."""

    weights: Any


def policy_weights(model: Any, reshaped: bool, zero_noise: bool = False) -> Any:
    """What `closed_loop_observations` loads into the target's policy: the state dict, or (`reshaped`: a
    model whose config differs from the target's, e.g. after `vision-res`) the model itself; wrapped in
    `StartingAtZero` when the candidate samples from x = 0."""
    weights = model if reshaped else model.state_dict()
    return StartingAtZero(weights) if zero_noise else weights


def start_at_zero(policy: Any) -> None:
    """`policy` (a SmolVLA policy, a Diffusion or compiled pi policy) samples from x = 0 from now on."""
    settings = getattr(policy, "settings", None)
    if dataclasses.is_dataclass(settings) and hasattr(settings, "zero_noise"):
        policy.settings = dataclasses.replace(settings, zero_noise=True)  # type: ignore[type-var]
    elif hasattr(policy, "zero_noise"):
        policy.zero_noise = True
    else:
        raise ConfigError(
            f"{type(policy).__name__} cannot start its sampler at x = 0 (recipe step zero-noise)"
        )


def successes(runner: Any, seeds: range) -> int:
    """How many episodes of `seeds` `runner` (eval's `EpisodeRunner`) plays to success. An episode that
    raised is an error, never a failure (docs/closed-loop.md): it stops the count, naming the seed."""
    wins = 0
    for seed in seeds:
        record = runner.run(seed)
        if record.get("error"):
            raise HotloopError(f"closed-loop episode seed {seed} raised: {record['error']}")
        wins += int(bool(record.get("success")))
    return wins


def load_weights(policy: Any, weights: dict[str, Any] | torch.nn.Module | StartingAtZero | None) -> Any:
    """Put `weights` into the model `policy` runs (a state dict loaded, or a model of another config, e.g.
    after `vision-res`, swapped in with its config; `StartingAtZero`: those, sampled from x = 0); None
    leaves the target's own. Returns the policy that holds the model (a pi demo's `.pi`)."""
    inner = _model_policy(policy)
    if isinstance(weights, StartingAtZero):
        start_at_zero(inner)
        weights = weights.weights
    if isinstance(weights, torch.nn.Module):
        inner.model = weights
        if hasattr(inner, "config") and hasattr(weights, "cfg"):
            inner.config = weights.cfg  # the policy prepares its images at the model's size
    elif weights is not None:
        inner.model.load_state_dict(weights)
    return inner


class _Observed(Exception):
    """Raised by the recording hook once it has the model observation of a frame that is only observed:
    the policy's preprocessing ran, its model does not."""


def closed_loop_observations(
    target: str,
    task: str,
    family: Any,
    episodes: int,
    first_seed: int,
    num_steps: int | None,
    weights: dict[str, Any] | torch.nn.Module | StartingAtZero | None = None,
    condition: tuple[str, str] = ("sync", "fixed:0"),
    every_period: bool = False,
) -> tuple[Any, int]:
    """(every model observation of `episodes` episodes from seeds `ROLLOUT_SEED_BASE + first_seed` on,
    batched by `family`; how many succeeded). `weights`: a state dict loaded into the policy's model, or
    a model put in its place with its config (None: the target's own); `num_steps`: the policy's
    denoising steps (None: its own). `every_period`: the observation
    at every control period instead of those the policy was asked about: under `async` at 200 ms an
    episode asks for 3 to 5 chunks, yet each period's state is one a chunk may start from (another
    phase of the trigger, another delay), and each is a state that execution met."""
    from hotloop.closedloop.workers import EpisodeJob, EpisodeRunner

    if episodes < 1:
        raise ConfigError(f"--distill-episodes must be >= 1 to roll a policy out (got {episodes})")
    strategy, latency = condition
    runner = EpisodeRunner(EpisodeJob(target, task, None, strategy, latency, num_steps=num_steps))
    store: list[Any] = []
    observing = False  # True while a frame is only observed (`every_period`)
    try:
        inner = load_weights(runner.policy.policy, weights)
        observe = inner.observation

        def recording(*args: Any) -> Any:  # a Diffusion policy builds its model input from its history
            model_obs = observe(*args)
            if every_period and not observing:
                return model_obs  # an inference: its frame was recorded as the period's
            store.append(model_obs)
            if observing:
                raise _Observed
            return model_obs

        inner.observation = recording
        if every_period:
            policy = runner.policy

            def on_frame(frame: dict[str, Any]) -> None:
                nonlocal observing
                observing = True
                try:
                    policy.infer(frame)  # the task's observation through the adapter and the policy's own
                except _Observed:  # preprocessing, up to the model observation (recorded)
                    pass
                finally:
                    observing = False

            # the episode runner's camera-rate hook (a perception pipeline's): a frame every control period
            policy.frame_ticks = runner.env.config.ticks_per_control
            policy.on_frame = on_frame
        wins = successes(
            runner, range(ROLLOUT_SEED_BASE + first_seed, ROLLOUT_SEED_BASE + first_seed + episodes)
        )
    finally:
        runner.close()
    if not store:
        raise ConfigError(f"{target}: its closed-loop episodes asked for no inference; nothing to learn from")
    return family.stack(store), wins


__all__ = [
    "StartingAtZero",
    "closed_loop_observations",
    "load_weights",
    "policy_weights",
    "start_at_zero",
    "successes",
]
