"""A reference run (the format of docs/verify.md) and its comparison with what hotloop computes.

A reference run is a folder of arrays a LeRobot policy produced for one batch (the parity fixtures are
ones; `benchmarks/lerobot_reference_run.py` writes one for a user's own checkpoint):

| file | holds |
|---|---|
| `raw_inputs.npz` | what a robot hands the preprocessor, under LeRobot's batch keys (`task` as text) |
| `inputs.npz` | what the policy's `predict_action_chunk` receives (the preprocessor's output) |
| `noise.npy` | the sampler's starting noise (flow matching, diffusion) |
| `step_noise.npy` | DDPM's per-step variance noise (steps, batch, horizon, action) |
| `actions.npy` | `predict_action_chunk`'s output (model space) |
| `raw_actions.npy` | those actions through the postprocessor (robot units) |
| `intermediates.npz` | per-stage tensors, named as the family's intermediates function names them |

Every file is optional except the actions of at least one space; a family compares what is there. An
array whose shape does not fit the checkpoint is refused naming the file and key (`ReferenceError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.records import plain_fields

FILES = (
    "raw_inputs.npz",
    "inputs.npz",
    "noise.npy",
    "step_noise.npy",
    "actions.npy",
    "raw_actions.npy",
    "intermediates.npz",
)


@dataclass(frozen=True)
class Comparison:
    """One output of hotloop against the reference's array of the same name."""

    name: str
    space: str  # "raw" (robot units), "model" (the policy's own space), "stage" (an intermediate)
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float  # max |got - want| / (max |want| + 1e-12)
    cosine: float
    tolerance: float  # max_abs allowed (of judged_abs where that is set)
    # For a stage that amplifies an upstream error by a known gain (the diffusion x0 prediction), the max abs
    # error divided by that gain, per leading index: what the tolerance judges; judged_as says how.
    judged_abs: float | None = None
    judged_as: str = ""

    @property
    def ok(self) -> bool:
        return (self.max_abs if self.judged_abs is None else self.judged_abs) <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "space": self.space,
            "shape": list(self.shape),
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "cosine": self.cosine,
            "tolerance": self.tolerance,
            "judged_abs": self.judged_abs,
            "judged_as": self.judged_as,
            "ok": self.ok,
        }


def compare(
    name: str,
    space: str,
    got: Any,
    want: Any,
    tolerance: float,
    where: str = "",
    gain: tuple[np.ndarray, str] | None = None,
) -> Comparison:
    """`got` (hotloop's) against `want` (the reference's), float64; a shape mismatch is a ConfigError
    naming the array (the reference does not fit the checkpoint), not a large error. `gain`: per index of
    the leading axis, the factor by which this stage multiplies an upstream error, and its formula; the
    tolerance then judges the error divided by it (the raw max abs is still reported)."""
    g = np.asarray(got.detach().cpu() if isinstance(got, Tensor) else got, dtype=np.float64)
    w = np.asarray(want.detach().cpu() if isinstance(want, Tensor) else want, dtype=np.float64)
    if g.shape != w.shape:
        raise ConfigError(
            f"{where or 'the reference'}: {name} has shape {w.shape}; this checkpoint gives {g.shape} "
            "(a reference run made for another checkpoint or batch)"
        )
    diff = np.abs(g - w)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(w).max()) if w.size else 0.0
    gn, wn = np.linalg.norm(g), np.linalg.norm(w)
    cosine = float((g.ravel() @ w.ravel()) / (gn * wn)) if gn > 0 and wn > 0 else float(gn == wn)
    judged_abs, judged_as = None, ""
    if gain is not None and diff.size:
        factors, formula = gain
        per_index = diff.reshape(diff.shape[0], -1).max(axis=1)
        judged_abs = float((per_index / np.asarray(factors, dtype=np.float64).reshape(-1)).max())
        judged_as = f"max abs / {formula}"
    return Comparison(
        name,
        space,
        tuple(w.shape),
        max_abs,
        max_abs / (scale + 1e-12),
        cosine,
        tolerance,
        judged_abs,
        judged_as,
    )


class ReferenceRun:
    """The arrays of a reference folder, read on first use; missing files are None."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise ConfigError(f"--reference {self.folder}: not a folder; give the folder of a reference run")
        present = [f for f in FILES if (self.folder / f).is_file()]
        if "actions.npy" not in present and "raw_actions.npy" not in present:
            raise ConfigError(
                f"--reference {self.folder}: holds neither actions.npy nor raw_actions.npy, so there is "
                "nothing to compare with (docs/verify.md lists the files; benchmarks/lerobot_reference_run.py "
                "writes them)"
            )
        self._cache: dict[str, Any] = {}

    def has(self, file: str) -> bool:
        return (self.folder / file).is_file()

    def array(self, file: str) -> np.ndarray | None:
        if file not in self._cache:
            path = self.folder / file
            self._cache[file] = _load_npy(path) if path.is_file() else None
        return self._cache[file]  # type: ignore[no-any-return]

    def arrays(self, file: str) -> dict[str, np.ndarray] | None:
        if file not in self._cache:
            path = self.folder / file
            self._cache[file] = _load_npz(path) if path.is_file() else None
        return self._cache[file]  # type: ignore[no-any-return]

    def where(self, file: str) -> str:
        return str(self.folder / file)

    def starting_noise(self, fallback: np.ndarray | None = None) -> Tensor:
        """noise.npy (the sampler's starting noise) as float32, else `fallback`; refused naming the folder
        when there is neither (a flow-matching family cannot be compared without it)."""
        noise = self.array("noise.npy")
        if noise is None:
            noise = fallback
        if noise is None:
            raise ConfigError(f"{self.folder}: noise.npy is missing (the sampler's starting noise)")
        return torch.from_numpy(noise).float()


def _load_npy(path: Path) -> np.ndarray:
    try:
        value = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ConfigError(f"{path}: not a readable .npy array ({exc}); rewrite it with numpy.save") from None
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        if hasattr(value, "close"):
            value.close()  # an .npz archive under an .npy name
        raise ConfigError(f"{path}: not a numeric .npy array; rewrite it with numpy.save")
    return value


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    import zipfile

    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ConfigError(
            f"{path}: not a readable .npz archive ({type(exc).__name__}: {str(exc)[:120]}); rewrite it with "
            "numpy.savez"
        ) from None
    for key, value in arrays.items():  # a member that is not a .npy comes back as raw bytes
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biufUS":
            what = type(value).__name__ if not isinstance(value, np.ndarray) else f"dtype {value.dtype}"
            raise ConfigError(
                f"{path}: key {key!r} is not a numeric or text array ({what}); rewrite it with numpy.savez"
            )
    return arrays


def unread_arrays(run: ReferenceRun, report: VerifyReport) -> list[str]:
    """Notes naming what a reference folder holds that the comparison did not use: array files hotloop
    does not know (a misspelt `action.npy`), and intermediates the family computes nothing by that name
    for. Said, never silently dropped."""
    notes = []
    strangers = sorted(
        p.name for p in run.folder.iterdir() if p.suffix in (".npy", ".npz") and p.name not in FILES
    )
    if strangers:
        notes.append(
            f"not read: {', '.join(strangers)} in {run.folder} (a reference run's files are "
            f"{', '.join(FILES)}; docs/verify.md)"
        )
    stages = run.arrays("intermediates.npz") if run.has("intermediates.npz") else None
    compared = {c.name for c in report.comparisons if c.space == "stage"}
    unknown = sorted(k for k in (stages or {}) if k not in compared)
    if unknown:
        shown = ", ".join(unknown[:8]) + (f", ... ({len(unknown) - 8} more)" if len(unknown) > 8 else "")
        notes.append(
            f"not compared: {shown} in {run.where('intermediates.npz')} ({report.family} computes no stage "
            "of that name)"
        )
    return notes


def as_batch(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """npz arrays as a LeRobot batch: numeric arrays as tensors, text arrays (e.g. `task`) as lists."""
    out: dict[str, Any] = {}
    for key, value in arrays.items():
        out[key] = [str(v) for v in value.tolist()] if value.dtype.kind in "US" else torch.from_numpy(value)
    return out


def stage_comparisons(
    got: Mapping[str, Tensor],
    want: Mapping[str, np.ndarray] | None,
    tolerance: float,
    where: str,
    gains: Mapping[str, tuple[np.ndarray, str]] | None = None,
) -> list[Comparison]:
    """Every intermediate both sides name (in the reference's order); names only one side has are
    skipped (a family names what it can compute). `gains`: per stage name, see `compare`."""
    if want is None:
        return []
    gains = gains or {}
    return [
        compare(k, "stage", got[k], v, tolerance, where, gains.get(k)) for k, v in want.items() if k in got
    ]


@dataclass(frozen=True)
class VerifyReport:
    checkpoint: str
    reference: str
    family: str
    comparisons: tuple[Comparison, ...]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons)

    def to_dict(self) -> dict[str, Any]:
        return {
            **plain_fields(self, until="family"),
            "ok": self.ok,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "notes": list(self.notes),
        }
