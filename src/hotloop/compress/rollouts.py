"""Observations along the teacher's own closed-loop episodes, for distilling a demo policy.

Start-of-episode observations (one per seed) cover only the moment before the gantry moves; the states
the policy meets later (descending, grasping, carrying) are absent from them, so a student trained on them
alone is free to drift there. Rolling the fp32 teacher out in the task (sync, zero latency, simulated
time) yields every observation it answers during an episode, which is the distribution the student will
be judged on. Seeds come from their own range (`ROLLOUT_SEED_BASE`), apart from the evaluation's 0..N.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hotloop.errors import ConfigError
from hotloop.policy import PolicyWrapper

ROLLOUT_SEED_BASE = 500_000  # far from `hotloop eval`'s default seeds 0.. and the demo's training seeds


@dataclass(frozen=True)
class RolloutSet:
    obs: Any  # every observation the teacher answered, in episode order (its family's type)
    episodes: int
    successes: int
    seeds: tuple[int, int]  # first and last seed
    count: int  # observations in `obs`

    def manifest_entry(self) -> dict[str, Any]:
        return {
            "source": "teacher rollouts (sync, fixed:0)",
            "episodes": self.episodes,
            "successes": self.successes,
            "observations": self.count,
            "seeds": list(self.seeds),
        }


class _Recording(PolicyWrapper):
    """The demo policy, recording the model observation of every inference it answers."""

    def __init__(self, demo: Any, store: list[Any]) -> None:
        super().__init__(demo)
        self.store = store

    def infer(self, obs: dict[str, Any], timer: Any = None) -> dict[str, Any]:
        self.store.append(self.inner.pi.observation(self.inner.model_inputs(obs)))
        return self.inner.infer(obs)  # type: ignore[no-any-return]


def rollout_observations(demo: Any, task: str, episodes: int, seed: int, family: Any) -> RolloutSet:
    """Run `episodes` closed-loop episodes of the demo policy `demo` (its own `num_steps`) from seeds
    `ROLLOUT_SEED_BASE + seed + i` and return the observations it answered (batched by `family`)."""
    from hotloop.closedloop.evaluator import run_episode
    from hotloop.closedloop.latency import parse_latency
    from hotloop.demos.conveyor_vision import make_demo_task
    from hotloop.realtime.strategies import StrategyConfig, make_strategy

    if episodes < 1:
        raise ConfigError(f"--distill-episodes must be >= 1 to roll the teacher out (got {episodes})")
    env = make_demo_task(demo.meta, task)  # rendering the views the policy reads
    store: list[Any] = []
    policy = _Recording(demo, store)
    latency = parse_latency("fixed:0")
    first = ROLLOUT_SEED_BASE + seed
    wins = 0
    try:
        for i in range(episodes):
            record = run_episode(
                env, policy, lambda h: make_strategy("sync", StrategyConfig(h)), latency, first + i
            )
            wins += int(record["success"])
    finally:
        env.close()
    return RolloutSet(family.stack(store), episodes, wins, (first, first + episodes - 1), len(store))


__all__ = ["ROLLOUT_SEED_BASE", "RolloutSet", "rollout_observations"]
