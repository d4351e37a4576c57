"""Record scripted-expert episodes of a task into a LeRobot v3-layout dataset."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.datasets.lerobot_v3 import DatasetWriter
from hotloop.errors import ConfigError, HotloopError
from hotloop.sim.perturb import parse_perturb, perturb_env
from hotloop.sim.tasks import make_expert, make_task
from hotloop.sim.tasks.conveyor import ConveyorPickEnv
from hotloop.sim.tasks.gym_task import success_note
from hotloop.sim.tasks.protocol import TaskFault, check_observation, start_digest
from hotloop.targets import MAX_SEED


def recovery_start(env: object, rng: np.random.Generator) -> dict[str, object] | None:
    """Reset options that start an episode where a policy lands after a mistake.

    From its normal start the expert meets the box head-on, so its data never shows a box that has
    slipped past the gripper, or a gripper low beside the box: a policy that misses a grasp then has no
    example of what to do and stalls (the failure mode of the demo policy's earlier versions). For
    conveyor-pick the gripper starts anywhere and the box anywhere along the belt; the expert's
    recovery (chase, rise, realign) is what gets recorded. Other tasks: none (a normal start).
    """
    if not isinstance(env, ConveyorPickEnv):
        return None
    box_x = rng.uniform(env.task_config.start_x[0], 0.2)
    home = np.array([rng.uniform(-0.45, 0.4), rng.uniform(-0.12, 0.12), rng.uniform(0.09, 0.25)])
    if abs(home[0] - box_x) < 0.08 and home[2] < 0.15:  # not inside the box
        home[2] = 0.15
    return {"home": home.tolist(), "box_x": float(box_x)}


def check_record_options(
    *,
    seed: int,
    action_noise: float,
    recovery_starts: float,
    image_size: int | None = None,
    perturb: str | None = None,
) -> None:
    """The numbers `record` takes, checked before anything runs (NaN would reach meta/info.json)."""
    if perturb is not None:
        check_record_perturb(perturb)
    if image_size is not None and not 16 <= image_size <= 512:
        raise ConfigError(f"--image-size must be in [16, 512] pixels (got {image_size})")
    if not 0.0 <= recovery_starts <= 1.0:
        raise ConfigError(f"--recovery-starts is a fraction of episodes, in [0, 1] (got {recovery_starts})")
    if not math.isfinite(action_noise) or action_noise < 0:
        raise ConfigError(f"--action-noise is a std in metres, a finite number >= 0 (got {action_noise})")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"--seed must be an integer from 0 to {MAX_SEED} (got {seed!r})")


def check_record_perturb(spec: str) -> None:
    """`--perturb` for a recording: eval's grammar and ranges (`parse_perturb`), less `latency-jitter`."""
    for p in parse_perturb(spec):
        if p.kind == "time":
            raise ConfigError(
                f"--perturb {p.spec()}: {p.name} delays a policy's inference in `hotloop eval`; record runs the "
                "scripted expert in lockstep with the simulation, so there is no inference to delay (a stale "
                "camera is drop-frames); drop it here"
            )


def record(
    task: str,
    episodes: int,
    out: str | Path,
    *,
    difficulty: str | None = None,
    seed: int = 0,
    image_size: int | None = None,
    action_noise: float = 0.0,
    recovery_starts: float = 0.0,
    progress: Callable[[int, bool], None] | None = None,
    stop: Callable[[], bool] | None = None,
    task_kwargs: str | None = None,
    views: tuple[str, ...] | None = None,
    perturb: str | None = None,
) -> dict[str, Any]:
    """Run the expert for `episodes` episodes (seeds seed, seed+1, ...) and write them all to `out`.

    `action_noise` > 0 perturbs the *executed* xyz target with Gaussian noise of that std (metres) while
    the recorded label stays the expert's clean action (DART): the data then shows how to recover from
    small errors, which a learned policy will make. The label is the action as the task executes it,
    clipped to its action space (whose bounds meta/info.json keeps as `action_bounds`), so a policy
    learns what was done rather than a target the task never reached for. A `recovery_starts` fraction of the episodes start
    in a state a normal run rarely visits (see `recovery_start`). Every episode is written with its
    `success` flag, `seed` and `reset_options` in meta/episodes; readers that train filter on success.
    `stop()` is asked before each episode: True ends the recording early and writes the finished ones.
    `task_kwargs` (a JSON object) go to `gym:` and plugin tasks; action noise is in the task's units.
    `views`: the camera views a built-in task records (default: its own, the top view).
    `perturb` (`NAME:VALUE,...`, `hotloop.sim.perturb`): scene perturbations change the world of each
    episode exactly as `hotloop eval --perturb` does for the same seed; sensor ones change the state and
    images that are stored (what the robot's sensors would have delivered), while the expert acts on the
    clean observation and the simulator's truth, so the labels stay right (`latency-jitter` is refused).
    Returns {"episodes" (recorded), "successes", "success_rate", "frames", "stopped", "duplicate_starts"
    (episodes that began in the start state of an earlier one: repeats, not new data), "success_note" (a
    gymnasium env that never reported success under a key hotloop reads, else None)}.
    A non-finite observation stops the recording with a one-line error naming the episode (the task is
    at fault; nothing is written).
    """
    check_record_options(
        seed=seed,
        action_noise=action_noise,
        recovery_starts=recovery_starts,
        image_size=image_size,
        perturb=perturb,
    )
    env = make_task(task, difficulty=difficulty, image_size=image_size, task_kwargs=task_kwargs, views=views)
    if getattr(env, "profile_note", None):  # a gymnasium env hotloop has no profile for: what is assumed
        print(env.profile_note, file=sys.stderr)
    try:
        # Before the expert (which may cache the model) and before any episode: a scene perturbation the
        # task cannot take fails here, with nothing written.
        perturber = perturb_env(env, perturb) if perturb else None
    except Exception:
        env.close()
        raise
    expert = make_expert(task, env)
    spec = env.task_spec  # names, views and rate of whatever task this is (gantry, gym:, plugin)
    shapes = {(i.height, i.width) for i in spec.images}
    if len(shapes) > 1:
        raise ConfigError(
            f"task {task!r} renders views of different sizes {sorted(shapes)}; record needs one size"
        )
    height, width = shapes.pop() if shapes else (0, 0)
    writer = DatasetWriter(
        out,
        fps=env.config.control_hz,
        robot_type=spec.robot_type,
        state_names=list(spec.state_names),
        action_names=list(spec.action_names),
        image_keys=[i.key for i in spec.images],
        image_shape=(height, width, 3),
    )
    low = np.asarray(env.action_space.low, dtype=np.float64)
    high = np.asarray(env.action_space.high, dtype=np.float64)
    successes = frames = 0
    reports: list[dict[str, Any]] = []  # a gymnasium env's: did it say success where we read it?
    starts: set[str] = set()
    duplicates = 0
    try:
        for i in range(episodes):
            if stop is not None and stop():
                episodes = i  # the rest were never started: write the finished ones
                break
            episode_seed = seed + i
            noise_rng = np.random.default_rng([episode_seed, 0xDA7])
            start_rng = np.random.default_rng([episode_seed, 0x5747])  # apart: noise draws stay the same
            options = recovery_start(env, start_rng) if start_rng.random() < recovery_starts else None
            try:
                obs, info = env.reset(seed=episode_seed, options=options)
                check_observation(obs, task, 0)
                digest = start_digest(obs)
                duplicates += int(digest in starts)
                starts.add(digest)
                expert.reset()
                success = False
                while not env.timed_out:
                    action = np.clip(np.asarray(expert.act(obs), dtype=np.float64), low, high)
                    # The label: the clean action as the task executes it, beside what the robot's
                    # (perturbed) sensors would have delivered; the expert acted on the clean observation.
                    writer.add_frame(obs if perturber is None else perturber.observe(obs), action)
                    frames += 1
                    executed = action.copy()
                    if action_noise > 0:
                        xyz = min(3, len(executed))  # the position part of the target
                        executed[:xyz] += noise_rng.normal(0.0, action_noise, 3)[:xyz]
                    success, failed = env.advance(executed, env.config.ticks_per_control)
                    if success or failed:
                        break
                    obs = check_observation(env.observe(), task, env.tick)
            except TaskFault as e:
                raise HotloopError(f"episode seed {episode_seed}: {e}; nothing was written") from None
            successes += int(success)
            if hasattr(env, "success_report"):
                reports.append({"success_report": env.success_report()})
            writer.end_episode(
                env.prompt,
                success=bool(success),
                seed=episode_seed,
                # reset(seed=seed, options=json.loads(reset_options or "null")) replays the episode
                reset_options=json.dumps(options) if options else "",
                **env.info(),
            )
            if progress is not None:
                progress(i, success)
        writer.finish(
            extra_info={
                # What the labels were clipped to (the task's action space), per action name.
                "action_bounds": {
                    "names": list(spec.action_names),
                    "low": [float(v) for v in low],
                    "high": [float(v) for v in high],
                },
                "recorder": {
                    "task": task,
                    "task_kwargs": task_kwargs,
                    "difficulty": difficulty,
                    "seed": seed,
                    "action_noise": action_noise,
                    "recovery_starts": recovery_starts,
                    "expert": type(expert).__name__,
                    "image_size": image_size,
                    "duplicate_starts": duplicates,
                    # How a calibration or distillation set was made: `hotloop eval --perturb` with this
                    # spec and the same seeds meets the same scenes.
                    "perturb": perturber.describe()["spec"] if perturber is not None else None,
                },
            }
        )
    finally:
        env.close()
    return {
        "episodes": episodes,
        "successes": successes,
        "success_rate": successes / max(episodes, 1),
        "frames": frames,
        "stopped": stop is not None and stop(),
        "duplicate_starts": duplicates,
        "success_note": success_note(reports, task),
    }
