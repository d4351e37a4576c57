"""`expert:scripted`: a task's scripted expert as a policy, so `hotloop eval` can measure it in closed loop.

The expert reads privileged simulator state, so it needs the task itself: the evaluator hands it over
with `bind_task(env)` after building both. Each inference returns one action (horizon 1) planned from
the state at the observation's tick; under latency it is executed late, like any policy's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hotloop.errors import ConfigError


class ExpertPolicy:
    def __init__(self) -> None:
        self.expert: Any = None

    @property
    def reads_images(self) -> bool:
        """Experts read the task's state through the task itself, so the evaluator renders no view for
        them; an expert that does look at `obs["images"]` says `reads_images = True`."""
        return bool(getattr(self.expert, "reads_images", False))

    def bind_task(self, env: Any) -> None:
        from hotloop.sim.tasks import make_expert

        self.expert = make_expert(env.task_name, env)

    def reset(self) -> None:
        if self.expert is not None:
            self.expert.reset()

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        if self.expert is None:
            raise ConfigError("expert:scripted runs only inside `hotloop eval` (it needs the task's state)")
        return {"actions": np.asarray(self.expert.act(obs), dtype=np.float32)[None]}


def build_policy(config_name: str, options: Any) -> ExpertPolicy:
    if config_name != "scripted":
        raise ConfigError(f"unknown expert {config_name!r}; known: scripted")
    options.reject_unsupported(f"expert:{config_name}", set())
    return ExpertPolicy()


def declared_horizon(config_name: str) -> int:
    """One action per inference (see `ExpertPolicy.infer`)."""
    return 1


def build_bench(config_name: str, options: Any) -> Any:
    raise ConfigError(
        "expert:scripted is a simulator expert, not a model: it has nothing to bench; use `hotloop eval`"
    )
