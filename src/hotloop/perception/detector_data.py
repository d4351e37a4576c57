"""Labelled top-camera frames of conveyor-pick for the learned box detector.

The labels are what the simulator knows and a camera calibration turns into pixels: the box's centre
projected through the top camera (`PinholeCamera.project`, the intrinsics and pose read from the MuJoCo
model), and its extent, the bounding rectangle of its eight projected corners (the box's own rotation
from `xquat`, so a tipped or lifted box is labelled right too). Everything is stored in image fractions
(0..1 across the image), so one set of frames labels every input resolution the detector is run at.

Frames come from the scripted expert's episodes (`render_frames`: seeded, the same seeds give the same
frames), with the recorder's recovery starts for a share of them so the gripper and the box are seen all
along the belt and not only where the expert meets the box, or from a dataset `hotloop record` wrote
(`frames_from_dataset`: the box position is in its state; the box is taken as upright there).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError

HELD_OUT_SEED = 50_000  # the first held-out seed (training records from 10_000; evaluation seeds are 0..)
ON_BELT_MM = 3.0  # a box whose centre is within this of the belt plane rides the belt (not lifted)


@dataclass
class DetectorFrames:
    """N labelled frames: images (N, S, S, 3) uint8 and, in image fractions, the box centre (N, 2: column,
    row), its bounding box (N, 4: x0, y0, x1, y1); the box's world position (N, 3); `visible` (the centre
    projects inside the image), `on_belt` (the box rides the belt: its centre error on the belt plane is
    meaningful); the camera calibration the labels were made with (at this image size)."""

    images: np.ndarray
    centre: np.ndarray
    bbox: np.ndarray
    box_pos: np.ndarray
    visible: np.ndarray
    on_belt: np.ndarray
    camera: Any  # PinholeCamera at size S

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def size(self) -> int:
        return int(self.images.shape[1])

    def subset(self, idx: np.ndarray) -> DetectorFrames:
        return DetectorFrames(
            self.images[idx],
            self.centre[idx],
            self.bbox[idx],
            self.box_pos[idx],
            self.visible[idx],
            self.on_belt[idx],
            self.camera,
        )

    def save(self, path: str | Path) -> Path:
        """Write the frames as one compressed .npz (the camera as its calibration numbers)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        cam = self.camera
        np.savez_compressed(
            path,
            images=self.images,
            centre=self.centre,
            bbox=self.bbox,
            box_pos=self.box_pos,
            visible=self.visible,
            on_belt=self.on_belt,
            camera_position=np.asarray(cam.position),
            camera_rotation=np.asarray(cam.rotation),
            camera_fovy=np.asarray(cam.fovy_deg),
        )
        return path


def load_frames(path: str | Path) -> DetectorFrames:
    """Frames written by `DetectorFrames.save` (a .npz) or a dataset `hotloop record` wrote (a folder)."""
    from hotloop.perception.box_detector import PinholeCamera

    path = Path(path)
    if path.is_dir():
        return frames_from_dataset(path)
    if path.suffix != ".npz" or not path.is_file():
        raise ConfigError(
            f"--data {path}: give a frames file (.npz, written by `hotloop train-demo --variant detector`) "
            "or a dataset folder written by `hotloop record --task conveyor-pick`"
        )
    with np.load(path) as z:
        need = {"images", "centre", "bbox", "box_pos", "visible", "on_belt", "camera_position"}
        if not need <= set(z.files):
            raise ConfigError(
                f"--data {path} lacks {', '.join(sorted(need - set(z.files)))}; not a frames file"
            )
        images = z["images"]
        camera = PinholeCamera(
            tuple(float(v) for v in z["camera_position"]),  # type: ignore[arg-type]
            tuple(tuple(float(v) for v in row) for row in z["camera_rotation"]),
            float(z["camera_fovy"]),
            int(images.shape[1]),
        )
        return DetectorFrames(
            images, z["centre"], z["bbox"], z["box_pos"], z["visible"], z["on_belt"], camera
        )


def box_labels(camera: Any, pos: np.ndarray, quat: np.ndarray, half: float) -> tuple[np.ndarray, np.ndarray]:
    """(centre (2,), bbox (4,)) in image fractions of a box of half edge `half` at `pos` rotated by `quat`
    (w, x, y, z); the bbox is clipped to the image."""
    from hotloop.sim.mujoco_import import import_mujoco

    import_mujoco()
    import mujoco

    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, np.asarray(quat, dtype=np.float64))
    signs = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=np.float64)
    corners = pos + (signs * half) @ rot.reshape(3, 3).T
    px = np.array([camera.project(c) for c in corners]) / camera.size
    centre = camera.project(pos) / camera.size
    lo, hi = np.clip(px.min(axis=0), 0.0, 1.0), np.clip(px.max(axis=0), 0.0, 1.0)
    return centre, np.array([lo[0], lo[1], hi[0], hi[1]])


def render_frames(
    seeds: range | list[int],
    size: int = 128,
    difficulty: str = "medium",
    recovery_starts: float = 0.6,
    every: int = 1,
    progress: bool = True,
) -> DetectorFrames:
    """Run the expert on conveyor-pick for each seed (images of `size` px, every `every`-th control step)
    and label each frame from the simulator."""
    from hotloop.datasets.recorder import recovery_start
    from hotloop.perception.box_detector import PinholeCamera
    from hotloop.progress import Progress
    from hotloop.sim.tasks import make_expert, make_task
    from hotloop.sim.tasks.conveyor import BOX_HALF
    from hotloop.sim.tasks.gantry import BELT_TOP

    if every < 1:
        raise ConfigError(f"every must be >= 1 (got {every})")
    env = make_task("conveyor-pick", difficulty=difficulty, image_size=size)
    expert = make_expert("conveyor-pick", env)
    camera = PinholeCamera.from_env(env)
    images, centres, boxes, positions = [], [], [], []
    seeds = list(seeds)
    try:
        with Progress(len(seeds), "render detector frames", "episode", enabled=progress) as bar:
            for seed in seeds:
                rng = np.random.default_rng([seed, 0xDE7EC7])
                options = recovery_start(env, rng) if rng.random() < recovery_starts else None
                obs, _ = env.reset(seed=seed, options=options)
                expert.reset()
                step = 0
                while not env.timed_out:
                    if step % every == 0:
                        pos = env.box_pos()
                        quat = env.data.xquat[env._box_body].copy()
                        centre, bbox = box_labels(camera, pos, quat, BOX_HALF)
                        images.append(obs["images"]["top"])
                        centres.append(centre)
                        boxes.append(bbox)
                        positions.append(pos)
                    success, failed = env.advance(expert.act(obs), env.config.ticks_per_control)
                    if success or failed:
                        break
                    obs = env.observe()
                    step += 1
                bar.update(1)
    finally:
        env.close()
    return frames_from_arrays(np.stack(images), np.stack(centres), np.stack(boxes), np.stack(positions), camera,
                   BELT_TOP + BOX_HALF)  # fmt: skip


def frames_from_dataset(path: Path) -> DetectorFrames:
    """Frames of a conveyor-pick dataset `hotloop record` wrote: the top view, labels from the state's box
    position (an upright box: the recorded state has no box rotation)."""
    from hotloop.datasets.lerobot_v3 import Dataset
    from hotloop.perception.box_detector import PinholeCamera
    from hotloop.sim.tasks import make_task
    from hotloop.sim.tasks.conveyor import BOX_HALF
    from hotloop.sim.tasks.gantry import BELT_TOP

    dataset = Dataset(path)
    images, positions = [], []
    for i in range(len(dataset)):
        ep = dataset.episode(i)
        if "top" not in ep.images:
            raise ConfigError(f"--data {path}: episode {i} has no top view (it has {', '.join(ep.images)})")
        images.append(ep.images["top"])
        positions.append(np.asarray(ep.state, dtype=np.float64)[:, 4:7])
    if not images:
        raise ConfigError(f"--data {path} holds no episodes")
    stacked = np.concatenate(images)
    env = make_task("conveyor-pick", image_size=int(stacked.shape[1]))
    camera = PinholeCamera.from_env(env)
    env.close()
    pos = np.concatenate(positions)
    upright = np.array([1.0, 0.0, 0.0, 0.0])
    labels = [box_labels(camera, p, upright, BOX_HALF) for p in pos]
    return frames_from_arrays(stacked, np.stack([c for c, _ in labels]), np.stack([b for _, b in labels]), pos, camera,
                   BELT_TOP + BOX_HALF)  # fmt: skip


def frames_from_arrays(
    images: np.ndarray, centre: np.ndarray, bbox: np.ndarray, pos: np.ndarray, camera: Any, plane_z: float
) -> DetectorFrames:
    """Frames from their images and labels; `visible` and `on_belt` follow from the labels and the belt
    plane's height `plane_z`."""
    visible = np.all((centre > 0.0) & (centre < 1.0), axis=1)
    on_belt = np.abs(pos[:, 2] - plane_z) < ON_BELT_MM / 1e3
    return DetectorFrames(
        images.astype(np.uint8),
        centre.astype(np.float32),
        bbox.astype(np.float32),
        pos.astype(np.float32),
        visible,
        on_belt,
        camera,
    )


def concat_frames(parts: list[DetectorFrames]) -> DetectorFrames:
    """One set of frames from several of the same image size (the first part's camera calibration)."""
    sizes = {p.size for p in parts}
    if len(sizes) != 1:
        raise ConfigError(f"frames of different sizes cannot be joined: {sorted(sizes)} px")

    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts])

    return DetectorFrames(
        joined("images"),
        joined("centre"),
        joined("bbox"),
        joined("box_pos"),
        joined("visible"),
        joined("on_belt"),
        parts[0].camera,
    )
