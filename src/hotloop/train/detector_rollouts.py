"""Detector training frames from the chain's own closed loop (DAgger for perception).

The scripted expert's frames (`hotloop.perception.detector_data.render_frames`) show the gripper where the
expert puts it. The policy behind the chain goes elsewhere: it hovers over the box while it decides, its
fingers push the box off the belt's speed, and it waits where the expert never waits. Those frames are
where the first detector was wrong (3.6 mm behind the box on average, p95 10.6 mm, with the gripper
2-5 cm away; docs/perception.md) and where the chain lost its episodes. So the chain itself is run in
closed loop (`demo:conveyor` behind `--pipeline SPEC`, sync, a simulated delay), and every frame its
detector is handed is kept, re-rendered at the training size from the same instant and labelled from
the simulator, exactly as the expert's frames are.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from hotloop.errors import ConfigError


class FrameKeeper:
    """Stands in for the chain's detector: every frame goes on to it unchanged, and the same instant is
    rendered from the top camera at `size` px and kept with its labels."""

    def __init__(self, inner: Any, env: Any, size: int) -> None:
        from hotloop.sim.mujoco_import import import_mujoco

        import_mujoco()
        import mujoco

        from hotloop.perception.box_detector import PinholeCamera

        self.inner = inner
        self.env = env
        calibration = PinholeCamera.from_env(env)  # the nominal camera, at the env's image size
        self.camera = PinholeCamera(calibration.position, calibration.rotation, calibration.fovy_deg, size)
        # The top view's settings are the env's own (its renderer keeps the model's anti-aliasing).
        self._renderer = mujoco.Renderer(env.model, height=size, width=size)
        self.images: list[np.ndarray] = []
        self.centres: list[np.ndarray] = []
        self.boxes: list[np.ndarray] = []
        self.positions: list[np.ndarray] = []

    def detect(self, image: np.ndarray) -> Any:
        from hotloop.perception.detector_data import box_labels
        from hotloop.sim.tasks.conveyor import BOX_HALF

        env = self.env
        self._renderer.update_scene(env.data, camera=env.config.camera)
        pos = env.box_pos()
        centre, bbox = box_labels(self.camera, pos, env.data.xquat[env._box_body].copy(), BOX_HALF)
        self.images.append(np.asarray(self._renderer.render(), dtype=np.uint8).copy())
        self.centres.append(centre)
        self.boxes.append(bbox)
        self.positions.append(np.asarray(pos, dtype=np.float64).copy())
        return self.inner.detect(image)

    def __getattr__(self, name: str) -> Any:  # what the chain reads of its detector (centre_std_m, ...)
        return getattr(self.inner, name)

    def close(self) -> None:
        self._renderer.close()


def check_rollout_pipeline(spec: str) -> None:
    """A chain with a detector whose model loads (a typo fails before any frame is rendered)."""
    from hotloop.perception.learned_detector import load_any
    from hotloop.perception.pipeline import parse_pipeline

    config = parse_pipeline(spec)
    if config.kind != "detector":
        raise ConfigError(f"--rollout-pipeline {spec!r}: give a detector chain, e.g. detector:model=learned")
    if config.model != "colour":
        load_any(None if config.model == "learned" else config.model)


def rollout_frames(
    seeds: range | list[int],
    size: int = 128,
    pipeline: str = "detector:model=learned",
    latency: str = "fixed:50",
    every: int = 1,
    progress: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """(DetectorFrames, summary): every `every`-th frame the chain's detector saw over `seeds`' episodes of
    `demo:conveyor` behind `pipeline`, at `size` px, labelled from the simulator; the summary holds the
    episodes' successes (the chain as it was before this training)."""
    from hotloop.closedloop.workers import EpisodeJob, EpisodeRunner
    from hotloop.perception.detector_data import concat_frames, frames_from_arrays
    from hotloop.progress import Progress
    from hotloop.sim.tasks.conveyor import BOX_HALF
    from hotloop.sim.tasks.gantry import BELT_TOP

    check_rollout_pipeline(pipeline)
    if every < 1:
        raise ConfigError(f"every must be >= 1 (got {every})")
    job = EpisodeJob(
        target="demo:conveyor", task="conveyor-pick", difficulty=None, strategy="sync",
        latency=latency, pipeline=pipeline, threads=1,
    )  # fmt: skip
    runner = EpisodeRunner(job)
    chain = runner.policy
    keeper = FrameKeeper(chain.detector, runner.env, size)
    chain.detector = keeper
    parts, successes, crashed = [], 0, []
    seeds = list(seeds)
    try:
        with Progress(len(seeds), "closed-loop detector frames", "episode", enabled=progress) as bar:
            for seed in seeds:
                start = len(keeper.images)
                record = runner.run(seed)
                if record.get("error"):  # a crash is not a policy failure: counted apart, and said
                    crashed.append(f"seed {seed}: {record['error']}")
                successes += int(bool(record["success"]))
                keep = slice(start, None, every)
                if keeper.images[keep]:
                    parts.append(
                        frames_from_arrays(
                            np.stack(keeper.images[keep]),
                            np.stack(keeper.centres[keep]),
                            np.stack(keeper.boxes[keep]),
                            np.stack(keeper.positions[keep]),
                            keeper.camera,
                            BELT_TOP + BOX_HALF,
                        )  # fmt: skip
                    )
                for buf in (keeper.images, keeper.centres, keeper.boxes, keeper.positions):
                    del buf[start:]
                bar.update(1)
    finally:
        keeper.close()
        runner.close()
    if not parts:
        raise ConfigError(f"--rollouts: the chain's detector saw no frame in {len(seeds)} episodes")
    if crashed:
        print(f"--rollouts: {len(crashed)} episodes crashed (their frames up to the crash are kept): "
              + "; ".join(crashed[:3]), file=sys.stderr)  # fmt: skip
    summary = {
        "episodes": len(seeds), "successes": successes, "errors": len(crashed), "pipeline": pipeline,
        "latency": latency,
    }  # fmt: skip
    return concat_frames(parts), summary
