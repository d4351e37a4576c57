"""What a demo trainer trains on: the recorded dataset (recorded into the run's folder when none is
given), the camera views and state layout it holds, its successful episodes and their action chunks,
and the check that the arrays built from them are finite.

- `prepare_dataset`: the dataset to train on. A `--dataset` path must already be a dataset
  (`meta/info.json`): nothing is ever recorded or written into an input path.
- `training_views` / `has_gantry_layout` / `dataset_task`: the dataset's own cameras, state layout and
  task, so that a third-party task's dataset trains in its own terms.
- `successful_episodes` / `chunk_indices`: the episodes the demos imitate, and each frame's chunk of the
  actions that follow it (past the episode's end its last action, masked as LeRobot pads them).
- `check_finite`: non-finite values in the training arrays are named (array, example, entry) before any
  work (the dataset's own values are checked as they are read, by episode, frame and column).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError


def prepare_dataset(
    dataset_dir: str | Path | None, out: Path, record_options: Mapping[str, Any]
) -> tuple[Any, dict[str, Any] | None]:
    """(the dataset, the recording summary or None): `dataset_dir` as given, which must be a recorded
    dataset, or episodes recorded into `out/dataset` (`record_options`: `hotloop.datasets.recorder.record`'s
    arguments) unless a previous run recorded them there already."""
    from hotloop.datasets.lerobot_v3 import Dataset

    if dataset_dir is not None:
        return Dataset(check_dataset_dir(dataset_dir)), None
    path = out / "dataset"
    recorded = None
    if not (path / "meta" / "info.json").is_file():
        from hotloop.datasets.recorder import record

        recorded = record(out=path, **record_options)
    return Dataset(path), recorded


def check_dataset_dir(dataset_dir: str | Path) -> Path:
    """`--dataset` as a path, refused unless it holds a recorded dataset (`meta/info.json`)."""
    path = Path(dataset_dir)
    if not (path / "meta" / "info.json").is_file():
        raise ConfigError(
            f"--dataset {path} is not a recorded dataset (no meta/info.json there); record one with "
            "`hotloop record --task conveyor-pick -o DIR`, or drop --dataset to record into the run folder"
        )
    return path


def check_finite(arrays: Mapping[str, np.ndarray], where: str) -> None:
    """Refuse training arrays holding NaN or Inf, naming the first bad value by array, example and entry.

    The dataset's own values were checked as they were read (`hotloop.datasets.lerobot_v3`, by episode,
    frame and column); what is left here is what the arrays built from them (normalised, chunked) add,
    so the message says so rather than name a row and column the data file does not have."""
    for name, values in arrays.items():
        if values.dtype.kind != "f":
            continue
        bad = ~np.isfinite(values)
        if bad.any():
            flat = bad.reshape(bad.shape[0], -1) if bad.ndim > 1 else bad[:, None]
            row = int(np.argmax(flat.any(axis=1)))
            col = int(np.argmax(flat[row]))
            raise ConfigError(
                f"{where}: the training {name} built from it hold a non-finite value "
                f"({values.reshape(len(values), -1)[row, col]}) at example {row}, entry {col}, though its "
                "recorded values are finite: its statistics make it (a zero range?); fix them in meta/stats.json"
            )


def check_view_names(views: tuple[str, ...] | list[str], flag: str = "--views") -> tuple[str, ...]:
    """Camera names as a tuple: at least one, none blank, none twice (which cameras exist is the dataset's
    or the recorded task's to say: `training_views`)."""
    views = tuple(views)
    if not views or any(not str(v).strip() for v in views) or len(set(views)) != len(views):
        raise ConfigError(
            f"{flag} must name distinct camera views, comma-separated (got {','.join(views) or 'none'})"
        )
    return views


def dataset_cameras(dataset_dir: Path) -> list[str] | None:
    """The camera names of the recorded dataset at `dataset_dir` (its `observation.images.*` features),
    or None where there is no dataset to read (`prepare_dataset` says so, with the fix)."""
    if not (Path(dataset_dir) / "meta" / "info.json").is_file():
        return None
    from hotloop.datasets.lerobot_v3 import Dataset

    return list(Dataset(dataset_dir).image_keys)


def training_views(
    views: tuple[str, ...] | None,
    dataset_dir: Path | None,
    default: tuple[str, ...],
    one: bool = False,
    flag: str = "--views",
) -> tuple[str, ...] | None:
    """The camera views a demo trainer reads, checked before any work.

    With `--dataset`: `--views` must name cameras of that dataset (its own names: a third-party task's
    `corner`, `gripper`); without `--views`, the family's `default` when the dataset has all of them, else
    the dataset's own cameras in its order (the first one only for a family that reads one: `one`).
    Without `--dataset` the trainer records conveyor-pick, whose cameras are `top` and `wrist`; None
    then means the family's default."""
    if views is not None:
        views = check_view_names(views, flag)
    cameras = dataset_cameras(dataset_dir) if dataset_dir is not None else None
    if cameras is None:
        if views is not None and dataset_dir is None:
            from hotloop.sim.tasks.gantry import check_views

            check_views(views, flag=flag)  # recorded from conveyor-pick: its cameras
        return views
    if not cameras:
        raise ConfigError(
            f"--dataset {dataset_dir} holds no camera views; record it with a task that renders some"
        )
    if views is None:
        views = default if set(default) <= set(cameras) else tuple(cameras[:1] if one else cameras)
    missing = [v for v in views if v not in cameras]
    if missing:
        raise ConfigError(
            f"{flag} {','.join(views)}: the dataset {dataset_dir} has no {', '.join(missing)} view (its cameras: "
            f"{', '.join(cameras)}); name some of those"
        )
    return views


def has_gantry_layout(dataset: Any) -> bool:
    """Whether a dataset's state and actions are the gantry tasks' (conveyor-pick, reach), by their names in
    meta/info.json: what the demo:conveyor transforms (box relative to the hand, actions relative to it)
    assume."""
    from hotloop.sim.tasks.gantry import ACTION_NAMES, STATE_NAMES

    def names(key: str) -> list[Any]:
        return list((dataset.features.get(key) or {}).get("names") or [])

    return names("observation.state") == STATE_NAMES and names("action") == ACTION_NAMES


def dataset_task(dataset: Any, default: str) -> str:
    """The task a dataset was recorded on (`hotloop record` writes it), else `default`."""
    recorder = dataset.info.get("recorder")
    task = recorder.get("task") if isinstance(recorder, dict) else None
    return task if isinstance(task, str) and task else default


def successful_episodes(dataset: Any, views: Sequence[str] = (), images: bool = True) -> Iterator[Any]:
    """The dataset's successful episodes in order (the demos imitate successes only), each holding every
    view of `views`; a dataset without one to learn from is refused when the last has been read."""
    used = 0
    for i in range(len(dataset)):
        if not dataset.episodes[i].get("success", True):
            continue
        ep = dataset.episode(i, images=images)
        missing = [v for v in views if v not in ep.images] if images else []
        if missing:
            raise ConfigError(
                f"episode {i} of the dataset {dataset.root} has no {', '.join(missing)} view (it has "
                f"{', '.join(ep.images) or 'none'}); record one with views {', '.join(views)} (drop --dataset "
                "to record it)"
            )
        used += 1
        yield ep
    if not used:
        raise ConfigError(f"the dataset {dataset.root} has no successful episodes to learn from")


def chunk_indices(length: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """For each of an episode's `length` frames, the indices of its `horizon` actions (frame j: j ..
    j + horizon - 1, clamped to the last: LeRobot's padding by copy) and which of them are past the end."""
    idx = np.arange(length)[:, None] + np.arange(horizon)[None, :]
    return np.minimum(idx, length - 1), idx >= length


def view_sizes(dataset: Any, views: Sequence[str]) -> list[tuple[int, int]]:
    """(height, width) of each view of `views` as the dataset's features declare them; a view it lacks is
    refused by name with the cameras it has."""
    sizes = []
    for view in views:
        key = f"observation.images.{view}"
        if key not in dataset.features:
            raise ConfigError(
                f"the dataset {dataset.root} has no {view} view (it has {', '.join(dataset.image_keys) or 'none'}); "
                f"record one with `hotloop record --views {','.join(views)}` (or drop --dataset)"
            )
        h, w = (int(v) for v in dataset.features[key]["shape"][:2])
        sizes.append((h, w))
    return sizes
