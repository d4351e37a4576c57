"""Raw LeRobot batches rendered from conveyor-pick at ANY checkpoint's camera sizes (for `--calibration`).

A checkpoint trained on a real robot has real frames to calibrate on: its LeRobot dataset (`hotloop
compile CKPT --calibration DATASET`) or raw batches dumped beside the robot. A checkpoint with no data of
its own — the peer's random-weight ACT at its published size (two 480x640 cameras, a 6-d state) — has
none, and calibrating on noise would prove nothing. This script gives it real images instead: the
scripted expert runs conveyor-pick episodes, and every few control steps each of the checkpoint's
cameras is rendered at that camera's own height and width (its first camera from the top view, its
second from the wrist, cycling for more). The state is the task's state (end-effector xyz, grip opening,
box position and velocity) cut or zero-padded to the checkpoint's width: the images are real, the state
is only plausible, which is what a random-weight checkpoint can be judged on.

    python benchmarks/sim_raw_batches.py CKPT -o FRAMES [--episodes 12] [--every 4] [--seed 1000]
    hotloop compile CKPT -o ART --calibration FRAMES --precisions fp32,int8 ...

Writes one `frame_EEEE_TTT.npz` per frame, under LeRobot's batch keys: `observation.images.<view>` as
(3, H, W) floats in [0, 1], `observation.state`, and `task` when --task is given.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SIM_VIEWS = ("top", "wrist")


def checkpoint_inputs(ckpt: Path) -> tuple[dict[str, tuple[int, int]], int | None]:
    """{image key: (H, W)} and the state width from the checkpoint's config.json."""
    features = json.loads((ckpt / "config.json").read_text())["input_features"]
    images = {
        k: (int(f["shape"][1]), int(f["shape"][2])) for k, f in features.items() if f["type"] == "VISUAL"
    }
    state = features.get("observation.state")
    return images, (int(state["shape"][0]) if state else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--episodes", type=int, default=12)
    ap.add_argument("--every", type=int, default=4, help="render every Nth control step")
    ap.add_argument("--seed", type=int, default=1000, help="first episode seed (evaluation uses 0-199)")
    ap.add_argument("--task", default=None, help="the prompt written with every frame (VLA checkpoints)")
    args = ap.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        raise SystemExit(f"-o {args.out} is not empty; give a new folder")
    images, state_dim = checkpoint_inputs(args.checkpoint)

    from hotloop.sim.mujoco_import import import_mujoco
    from hotloop.sim.tasks import make_expert, make_task

    import_mujoco()
    import mujoco

    env = make_task("conveyor-pick")
    expert = make_expert("conveyor-pick", env)
    height = max((h for h, _ in images.values()), default=1)
    width = max((w for _, w in images.values()), default=1)
    env.model.vis.global_.offheight = max(env.model.vis.global_.offheight, height)
    env.model.vis.global_.offwidth = max(env.model.vis.global_.offwidth, width)
    cameras = {key: SIM_VIEWS[i % len(SIM_VIEWS)] for i, key in enumerate(images)}
    renderers = {key: mujoco.Renderer(env.model, height=h, width=w) for key, (h, w) in images.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    written = 0
    for e in range(args.episodes):
        env.reset(seed=args.seed + e)
        expert.reset()
        t = 0
        while True:
            if t % args.every == 0:
                batch: dict[str, np.ndarray] = {}
                for key, renderer in renderers.items():
                    view = cameras[key]
                    renderer.update_scene(env.data, camera=env.config.camera if view == "top" else "wrist")
                    pixels = np.asarray(renderer.render(), dtype=np.float32) / 255.0
                    batch[key] = pixels.transpose(2, 0, 1)[None]
                if state_dim is not None:
                    s = np.zeros(state_dim, np.float32)
                    sim = env.state()[:state_dim]
                    s[: len(sim)] = sim
                    batch["observation.state"] = s[None]
                if args.task is not None:
                    batch["task"] = np.array([args.task])
                np.savez_compressed(args.out / f"frame_{e:04d}_{t:03d}.npz", **batch)
                written += 1
            success, failed = env.advance(expert.act(), env.config.ticks_per_control)
            t += 1
            if success or failed or env.timed_out:
                break
    views = ", ".join(f"{k} {h}x{w} <- {cameras[k]}" for k, (h, w) in images.items())
    print(f"wrote {written} frames from {args.episodes} episodes to {args.out} ({views}; state {state_dim})")


if __name__ == "__main__":
    main()
