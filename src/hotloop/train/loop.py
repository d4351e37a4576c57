"""The one training loop every shipped demo policy is trained with, and the data it trains on.

- `prepare_dataset`: the recorded dataset to train on; recorded into the run's own folder when none is
  given. A `--dataset` path must already be a dataset (`meta/info.json`): nothing is ever recorded or
  written into an input path.
- `check_finite`: non-finite values in the training arrays are named (array, example, entry) before any
  work (the dataset's own values are checked as they are read, by episode, frame and column).
- `run_training`: AdamW with linear warm-up and a cosine decay (`Schedule`), gradient clipping, a
  progress bar, and every named term of the step loss kept per step. A non-finite loss stops training
  with `TrainingDiverged` (the command exits 1 and writes no model).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError, HotloopError


class TrainingDiverged(HotloopError):
    """The loss became NaN or infinite: the run stops and writes no model."""


@dataclass(frozen=True)
class Schedule:
    steps: int
    lr: float
    min_lr: float
    warmup: int
    weight_decay: float
    grad_clip: float

    def lr_at(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * progress))


def prepare_dataset(
    dataset_dir: str | Path | None, out: Path, record_options: Mapping[str, Any]
) -> tuple[Any, dict[str, Any] | None]:
    """(the dataset, the recording summary or None): `dataset_dir` as given, which must be a recorded
    dataset, or episodes recorded into `out/dataset` (`record_options`: `hotloop.datasets.recorder.record`'s
    arguments) unless a previous run recorded them there already."""
    from hotloop.datasets.lerobot_v3 import Dataset

    if dataset_dir is not None:
        path = Path(dataset_dir)
        if not (path / "meta" / "info.json").is_file():
            raise ConfigError(
                f"--dataset {path} is not a recorded dataset (no meta/info.json there); record one with "
                "`hotloop record --task conveyor-pick -o DIR`, or drop --dataset to record into the run folder"
            )
        return Dataset(path), None
    path = out / "dataset"
    recorded = None
    if not (path / "meta" / "info.json").is_file():
        from hotloop.datasets.recorder import record

        recorded = record(out=path, **record_options)
    return Dataset(path), recorded


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


def run_training(
    params: list[Any],
    step_loss: Callable[[int], Mapping[str, Any]],
    schedule: Schedule,
    desc: str,
    progress: bool = True,
) -> dict[str, list[float]]:
    """Optimise `params` for `schedule.steps` steps; `step_loss(step)` draws its batch and returns its
    terms as tensors, "loss" the one minimised. Returns each term's history (the terms other than "loss"
    when there are any, else "loss")."""
    import torch

    opt = torch.optim.AdamW(params, lr=schedule.lr, weight_decay=schedule.weight_decay)
    history: dict[str, list[float]] = {}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=schedule.steps, desc=desc, unit="step", dynamic_ncols=True)
    try:
        for step in range(schedule.steps):
            terms = step_loss(step)
            loss = terms["loss"]
            if not bool(torch.isfinite(loss.detach())):
                raise TrainingDiverged(
                    f"{desc}: the loss is {float(loss.detach())} at step {step}; training stopped and no "
                    "model was written (lower the learning rate, or check the data)"
                )
            for group in opt.param_groups:
                group["lr"] = schedule.lr_at(step)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, schedule.grad_clip)
            opt.step()
            logged = {k: v for k, v in terms.items() if k != "loss"} or {"loss": loss}
            for name, value in logged.items():
                history.setdefault(name, []).append(value.item())
            if bar is not None:
                bar.update(1)
                if step % 20 == 0:
                    bar.set_postfix({k: f"{np.mean(v[-20:]):.4f}" for k, v in history.items()})
    finally:
        if bar is not None:
            bar.close()
    return history


def cli_updates(
    seed: int,
    views: tuple[str, ...] | None,
    steps: int | None,
    episodes: int | None,
    threads: int | None,
) -> dict[str, Any]:
    """The config fields `hotloop train-demo` sets for a LeRobot-layout demo trainer (ACT, Diffusion,
    SmolVLA): the seed always, the others only when given (the trainer's defaults are its shipped run)."""
    updates: dict[str, Any] = {"seed": seed}
    if views is not None:
        updates["views"] = tuple(views)
    for name, value in (("steps", steps), ("episodes", episodes), ("threads", threads)):
        if value is not None:
            updates[name] = value
    return updates


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
