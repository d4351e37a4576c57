"""How well a box detector finds the box in labelled frames: the measures the pipeline cares about.

Scored frames are those whose box rides the belt and projects inside the image (`visible & on_belt`):
there the detector's back-projection onto the belt plane has a right answer. Per detector and frames:

- `detection_rate`: the share of scored frames with a detection;
- `centre_mm`: on detected scored frames, the distance on the belt plane between the back-projected
  centre and the true box centre (p50, p95, mean; mm);
- `iou`: the mean IoU of the detected box with the label (the rectangle around the box's projected
  corners) over scored frames, a missed frame counting 0: detection and localisation in one number.
  The colour threshold's box is its blob's bounding rectangle (the lit faces it sees).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from hotloop.perception.detector_data import DetectorFrames

EVAL_BATCH = 64  # frames per network call when scoring (memory stays small at 128 px)


@dataclass(frozen=True)
class Accuracy:
    frames: int  # scored frames
    detection_rate: float
    centre_mm_p50: float | None
    centre_mm_p95: float | None
    centre_mm_mean: float | None
    iou: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of (N, 4) boxes (x0, y0, x1, y1) row by row."""
    lo = np.maximum(a[:, :2], b[:, :2])
    hi = np.minimum(a[:, 2:], b[:, 2:])
    inter = np.prod(np.clip(hi - lo, 0.0, None), axis=1)
    area = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1) + np.prod(
        np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1
    )
    return np.where(area - inter > 0, inter / np.maximum(area - inter, 1e-12), 0.0)


def score(
    frames: DetectorFrames, detected: np.ndarray, centre_px: np.ndarray, bbox: np.ndarray, plane_z: float
) -> Accuracy:
    """Accuracy of per-frame detections: `detected` (N,) bool, `centre_px` (N, 2) at the frames' size
    (rows without a detection are ignored), `bbox` (N, 4) image fractions."""
    scored = frames.visible & frames.on_belt
    n = int(scored.sum())
    hit = scored & detected
    errors = np.array(
        [
            1e3
            * np.linalg.norm(frames.camera.ray_to_plane(centre_px[i], plane_z)[:2] - frames.box_pos[i, :2])
            for i in np.flatnonzero(hit)
        ]
    )
    ious = np.where(hit, box_iou(bbox, frames.bbox), 0.0)
    return Accuracy(
        frames=n,
        detection_rate=float(hit.sum() / n) if n else 0.0,
        centre_mm_p50=float(np.percentile(errors, 50)) if errors.size else None,
        centre_mm_p95=float(np.percentile(errors, 95)) if errors.size else None,
        centre_mm_mean=float(errors.mean()) if errors.size else None,
        iou=float(ious[scored].mean()) if n else 0.0,
    )


def learned_outputs(model: Any, frames: DetectorFrames, resolution: int, run: Any = None) -> np.ndarray:
    """The network's output maps (N, 5, R/4, R/4) on the frames resampled to `resolution`; `run` maps a
    (B, 3, R, R) batch to its maps (default: the eager network)."""
    from hotloop.perception.learned_detector import resample

    run = run or model.run
    outs = [
        run(resample(frames.images[i : i + EVAL_BATCH], resolution))
        for i in range(0, len(frames), EVAL_BATCH)
    ]
    return np.concatenate(outs)


def evaluate_maps(model: Any, frames: DetectorFrames, maps: np.ndarray, plane_z: float) -> Accuracy:
    from hotloop.perception.learned_detector import decode

    est = [decode(m) for m in maps]
    detected = np.array([e.score >= model.config.threshold for e in est])
    centre = np.stack([e.centre for e in est]) * frames.size
    return score(frames, detected, centre, np.stack([e.bbox for e in est]), plane_z)


def evaluate_learned(
    model: Any, frames: DetectorFrames, resolution: int, plane_z: float, run: Any = None
) -> Accuracy:
    return evaluate_maps(model, frames, learned_outputs(model, frames, resolution, run), plane_z)


def evaluate_colour(frames: DetectorFrames, plane_z: float) -> Accuracy:
    """The colour threshold (`ColourBoxDetector`, as the pipeline runs it) on the same frames."""
    from hotloop.perception.box_detector import ColourBoxDetector

    detector = ColourBoxDetector(frames.camera, plane_z)
    detected, centres, boxes = [], [], []
    for img in frames.images:
        d = detector.detect(img)
        detected.append(d.position is not None)
        centres.append(frames.camera.project(d.position) if d.position is not None else np.zeros(2))
        r = img[..., 0].astype(np.int16)
        b = img[..., 2].astype(np.int16)
        rows, cols = np.nonzero((b >= detector.min_blue) & (b - r >= detector.min_blue_over_red))
        if rows.size:
            boxes.append(np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]) / frames.size)
        else:
            boxes.append(np.zeros(4))
    return score(frames, np.array(detected), np.stack(centres), np.stack(boxes), plane_z)
