"""Calibration inputs for an ONNX file (`hotloop compile model.onnx --input ... --calibration DIR`).

A policy target is calibrated on recorded episodes; an ONNX file from outside (a detector, a feature
net) has no episodes, so DIR holds its inputs directly, in any of these forms:

- `*.npz`: arrays named after the model's inputs, each the `--input` shape or a stack of them
  (one more leading axis: several samples in one file);
- `*.npy`: the same for a model with one input;
- images (`.png`, `.jpg`, `.jpeg`, `.bmp`) for a model with one NCHW float input of 1 or 3 channels:
  RGB (or grey) scaled to [0, 1] and resized to the stated H x W. A model trained on other scaling
  (mean / std normalisation, 0-255) must be given arrays instead: the quantizer's ranges come from
  these values.

The samples are split: every fourth one (at least one) is held out to judge each candidate's outputs
against ONNX Runtime fp32, the rest calibrate static int8. Both sets are real data, so a candidate is
judged on what the model will see, not on random noise.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hotloop.errors import ConfigError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
HELD_OUT_EVERY = 4
MAX_SAMPLES = 512  # more adds quantization time, not accuracy of the ranges


@dataclass(frozen=True)
class OnnxCalibration:
    calibrate: list[tuple[Tensor, ...]]
    held_out: list[tuple[Tensor, ...]]
    sha256: str
    source: str

    def manifest_entry(self) -> dict[str, Any]:
        return {
            "sha256": self.sha256,
            "dataset": self.source,
            "samples": len(self.calibrate),
            "held_out": len(self.held_out),
        }


def _samples(array: np.ndarray, shape: tuple[int, ...], where: str) -> list[np.ndarray]:
    if tuple(array.shape) == shape:
        return [array]
    if array.ndim == len(shape) + 1 and tuple(array.shape[1:]) == shape:
        return list(array)
    raise ConfigError(
        f"--calibration {where}: shape {tuple(array.shape)} is neither the --input shape {shape} nor a stack "
        f"of them (K, {', '.join(map(str, shape))})"
    )


def _image(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    if len(shape) != 4 or shape[0] != 1 or shape[1] not in (1, 3):
        raise ConfigError(
            f"--calibration {path.name}: images feed one NCHW input of batch 1 with 1 or 3 channels; the "
            f"input is {shape}: give .npy / .npz arrays instead"
        )
    try:
        with Image.open(path) as img:
            mode = "RGB" if shape[1] == 3 else "L"
            sized = img.convert(mode).resize((shape[3], shape[2]), Image.Resampling.BILINEAR)
            pixels = np.asarray(sized, dtype=np.float32) / 255.0
    except (OSError, UnidentifiedImageError) as exc:
        raise ConfigError(f"--calibration {path}: not a readable image ({exc})") from None
    chw = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
    return chw[None]


def load_onnx_calibration(
    folder: Path, names: tuple[str, ...], examples: tuple[Tensor, ...], limit: int = MAX_SAMPLES
) -> OnnxCalibration:
    """The samples in `folder` (the first `limit`, files in name order) for inputs `names` at the shapes
    and dtypes of `examples`."""
    if limit < 1:
        raise ConfigError(f"--calibration-frames must be >= 1 (got {limit})")
    limit = min(limit, MAX_SAMPLES)
    if not folder.is_dir():
        raise ConfigError(
            f"--calibration {folder}: not a folder; for an ONNX model pass a folder of .npz / .npy arrays or images"
        )
    shapes = {n: tuple(x.shape) for n, x in zip(names, examples, strict=True)}
    files = sorted(p for p in folder.iterdir() if p.is_file())
    samples: list[dict[str, np.ndarray]] = []
    for path in files:
        suffix = path.suffix.lower()
        if suffix == ".npz":
            try:
                with np.load(path, allow_pickle=False) as data:
                    arrays = {k: np.asarray(data[k]) for k in data.files}
            except (OSError, ValueError) as exc:
                raise ConfigError(f"--calibration {path}: not a readable .npz ({exc})") from None
            missing = [n for n in names if n not in arrays]
            if missing:
                raise ConfigError(
                    f"--calibration {path.name}: no array named {', '.join(missing)} (it holds "
                    f"{', '.join(sorted(arrays)) or 'none'}; the model's inputs are {', '.join(names)})"
                )
            per_input = {n: _samples(arrays[n], shapes[n], f"{path.name}[{n}]") for n in names}
            counts = {len(v) for v in per_input.values()}
            if len(counts) != 1:
                raise ConfigError(f"--calibration {path.name}: its inputs hold different sample counts")
            samples += [{n: per_input[n][k] for n in names} for k in range(counts.pop())]
        elif suffix == ".npy" or suffix in IMAGE_SUFFIXES:
            if len(names) != 1:
                raise ConfigError(
                    f"--calibration {path.name}: the model has {len(names)} inputs; give .npz files with "
                    f"arrays named {', '.join(names)}"
                )
            (name,) = names
            if suffix == ".npy":
                try:
                    array = np.load(path, allow_pickle=False)
                except (OSError, ValueError) as exc:
                    raise ConfigError(f"--calibration {path}: not a readable .npy ({exc})") from None
                samples += [{name: a} for a in _samples(np.asarray(array), shapes[name], path.name)]
            else:
                samples.append({name: _image(path, shapes[name])})
        if len(samples) >= limit:
            break
    if not samples:
        raise ConfigError(
            f"--calibration {folder}: no .npz, .npy or image files in it (see docs/compile.md, ONNX models)"
        )
    digest = hashlib.sha256()
    tensors: list[tuple[Tensor, ...]] = []
    for k, sample in enumerate(samples[:limit]):
        row = []
        for name, example in zip(names, examples, strict=True):
            a = sample[name]
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                raise ConfigError(f"--calibration sample {k} ({name}) holds NaN or Inf; remove it")
            t = torch.from_numpy(np.ascontiguousarray(a)).to(example.dtype)
            digest.update(t.numpy().tobytes())
            row.append(t)
        tensors.append(tuple(row))
    held = [t for k, t in enumerate(tensors) if k % HELD_OUT_EVERY == HELD_OUT_EVERY - 1] or tensors[-1:]
    calibrate = [t for k, t in enumerate(tensors) if k % HELD_OUT_EVERY != HELD_OUT_EVERY - 1] or tensors
    return OnnxCalibration(calibrate, held, digest.hexdigest(), str(folder))
