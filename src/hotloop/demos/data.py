"""How the shipped demo policies read recorded frames: their own state transform, the views they read,
relative actions and their shipped norm stats (`hotloop.families.frames.TargetAdapter`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hotloop.families.frames import TargetAdapter


def demo_adapter(target: str, demo: Any) -> TargetAdapter:
    """A demo policy (`demo:conveyor`, `demo:conveyor-vision`): its own state transform, the camera views
    it reads, relative actions and shipped norm stats."""
    from hotloop.demos.conveyor import to_relative
    from hotloop.families.pi.data import padded_chunk, pi_limits
    from hotloop.families.pi.family import PiFamily

    pi = demo.pi
    cfg = pi.config

    def observe(images: dict[str, np.ndarray], state: np.ndarray, task_index: int) -> Any:
        return pi.observation(demo.model_inputs({"images": images, "state": state}))  # type: ignore[no-any-return]

    def targets(chunk: np.ndarray, state: np.ndarray) -> np.ndarray:
        return padded_chunk(pi.norm_stats.normalize(to_relative(chunk, state), "actions"), cfg)

    views = tuple(getattr(demo, "views", ("top",)))  # the vision demo reads top + wrist
    return TargetAdapter(target, observe, targets, 10, 4, views, 3, pi_limits(cfg), PiFamily())


def demo_data(name: str, dataset: Any, options: Any, model: Any = None) -> tuple[Any, TargetAdapter]:
    """(fp32 model, adapter) of a shipped demo policy (its trained weights; `model` is ignored: the
    demo's own is the one its adapter normalises for). `name`: the part after "demo:"."""
    from hotloop.demos.conveyor import build_demo

    target = _qualified(name)
    demo = build_demo(target, options)
    return demo.pi.model.float().eval(), demo_adapter(target, demo)


def task_observations(name: str, options: Any, task: str, count: int) -> list[Any]:
    """One start observation per seed (options.seed + i) of `task`, as the demo's model sees it: the belt
    speed and box position vary between them. `name`: the part after "demo:"."""
    from hotloop.demos.conveyor import build_demo
    from hotloop.demos.conveyor_vision import make_demo_task

    target = _qualified(name)
    demo = build_demo(target, options)
    env = make_demo_task(demo.meta, task)
    observations = []
    try:
        for i in range(count):
            raw, _ = env.reset(seed=options.seed + i)
            observations.append(demo.pi.observation(demo.model_inputs(raw)))
    finally:
        env.close()
    return observations


def _qualified(name: str) -> str:
    return name if name.startswith("demo:") else f"demo:{name}"
