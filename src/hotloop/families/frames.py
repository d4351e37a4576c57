"""How recorded frames reach a family's model: a `TargetAdapter` turns a dataset frame into the family's
observation and an action chunk into its model-space targets (calibration, sensitivity, distillation,
QAT all read data through one), and `check_fits` refuses data shaped for another model before any frame
is decoded. Each family builds its own adapters (`hotloop.families.pi.data`); the shipped demos theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.errors import ConfigError


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """(H, W, 3) uint8 -> (height, width, 3) uint8: keep the aspect ratio, pad with black (openpi's
    resize_with_pad), bilinear. The closed loop's adapter resizes a task's views with it and the families'
    data adapters recorded frames, so calibration sees what evaluation feeds."""
    h, w = image.shape[:2]
    if (h, w) == (height, width):
        return image
    from PIL import Image

    ratio = max(h / height, w / width)
    nh, nw = max(1, round(h / ratio)), max(1, round(w / ratio))
    resized = np.asarray(
        Image.fromarray(np.ascontiguousarray(image)).resize((nw, nh), Image.Resampling.BILINEAR)
    )
    out = np.zeros((height, width, 3), dtype=np.uint8)
    top, left = (height - nh) // 2, (width - nw) // 2
    out[top : top + nh, left : left + nw] = resized
    return out


FrameObserver = Callable[[dict[str, np.ndarray], np.ndarray, int], Any]
ActionTargets = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class DataLimits:
    """What a model can take at most (None: no limit), the chunk its targets span, and a family's own
    check `extra(state_dim, where, name)` (pi0.5: the state bins must fit the prompt)."""

    max_state_dim: int | None
    max_action_dim: int | None
    max_views: int | None
    chunk_size: int
    extra: Callable[[int, str, str], None] | None = None


@dataclass(frozen=True)
class TargetAdapter:
    """`observe(images {key: HxWx3}, state, task_index)` -> batch-1 observation of the target's family;
    `targets(chunk (H, A), state)` -> the model-space action targets (normalised, padded to the model's
    chunk)."""

    name: str
    observe: FrameObserver
    targets: ActionTargets
    state_dim: int | None  # the state width the adapter expects (None: anything up to max_state_dim)
    action_dim: int | None
    image_keys: tuple[str, ...] | None  # camera keys it needs (None: any, up to the model's views)
    gripper_dim: int | None  # action column of a gripper, for the gripper-flip rate
    limits: DataLimits
    family: Any  # the `PolicyFamily` whose observations `observe` builds (batching: stack / select)


def check_fits(adapter: TargetAdapter, dataset: Any, flag: str = "--data") -> None:
    """ConfigError naming `flag` when the dataset's state, actions or cameras do not fit the target."""
    lim = adapter.limits
    state_dim = int(dataset.features["observation.state"]["shape"][0])
    action_dim = int(dataset.features["action"]["shape"][0])
    where = f"{flag} {dataset.root}"
    # (what, the data's width, the width the adapter reads, the most the model takes, the verbs, a hint)
    for noun, dim, needed, most, (verb, verb_most), hint in (
        ("states", state_dim, adapter.state_dim, lim.max_state_dim, ("reads", "takes"), ": record the target's own task"),
        ("actions", action_dim, adapter.action_dim, lim.max_action_dim, ("predicts", "predicts"), ""),
    ):  # fmt: skip
        have = f"{where} has {dim}-dim {noun}; {adapter.name}"
        if needed is not None and dim != needed:
            raise ConfigError(f"{have} {verb} {needed} (data recorded for another model{hint})")
        if most is not None and dim > most:
            raise ConfigError(f"{have} {verb_most} at most {most} (data recorded for another model)")
    if lim.max_views == 0:  # a model without cameras reads no images (nothing to check)
        if lim.extra is not None:
            lim.extra(state_dim, where, adapter.name)
        return
    keys = list(dataset.image_keys)
    if not keys:
        raise ConfigError(f"{where} has no camera images; {adapter.name} needs at least one view")
    if adapter.image_keys is not None and any(k not in keys for k in adapter.image_keys):
        raise ConfigError(f"{where} has cameras {keys}; {adapter.name} needs {list(adapter.image_keys)}")
    if adapter.image_keys is None and lim.max_views is not None and len(keys) > lim.max_views:
        raise ConfigError(
            f"{where} has {len(keys)} cameras; {adapter.name} takes at most {lim.max_views} views"
        )
    if lim.extra is not None:
        lim.extra(state_dim, where, adapter.name)
