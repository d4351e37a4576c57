"""Frame time of our MuJoCo views of a gym: env, with shadows/anti-aliasing off (the default) and on.

    MUJOCO_GL=egl python benchmarks/gym_render.py [--task gym:FetchPickAndPlace-v4] [--size 64] [--frames 200]

Prints ms per frame (median of `--frames` renders after 10 warm-up frames) for each setting and writes
them, with the machine fingerprint, to `--json` (default gym_render.json). Run on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from hotloop.measure.fingerprint import machine_fingerprint
from hotloop.sim.tasks import make_task
from hotloop.sim.tasks.mj_views import MujocoViews


def frame_ms(views: MujocoViews, frames: int) -> float:
    for _ in range(10):
        views.render()
    times = []
    for _ in range(frames):
        t0 = time.perf_counter()
        views.render()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="gym:FetchPickAndPlace-v4")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--json", default="gym_render.json")
    args = parser.parse_args()
    results = {}
    for shadows, antialias in ((False, False), (True, True)):
        env = make_task(args.task, image_size=args.size)
        env.reset(seed=0)
        base = env.env.unwrapped
        if antialias:
            base.model.vis.quality.offsamples = 4  # MuJoCo's default, before our renderer is made
        views = MujocoViews(
            base.model, base.data, env._views.views, args.size, shadows=shadows, antialias=antialias
        )
        key = "shadows+antialias" if shadows else "plain (default)"
        results[key] = frame_ms(views, args.frames)
        print(f"{args.task} {args.size}px {key}: {results[key]:.2f} ms/frame")
        views.close()
        env.close()
    out = {"task": args.task, "size": args.size, "ms_per_frame": results, "env": machine_fingerprint(None)}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
