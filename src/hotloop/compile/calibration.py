"""Calibration observations from recorded episodes (hotloop's LeRobotDataset v3 directories).

Frames are sampled across episodes and across task phases (each episode split into `phases` equal
stretches of time, each stretch given its share), after dropping near-duplicate consecutive frames
(a robot that waits, a box that has not moved: the same observation twice teaches the quantizer nothing).
The selection's sha256 (dataset identity, chosen frames, and the model-space tensors themselves) goes
into the artifact manifest, so a plan names exactly the data it was calibrated on.

Bad input (a missing, empty or unreadable directory, data shaped for another model) raises a
`ConfigError` naming `--data` before any frame is decoded.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families.frames import TargetAdapter, check_fits


@dataclass(frozen=True)
class CalibrationSpec:
    """How many frames, how they are spread, and what counts as a near duplicate."""

    count: int = 256
    phases: int = 4
    min_change: float = 0.02  # max |change| of the std-normalised state and action between kept frames
    seed: int = 0
    # (episode, frame) pairs never chosen: a held-out set excludes the frames calibrated or trained on.
    exclude: frozenset[tuple[int, int]] = field(default=frozenset(), repr=False)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ConfigError(f"--calibration-frames must be >= 1 (got {self.count})")
        if self.phases < 1:
            raise ConfigError(f"calibration phases must be >= 1 (got {self.phases})")
        if not self.min_change >= 0:
            raise ConfigError(f"calibration min_change must be >= 0 (got {self.min_change})")


@dataclass(frozen=True)
class CalibrationSet:
    """Selected frames as one batch of model observations plus their flow-matching targets."""

    obs: Any  # batch N, the target family's observation
    actions: Tensor  # (N, chunk_size, max_action_dim) normalised targets (QAT, statistics)
    frames: tuple[tuple[int, int], ...]  # (episode index, frame index) per row
    sha256: str
    dataset: str
    dropped_duplicates: int
    family: Any = field(default=None, compare=False)  # the `PolicyFamily` of `obs` (batching)
    # Observations (batch 1) kept out of `obs` that a plan's final actions are judged on instead of the
    # source's random one (`hotloop.compile.raw_batches`); empty: the source's own checks apply.
    held_out: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    perturb: str | None = None  # the dataset's `hotloop record --perturb` spec: how its frames were made

    def __len__(self) -> int:
        return len(self.frames)

    def batch(self, index: slice | list[int]) -> Any:
        return self.family.select(self.obs, index)

    def manifest_entry(self) -> dict[str, Any]:
        episodes = sorted({e for e, _ in self.frames})
        return {
            "sha256": self.sha256,
            "dataset": self.dataset,
            "frames": len(self.frames),
            "episodes": len(episodes),
            "dropped_near_duplicates": self.dropped_duplicates,
            **({"held_out": len(self.held_out)} if self.held_out else {}),
            **({"perturb": self.perturb} if self.perturb else {}),
        }


def open_dataset(data: str | Path, flag: str = "--data") -> Any:
    """The dataset at `data`, or a ConfigError naming `flag` (missing, empty, unreadable, no episodes)."""
    from hotloop.datasets.lerobot_v3 import Dataset

    root = Path(data)
    if not root.exists():
        raise ConfigError(f"{flag} {root} does not exist; record episodes with `hotloop record TASK -o DIR`")
    if not root.is_dir():
        raise ConfigError(f"{flag} {root} is a file; pass a dataset directory (from `hotloop record`)")
    try:
        empty = not any(root.iterdir())
    except OSError as exc:
        raise ConfigError(f"{flag} {root} cannot be read ({exc.strerror}); check its permissions") from None
    if empty:
        raise ConfigError(f"{flag} {root} is empty; record episodes with `hotloop record TASK -o {root}`")
    try:
        dataset = Dataset(root)
    except ConfigError as exc:
        raise ConfigError(f"{flag}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{flag} {root} cannot be read ({exc}); check its permissions") from None
    if len(dataset) == 0:
        raise ConfigError(f"{flag} {root} holds no episodes; record some with `hotloop record`")
    return dataset


def kept_frames(state: np.ndarray, action: np.ndarray, scale: np.ndarray, min_change: float) -> list[int]:
    """Indices left after dropping frames that barely differ from the last kept one."""
    x = np.concatenate([state, action], axis=1) / scale
    kept = [0]
    for t in range(1, len(x)):
        if np.abs(x[t] - x[kept[-1]]).max() >= min_change:
            kept.append(t)
    return kept


def choose_frames(kept: dict[int, tuple[list[int], int]], spec: CalibrationSpec) -> list[tuple[int, int]]:
    """(episode, frame) pairs spread evenly over (episode, phase) cells, seeded."""
    rng = np.random.default_rng(spec.seed)
    cells: list[list[int]] = []
    owners: list[int] = []
    for ep, (frames, length) in sorted(kept.items()):
        for p in range(spec.phases):
            lo, hi = p * length / spec.phases, (p + 1) * length / spec.phases
            cell = [f for f in frames if lo <= f < hi and (ep, f) not in spec.exclude]
            if cell:
                rng.shuffle(cell)
                cells.append(cell)
                owners.append(ep)
    chosen: list[tuple[int, int]] = []
    depth = 0
    while len(chosen) < spec.count and any(depth < len(c) for c in cells):
        for cell, ep in zip(cells, owners, strict=True):  # round-robin: every cell before any twice
            if depth < len(cell) and len(chosen) < spec.count:
                chosen.append((ep, cell[depth]))
        depth += 1
    return sorted(chosen)


def load_calibration(
    data: str | Path, adapter: TargetAdapter, spec: CalibrationSpec | None = None, flag: str = "--data"
) -> CalibrationSet:
    """Sample `spec.count` frames of the dataset at `data` into model observations for `adapter`."""
    spec = spec or CalibrationSpec()
    dataset = open_dataset(data, flag)
    check_fits(adapter, dataset, flag)
    std = dataset.stats
    scale = np.concatenate(
        [
            np.asarray(std.get("observation.state", {}).get("std", [1.0]), dtype=np.float32),
            np.asarray(std.get("action", {}).get("std", [1.0]), dtype=np.float32),
        ]
    )
    kept: dict[int, tuple[list[int], int]] = {}
    dropped = 0
    for i in range(len(dataset)):
        ep = dataset.episode(i, images=False)
        s = scale if scale.size == ep.state.shape[1] + ep.action.shape[1] else np.ones(1, np.float32)
        frames = kept_frames(ep.state, ep.action, np.maximum(s, 1e-6), spec.min_change)
        dropped += len(ep.state) - len(frames)
        kept[i] = (frames, len(ep.state))
    chosen = choose_frames(kept, spec)
    if not chosen:
        raise ConfigError(
            f"{flag} {dataset.root}: no frames left to sample (after dropping near duplicates and the "
            f"{len(spec.exclude)} already taken); record more episodes"
        )
    observations: list[Any] = []
    targets: list[np.ndarray] = []
    h = adapter.limits.chunk_size
    for i in sorted({e for e, _ in chosen}):
        ep = dataset.episode(i)
        t_len = len(ep.action)
        for _, f in (c for c in chosen if c[0] == i):
            images = {k: v[f] for k, v in ep.images.items()}
            try:
                observations.append(adapter.observe(images, ep.state[f], _task_index(dataset, ep)))
            except ConfigError as exc:
                raise ConfigError(f"{flag} {dataset.root}: {exc} (data shaped for another model?)") from None
            idx = np.minimum(np.arange(f, f + h), t_len - 1)
            targets.append(adapter.targets(ep.action[idx], ep.state[f]))
    obs = adapter.family.stack(observations)
    actions = torch.from_numpy(np.stack(targets))
    return CalibrationSet(
        obs=obs,
        actions=actions,
        frames=tuple(chosen),
        sha256=_hash(dataset, chosen, obs, actions, spec),
        dataset=str(Path(data).resolve()),
        dropped_duplicates=dropped,
        family=adapter.family,
        perturb=(dataset.info.get("recorder") or {}).get("perturb"),
    )


def _task_index(dataset: Any, ep: Any) -> int:
    for index, task in dataset.tasks.items():
        if task == ep.task:
            return int(index)
    return 0


def _hash(
    dataset: Any, chosen: list[tuple[int, int]], obs: Any, actions: Tensor, spec: CalibrationSpec
) -> str:
    h = hashlib.sha256()
    h.update(f"episodes={len(dataset)};frames={dataset.info.get('total_frames')};{spec}\n".encode())
    h.update(repr(chosen).encode())
    # Every tensor of the observation (a dataclass of tensors, or of tuples of them: one per camera), in
    # field order, then the targets.
    tensors: list[Any] = []
    for f in dataclasses.fields(obs):
        value = getattr(obs, f.name)
        tensors.extend(value if isinstance(value, tuple | list) else [value])
    for t in (*tensors, actions):
        if t is not None:
            h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def compression_plan_config(
    config: Any,
    target: str,
    source: Any,
    calibration: Path | None,
    frames: int,
    mixed_plan: Path | None,
    seed: int,
    log: Callable[[str], None],
) -> Any:
    """`config` with calibration observations (from --calibration) and fp32 layers (from --mixed-plan)."""
    from hotloop.compile.raw_batches import is_raw_batch_folder
    from hotloop.compile.sources import load_target

    fp32_layers = read_mixed_plan(mixed_plan) if mixed_plan is not None else {}
    calib = None
    if calibration is not None and is_raw_batch_folder(Path(calibration)):
        calib = raw_calibration(target, source, calibration, frames)
        log(
            f"calibration: {len(calib)} raw frames to calibrate, {len(calib.held_out)} held out to judge "
            f"every plan on (sha256 {calib.sha256[:12]})"
        )
    elif calibration is not None:
        spec = CalibrationSpec(count=frames, seed=seed)
        dataset = open_dataset(calibration, "--calibration")
        _, adapter = load_target(target, dataset, seed, model=source.model)
        calib = load_calibration(calibration, adapter, spec, "--calibration")
        perturbed = f", recorded with --perturb {calib.perturb}" if calib.perturb else ""
        log(
            f"calibration: {len(calib)} frames from {len(set(e for e, _ in calib.frames))} episodes "
            f"(sha256 {calib.sha256[:12]}{perturbed})"
        )
    return replace(config, calibration=calib, fp32_layers=fp32_layers)


DEMO_TASK = "conveyor-pick"  # the built-in task the shipped demo policies were trained on


def raw_calibration(target: str, source: Any, folder: str | Path, frames: int) -> CalibrationSet:
    """A folder of raw LeRobot batches (`hotloop.compile.raw_batches`) as a calibration set whose
    held-out frames judge the plan."""
    from hotloop.compile.raw_batches import raw_observations

    got = raw_observations(target, source, folder, frames)
    return CalibrationSet(
        obs=got.family.stack(got.calibrate),
        actions=torch.zeros(0),
        frames=tuple((0, i) for i in got.calibrate_frames),
        sha256=got.raw.sha256,
        dataset=f"{got.raw.root.resolve()} ({len(got.raw.frames)} raw frames)",
        dropped_duplicates=0,
        family=got.family,
        held_out=tuple(got.held_out),
    )


def judged_on_held_out(source: Any, calib: CalibrationSet | None) -> Any:
    """`source` whose candidate screen and whole-plan checks run on the calibration's held-out frames
    (when it has any) instead of the source's random observations."""
    if calib is None or not calib.held_out:
        return source
    first, *rest = calib.held_out
    return replace(source, obs=first, plan_checks=tuple((o, source.noise) for o in rest))


def task_calibration(target: str, source: Any, count: int, seed: int) -> CalibrationSet | None:
    """Calibration frames a target trained on a built-in task records by itself: one start frame of
    its task per seed (belt speed and box position vary), as its model sees them. None for a target
    without a task of its own (it needs --calibration)."""
    from hotloop.targets import TargetOptions, find_target

    entry = find_target(target)
    if entry.task_observations is None:
        return None
    observations = entry.build_task_observations(target, TargetOptions(seed=seed), DEMO_TASK, count)
    family = source.family
    obs = family.stack(observations)
    h = hashlib.sha256(f"{target};{DEMO_TASK};seeds {seed}..{seed + count - 1}\n".encode())
    for f in dataclasses.fields(obs):
        value = getattr(obs, f.name)
        for t in value if isinstance(value, tuple | list) else [value]:
            if isinstance(t, Tensor):
                h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return CalibrationSet(
        obs=obs,
        actions=torch.zeros(0),
        frames=tuple((seed + i, 0) for i in range(count)),
        sha256=h.hexdigest(),
        dataset=f"{DEMO_TASK} start frames, seeds {seed}-{seed + count - 1}",
        dropped_duplicates=0,
        family=family,
    )


def read_mixed_plan(path: Path) -> dict[str, list[str]]:
    from hotloop.errors import ConfigError
    from hotloop.io import read_json_file

    try:
        data = read_json_file(path, "--mixed-plan")
        layers = data["mixed_precision"]["fp32_layers"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(
            f"--mixed-plan {path} is not a `hotloop sensitivity --json` result with a mixed-precision plan; "
            "run `hotloop sensitivity TARGET --data DIR --tolerance cos:0.99 --json FILE` first"
        ) from None
    if not isinstance(layers, dict) or not all(isinstance(v, list) for v in layers.values()):
        raise ConfigError(f"--mixed-plan {path}: fp32_layers must map sub-engines to layer lists")
    return {str(k): [str(n) for n in v] for k, v in layers.items()}
