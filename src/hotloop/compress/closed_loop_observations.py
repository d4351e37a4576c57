"""The observations a policy meets when it drives its task itself, recorded at the model's input.

`onestep`'s on-policy rounds (docs/onestep.md) need the states the *student* visits: a student taught only
where the teacher goes drifts where it goes itself. The episodes are played by `hotloop eval`'s own
episode runner (the target's policy, adapted to the task as eval adapts it, simulated latency), with the
student's weights loaded into that policy's model and its step count; every model observation the policy
computes is kept. Works for any target whose policy holds its model as `.model` and builds model inputs
in `.observation` (SmolVLA checkpoints, pi policies; a pi demo wraps its pi policy as `.pi`).
"""

from __future__ import annotations

from typing import Any

from hotloop.compress.rollouts import ROLLOUT_SEED_BASE
from hotloop.errors import ConfigError

# The executions a student's rounds are played under, in turn: replanning every control period at 0 ms.
# Alternating it with async at 200 ms was tried (docs/onestep.md): async asks for few inferences (102
# observations a round against 636), and that demo:conveyor student lost 11 points at sync 0 ms.
CONDITIONS: tuple[tuple[str, str], ...] = (("sync", "fixed:0"),)


def _model_policy(policy: Any) -> Any:
    inner = getattr(policy, "pi", policy)
    if not hasattr(inner, "model") or not hasattr(inner, "observation"):
        raise ConfigError(
            f"{type(policy).__name__} does not expose its model and observations; the student's own "
            "closed-loop rounds need a SmolVLA or pi policy (use --onestep-rounds 1)"
        )
    return inner


def closed_loop_observations(
    target: str,
    task: str,
    family: Any,
    episodes: int,
    first_seed: int,
    num_steps: int,
    weights: dict[str, Any] | None = None,
    condition: tuple[str, str] = CONDITIONS[0],
) -> tuple[Any, int]:
    """(every model observation of `episodes` episodes from seeds `ROLLOUT_SEED_BASE + first_seed` on,
    batched by `family`; how many succeeded). `weights`: a state dict loaded into the policy's model
    (None: the target's own); `num_steps`: the policy's denoising steps."""
    from hotloop.closedloop.workers import EpisodeJob, EpisodeRunner

    if episodes < 1:
        raise ConfigError(f"--distill-episodes must be >= 1 to roll a policy out (got {episodes})")
    strategy, latency = condition
    runner = EpisodeRunner(EpisodeJob(target, task, None, strategy, latency, num_steps=num_steps))
    store: list[Any] = []
    try:
        inner = _model_policy(runner.policy.policy)
        if weights is not None:
            inner.model.load_state_dict(weights)
        observe = inner.observation

        def recording(obs: Any) -> Any:
            store.append(observe(obs))
            return store[-1]

        inner.observation = recording
        wins = sum(
            int(runner.run(ROLLOUT_SEED_BASE + first_seed + i).get("success", False)) for i in range(episodes)
        )
    finally:
        runner.close()
    if not store:
        raise ConfigError(f"{target}: its closed-loop episodes asked for no inference; nothing to learn from")
    return family.stack(store), wins


__all__ = ["CONDITIONS", "closed_loop_observations"]
