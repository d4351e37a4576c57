"""The perception layer of conveyor-pick's layered pipeline: find the box in the top camera image.

A colour threshold (the box is the only saturated blue thing in the scene) gives a blob; its centroid,
back-projected through the calibrated pinhole camera onto the plane of the box's centre on the belt,
is the measured box position. Calibration (camera pose and field of view) is read once from the scene
model, as a robot reads its camera calibration file; the detector never sees simulator state.

What it cannot do, by construction: see depth (a lifted box is placed on the belt plane: the
estimation layer uses the gripper's own position once the box is held), or see the box under the
gripper (a blob smaller than `min_pixels` is "no detection", and the tracker predicts through it).
At 64 px one pixel is about 1.3 cm on the belt; the centroid of a 10-20 pixel blob is good to a few mm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.errors import ConfigError


@dataclass(frozen=True)
class PinholeCamera:
    """A calibrated camera: world position, rotation (columns = camera x, y, z axes in the world; the
    camera looks along -z, image up is +y) and vertical field of view, for a square image of `size` px."""

    position: tuple[float, float, float]
    rotation: tuple[tuple[float, ...], ...]
    fovy_deg: float
    size: int

    @classmethod
    def from_env(cls, env: Any, camera: str | None = None) -> PinholeCamera:
        from hotloop.sim.mujoco_import import import_mujoco

        import_mujoco()
        import mujoco

        name = camera or env.config.camera
        data = mujoco.MjData(env.model)  # a scratch copy: calibration must not touch the episode's state
        mujoco.mj_forward(env.model, data)
        cid = env.model.camera(name).id
        rot = data.cam_xmat[cid].reshape(3, 3)
        return cls(
            tuple(float(v) for v in data.cam_xpos[cid]),  # type: ignore[arg-type]
            tuple(tuple(float(v) for v in row) for row in rot),
            float(env.model.cam_fovy[cid]),
            int(env.config.image_size),
        )

    @property
    def focal_px(self) -> float:
        return (self.size / 2) / math.tan(math.radians(self.fovy_deg) / 2)

    def project(self, point: np.ndarray) -> np.ndarray:
        """World point -> (column, row) in pixels (pixel centres at half-integers)."""
        r = np.asarray(self.rotation)
        c = r.T @ (np.asarray(point, dtype=np.float64) - np.asarray(self.position))
        f, half = self.focal_px, self.size / 2
        return np.array([half + f * c[0] / -c[2], half - f * c[1] / -c[2]])

    def ray_to_plane(self, pixel: np.ndarray, z: float) -> np.ndarray:
        """Back-project (column, row) onto the horizontal plane at height `z`."""
        f, half = self.focal_px, self.size / 2
        d_cam = np.array([(pixel[0] - half) / f, -(pixel[1] - half) / f, -1.0])
        d = np.asarray(self.rotation) @ d_cam
        origin = np.asarray(self.position)
        if abs(d[2]) < 1e-9:
            raise ConfigError("camera ray is parallel to the belt plane; check the calibration")
        return np.asarray(origin + d * (z - origin[2]) / d[2])


@dataclass(frozen=True)
class Detection:
    position: np.ndarray | None  # world xyz of the box centre, None when not seen (or only partly)
    pixels: int  # blob size
    completeness: float = 0.0  # blob size / the size a fully visible box at that position would have
    partial_x: float | None = None  # x of a partly hidden box (the gripper hides its back, not its sides)


@dataclass(frozen=True)
class ColourBoxDetector:
    """Threshold on blue dominance, centroid, back-projection onto the plane z = `plane_z`."""

    camera: PinholeCamera
    plane_z: float  # the box centre's height when it rides the belt
    min_blue: int = 90  # blue channel at least this
    min_blue_over_red: int = 70  # and this much above red (the grey floor and the belt are not)
    half_size: float = 0.02  # the box's half edge (m): its expected image footprint
    min_pixels: int = 3  # fewer: no blob at all
    min_completeness: float = 0.6  # unoccluded boxes measure 0.66-1.15 at 64 px; a smaller blob is partly hidden (gripper, image border): its
    # centroid is biased by up to a box width, worse than no measurement for the tracker

    def detect(self, image: np.ndarray) -> Detection:
        img = np.asarray(image)
        if img.ndim != 3 or img.shape[2] != 3 or img.shape[0] != self.camera.size:
            raise ConfigError(
                f"the box detector needs a {self.camera.size}x{self.camera.size} RGB image (got {img.shape})"
            )
        r = img[..., 0].astype(np.int16)
        b = img[..., 2].astype(np.int16)
        mask = (b >= self.min_blue) & (b - r >= self.min_blue_over_red)
        count = int(mask.sum())
        if count < self.min_pixels:
            return Detection(None, count)
        rows, cols = np.nonzero(mask)
        centroid = np.array([cols.mean() + 0.5, rows.mean() + 0.5])
        position = self.camera.ray_to_plane(centroid, self.plane_z)
        # The blob is the lit part of the box (top and front faces), whose centroid is not the projected
        # centre: perspective shifts it by up to ~1 cm across the belt. Move the estimate until the model
        # region's centroid lands on the observed one (converges in 2-3 steps).
        for _ in range(3):
            _, predicted = self.silhouette(position)
            position = position + centre_shift(self.camera, centroid, predicted, self.plane_z)
        area, _ = self.silhouette(position)
        completeness = count / max(1.0, area)
        touches_border = rows.min() == 0 or cols.min() == 0 or rows.max() == img.shape[0] - 1
        touches_border = touches_border or cols.max() == img.shape[1] - 1
        if touches_border:
            return Detection(None, count, completeness)
        if completeness < self.min_completeness:
            # Hovering over the box, the palm hides its top and back: what is left is its front face,
            # whose centroid is still the box's x but not its y.
            return Detection(None, count, completeness, partial_x=float(position[0]))
        return Detection(position, count, completeness)

    def silhouette(self, position: np.ndarray) -> tuple[float, np.ndarray]:
        """(area px, centroid px) of the box's blue region at `position`: the top face and the face towards
        the camera (-y); the side faces (+-x) are in shade and fall below the threshold."""
        h = self.half_size
        top = [[x, y, h] for x in (-h, h) for y in (-h, h)]
        corners = np.array([*top, [-h, -h, -h], [h, -h, -h]]) + position
        return _hull_area_centroid(np.array([self.camera.project(c) for c in corners]))


def centre_shift(camera: PinholeCamera, observed: np.ndarray, predicted: np.ndarray, z: float) -> np.ndarray:
    """World displacement on the plane z that moves image point `predicted` onto `observed`."""
    return camera.ray_to_plane(observed, z) - camera.ray_to_plane(predicted, z)


def _hull_area_centroid(points: np.ndarray) -> tuple[float, np.ndarray]:
    """Area and centroid of the convex hull of 2-D points (monotone chain, then the shoelace formulas)."""
    pts = sorted(map(tuple, points))

    def half(seq: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
        out: list[tuple[float, ...]] = []
        for p in seq:
            while (
                len(out) >= 2
                and (out[-1][0] - out[-2][0]) * (p[1] - out[-2][1])
                - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0])
                <= 0
            ):
                out.pop()
            out.append(p)
        return out

    hull = half(pts)[:-1] + half(pts[::-1])[:-1]
    x, y = np.array(hull).T
    xn, yn = np.roll(x, -1), np.roll(y, -1)
    cross = x * yn - xn * y
    area = cross.sum() / 2
    if abs(area) < 1e-12:
        return 0.0, np.array([x.mean(), y.mean()])
    centroid = np.array([((x + xn) * cross).sum(), ((y + yn) * cross).sum()]) / (6 * area)
    return float(abs(area)), centroid
