"""Record scripted-expert episodes of a task into a LeRobot v3-layout dataset."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from hotloop.sim.dataset import DatasetWriter
from hotloop.sim.tasks import make_expert, make_task
from hotloop.sim.tasks.gantry import ACTION_NAMES, STATE_NAMES


def record(
    task: str,
    episodes: int,
    out: str | Path,
    *,
    difficulty: str | None = None,
    seed: int = 0,
    image_size: int | None = None,
    action_noise: float = 0.0,
    wide_start: bool = False,
    progress: Callable[[int, bool], None] | None = None,
) -> dict[str, float]:
    """Run the expert for `episodes` episodes (seeds seed, seed+1, ...) and write them all to `out`.

    `action_noise` > 0 perturbs the *executed* xyz target with Gaussian noise of that std (metres) while
    the recorded label stays the expert's clean action (DART): the data then shows how to recover from
    small errors, which a learned policy will make. Every episode is written with its `success` flag and `seed` in meta/episodes; readers that train
    filter on success. Returns {"episodes", "successes", "success_rate", "frames"}.
    """
    env = make_task(task, difficulty=difficulty, image_size=image_size)
    expert = make_expert(task, env)
    size = env.config.image_size
    writer = DatasetWriter(
        out,
        fps=env.config.control_hz,
        robot_type="hotloop-gantry",
        state_names=STATE_NAMES,
        action_names=ACTION_NAMES,
        image_keys=["top"],
        image_shape=(size, size, 3),
    )
    successes = frames = 0
    try:
        for i in range(episodes):
            episode_seed = seed + i
            noise_rng = np.random.default_rng([episode_seed, 0xDA7])
            options = None
            if wide_start and i % 2 == 1:
                # Every other episode starts the gripper anywhere, upstream of the box included, so the
                # data shows chasing a box that has passed: the state a late policy finds itself in.
                options = {
                    "home": [
                        noise_rng.uniform(-0.45, 0.3),
                        noise_rng.uniform(-0.12, 0.12),
                        noise_rng.uniform(0.1, 0.25),
                    ]
                }
            obs, info = env.reset(seed=episode_seed, options=options)
            expert.reset()
            success = False
            while not env.timed_out:
                action = expert.act(obs)
                writer.add_frame(obs, action)
                frames += 1
                executed = action.copy()
                if action_noise > 0:
                    executed[:3] += noise_rng.normal(0.0, action_noise, 3)
                success, failed = env.advance(executed, env.config.ticks_per_control)
                if success or failed:
                    break
                obs = env.observe()
            successes += int(success)
            writer.end_episode(env.prompt, success=bool(success), seed=episode_seed, **env.info())
            if progress is not None:
                progress(i, success)
        writer.finish(
            extra_info={
                "recorder": {
                    "task": task,
                    "difficulty": difficulty,
                    "seed": seed,
                    "action_noise": action_noise,
                    "wide_start": wide_start,
                    "expert": type(expert).__name__,
                }
            }
        )
    finally:
        env.close()
    return {
        "episodes": episodes,
        "successes": successes,
        "success_rate": successes / max(episodes, 1),
        "frames": frames,
    }
