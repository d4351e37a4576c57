"""Calibration frames as raw LeRobot batches (`hotloop compile CKPT --calibration DIR`, DIR of `.npz`).

A recorded dataset is not the only place calibration frames come from. A LeRobot user can dump what
their robot hands the policy — the batch `select_action` receives, before the preprocessor — with
`benchmarks/lerobot_reference_run.py`, the same format as a `hotloop verify` reference run's
`raw_inputs.npz`. DIR holds any number of such files, each one frame or a stack of frames:

- `observation.images.<view>` (or `observation.image`, a policy's one unnamed camera): (3, H, W) floats in [0, 1] (LeRobot's layout) or (H, W, 3) uint8 (a
  camera's), with one more leading axis for a stack;
- `observation.state`: (D,) or (K, D); `task`: one text or K texts (prompted families), optional.

Every frame goes through the checkpoint's own preprocessor (its statistics, not the frames'), exactly as
a served copy would see it. Every fourth frame (at least one) is held out: the planner judges each
candidate's final actions on held-out frames, not on the random observation it uses otherwise, so a
static int8 plan is both calibrated and judged on what the robot will show it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError

IMAGES = "observation.images."
SINGLE_IMAGE = "observation.image"  # LeRobot's key for a policy's only, unnamed camera
STATE = "observation.state"
TASK = "task"
HELD_OUT_EVERY = 4
MAX_HELD_OUT = 8  # each held-out frame costs one whole-plan run per candidate plan
FLAG = "--calibration"


def is_raw_batch_folder(folder: Path) -> bool:
    """A folder of `.npz` batches rather than a recorded dataset (which has `meta/info.json`)."""
    return folder.is_dir() and not (folder / "meta" / "info.json").exists() and any(folder.glob("*.npz"))


@dataclass(frozen=True)
class RawFrame:
    images: dict[str, np.ndarray]  # view -> (H, W, 3) uint8, or floats in [0, 1]
    state: np.ndarray | None
    task: str
    where: str  # "file.npz[row]", for messages


@dataclass
class RawBatches:
    """The frames of a folder of raw batches, with the few dataset facts a target adapter reads."""

    root: Path
    frames: list[RawFrame]
    tasks: dict[int, str]
    sha256: str

    @property
    def image_keys(self) -> list[str]:
        return list(self.frames[0].images)

    @property
    def features(self) -> dict[str, Any]:
        state = self.frames[0].state
        return {
            STATE: {"shape": [0 if state is None else len(state)]},
            "action": {"shape": [0], "names": []},  # raw batches hold no actions: nothing is trained on them
        }

    def task_index(self, frame: RawFrame) -> int:
        return next(i for i, t in self.tasks.items() if t == frame.task)


def _pixels(value: np.ndarray, where: str) -> np.ndarray:
    """One image as (H, W, 3): a camera's uint8 as given, LeRobot's (3, H, W) floats in [0, 1] transposed
    (not rounded to uint8: the preprocessor then sees exactly the robot's values)."""
    if value.dtype == np.uint8 and value.ndim == 3 and value.shape[-1] == 3:
        return value
    if value.dtype.kind == "f" and value.ndim == 3 and value.shape[0] == 3:
        lo, hi = float(np.min(value)), float(np.max(value))
        if not (lo >= 0.0 and hi <= 1.0):  # also catches NaN
            raise ConfigError(
                f"{FLAG} {where}: image floats must lie in [0, 1] (LeRobot's layout); found [{lo:g}, {hi:g}]"
            )
        return np.ascontiguousarray(value.transpose(1, 2, 0), dtype=np.float32)  # floats stay floats: exact
    raise ConfigError(
        f"{FLAG} {where}: an image is (3, H, W) floats in [0, 1] or (H, W, 3) uint8, optionally stacked; "
        f"got {value.dtype} {tuple(value.shape)}"
    )


def _rows(value: np.ndarray, single_ndim: int) -> list[np.ndarray]:
    return [value] if value.ndim == single_ndim else list(value)


def _read(path: Path) -> list[RawFrame]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{FLAG} {path}: not a readable .npz file ({exc})") from None
    views = {k[len(IMAGES) :]: v for k, v in arrays.items() if k.startswith(IMAGES)}
    if SINGLE_IMAGE in arrays:
        views["image"] = arrays[SINGLE_IMAGE]
    for view, value in views.items():
        if value.ndim > 4 or arrays.get(STATE, np.zeros(1)).ndim > 2:
            raise ConfigError(
                f"{FLAG} {path}: holds a history of frames per sample ({view}: {tuple(value.shape)}); give one "
                "time step per frame (K, 3, H, W), and the policy builds its own history"
            )
    if not views and STATE not in arrays:
        raise ConfigError(
            f"{FLAG} {path}: holds neither {IMAGES}<view> nor {STATE} (LeRobot batch keys, as in a "
            f"reference run's raw_inputs.npz); it has {', '.join(sorted(arrays)) or 'nothing'}"
        )
    images = {v: _rows(a, 3) for v, a in views.items()}
    state = _rows(arrays[STATE].astype(np.float32), 1) if STATE in arrays else None
    tasks_value = arrays.get(TASK)
    counts = {len(rows) for rows in images.values()} | ({len(state)} if state is not None else set())
    if len(counts) != 1:
        raise ConfigError(f"{FLAG} {path}: its arrays hold different numbers of frames ({sorted(counts)})")
    n = counts.pop()
    tasks = [""] * n
    if tasks_value is not None:
        texts = [str(t) for t in np.atleast_1d(tasks_value)]
        if len(texts) not in (1, n):
            raise ConfigError(f"{FLAG} {path}: '{TASK}' holds {len(texts)} texts for {n} frames")
        tasks = texts * n if len(texts) == 1 else texts
    frames = []
    for i in range(n):
        where = f"{path.name}[{i}]"
        pixels = {v: _pixels(rows[i], f"{where} {IMAGES}{v}") for v, rows in images.items()}
        s = None if state is None else state[i]
        if s is not None and not np.isfinite(s).all():
            raise ConfigError(f"{FLAG} {where}: {STATE} holds non-finite values")
        frames.append(RawFrame(pixels, s, tasks[i], where))
    return frames


def read_raw_batches(folder: str | Path) -> RawBatches:
    """Every frame of every `.npz` in `folder` (sorted by name), checked to share views and shapes."""
    root = Path(folder)
    files = sorted(root.glob("*.npz"))
    if not files:
        raise ConfigError(
            f"{FLAG} {root}: no .npz files (raw LeRobot batches) and no dataset (meta/info.json)"
        )
    frames: list[RawFrame] = []
    for path in files:
        frames.extend(_read(path))
    first = frames[0]
    for f in frames[1:]:
        if set(f.images) != set(first.images):
            raise ConfigError(
                f"{FLAG} {f.where}: views {sorted(f.images)}, but {first.where} has {sorted(first.images)}"
            )
        for view, img in f.images.items():
            if img.shape != first.images[view].shape:
                raise ConfigError(
                    f"{FLAG} {f.where}: view {view!r} is {img.shape}, but {first.where} has "
                    f"{first.images[view].shape}"
                )
        if (f.state is None) != (first.state is None) or (
            f.state is not None and first.state is not None and f.state.shape != first.state.shape
        ):
            raise ConfigError(f"{FLAG} {f.where}: its state differs in width from {first.where}'s")
    texts = list(dict.fromkeys(f.task for f in frames))
    h = hashlib.sha256()
    for f in frames:
        for view in sorted(f.images):
            h.update(view.encode())
            h.update(f.images[view].tobytes())
        if f.state is not None:
            h.update(f.state.tobytes())
        h.update(f.task.encode())
    return RawBatches(root, frames, dict(enumerate(texts)), h.hexdigest())


def check_raw_fits(adapter: Any, raw: RawBatches) -> None:
    """A ConfigError naming the folder when its frames do not fit the target's views or state."""
    where = f"{FLAG} {raw.root}"
    state = raw.frames[0].state
    if adapter.state_dim is not None and (state is None or len(state) != adapter.state_dim):
        width = "no" if state is None else f"{len(state)}-dim"
        raise ConfigError(f"{where} has {width} {STATE}; {adapter.name} reads {adapter.state_dim}")
    keys = raw.image_keys
    if adapter.image_keys is not None and any(k not in keys for k in adapter.image_keys):
        missing = [k for k in adapter.image_keys if k not in keys]
        raise ConfigError(
            f"{where} lacks {', '.join(IMAGES + k for k in missing)}; {adapter.name} reads views "
            f"{', '.join(adapter.image_keys)} (it has {', '.join(keys) or 'none'})"
        )


def _state(frame: RawFrame) -> np.ndarray:
    return frame.state if frame.state is not None else np.zeros(0, np.float32)  # a state-less checkpoint


@dataclass(frozen=True)
class RawObservations:
    """A folder's frames as the target's model sees them (batch 1 each), split into the frames to
    calibrate on and the held-out ones to judge candidates on."""

    calibrate: list[Any]
    held_out: list[Any]
    calibrate_frames: list[int]  # the calibrating frames' places in the folder (files by name, rows in order)
    family: Any  # the `PolicyFamily` of the observations (batching)
    raw: RawBatches


def raw_observations(target: str, source: Any, folder: str | Path, frames: int) -> RawObservations:
    """Up to `frames` observations to calibrate on, and every fourth frame (up to MAX_HELD_OUT) held out."""
    from hotloop.compile.sources import load_target

    raw = read_raw_batches(folder)
    _, adapter = load_target(target, raw, model=source.model)
    check_raw_fits(adapter, raw)
    observations = []
    for f in raw.frames:
        try:
            observations.append(adapter.observe(f.images, _state(f), raw.task_index(f)))
        except ConfigError as exc:
            raise ConfigError(f"{FLAG} {f.where}: {exc}") from None
    held = [i for i in range(len(observations)) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    if not held:  # fewer than four frames: the last one judges, the rest calibrate
        held = [len(observations) - 1]
    calibrate = [i for i in range(len(observations)) if i not in held]
    if not calibrate:
        raise ConfigError(f"{FLAG} {raw.root}: one frame cannot both calibrate and judge; give at least two")
    return RawObservations(
        [observations[i] for i in calibrate[:frames]],
        [observations[i] for i in held[:MAX_HELD_OUT]],
        calibrate[:frames],
        adapter.family,
        raw,
    )
