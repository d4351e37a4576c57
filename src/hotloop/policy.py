"""The policy interface shared by the evaluator, the real-time runners and the policy server.

It matches openpi-client's `BasePolicy` (`infer(obs) -> dict`, `reset()`), so an openpi websocket client
and a local model are interchangeable. Real-time chunking rides on the same call: the observation may
carry `rtc_prev_actions`, `rtc_delay` and `rtc_max_guidance_weight`, and a policy that inpainted its chunk
onto them answers `rtc_guided: True` (`hotloop.realtime.rtc`).

One optional hook: a policy that keeps an observation history (LeRobot's Diffusion Policy: the last
n_obs_steps observations, one per control step) defines `observe(obs) -> None`. The control loop
(`hotloop.realtime.runner.run_loop`, which the closed-loop evaluator and a robot's runner share) then
calls it with every control period's observation, before any `infer` of that period, and `infer` reads
the history as it stands. Policies without it are never called more often nor observed more than before.

A second optional hook: a policy that draws noise (a flow or diffusion policy's start) defines
`seed_noise(episode_seed) -> None`. The closed-loop evaluator calls it after `reset()` with each episode's
seed, so every episode draws a noise stream of its own, repeatably (`episode_noise_seed`), as the
latency draws are. Without it every episode restarted the policy's one stream: each episode's k-th
inference drew the same noise, and a success rate described that one stream, not the policy (on
demo:conveyor-smolvla at async 200 ms, three streams gave 5, 12 and 20 successes of the same 20 episodes).
Two policies of one target get the same stream for one episode seed, so paired comparisons stay paired.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Policy(Protocol):
    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        """Return at least {"actions": array of shape (horizon, action_dim)} for one observation."""
        ...

    def reset(self) -> None:
        """Forget any episode state (called at the start of every episode)."""
        ...


def episode_noise_seed(policy_seed: int, episode_seed: int) -> int:
    """The seed of a policy's noise for one episode: a function of its own seed and the episode's alone."""
    state = np.random.SeedSequence([abs(int(policy_seed)), abs(int(episode_seed)), 0x5EED]).generate_state(1)
    return int(state[0])


def seed_noise(policy: object, episode_seed: int) -> None:
    """Call `policy`'s `seed_noise` hook (see the module docstring) if it has one."""
    hook = getattr(policy, "seed_noise", None)
    if callable(hook):
        hook(episode_seed)


def observes(policy: object) -> bool:
    """Whether `policy` has the optional `observe(obs)` hook (see the module docstring)."""
    return callable(getattr(policy, "observe", None))


class PolicyWrapper:
    """A policy around another one, `inner`: every attribute the wrapper does not define is the inner
    policy's (its spec, its `observe` hook, ...) and `reset` resets it, so a wrapper states only what it
    changes (usually `infer`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def reset(self) -> None:
        self.inner.reset()
