"""Any ONNX detector on the resolution curve: accuracy as agreement with its own native-resolution output.

`hotloop perception-curve model.onnx --input NAME:1,3,H,W --images DIR`: the images (PNG/JPEG/BMP in
DIR, resized to each input size, RGB scaled to [0, 1], NCHW) are run at the native size H x W, whose
outputs are the reference, and at each resolution R (the shorter side R, the aspect kept, rounded to a
whole pixel). Agreement per output kind, read from the first output's shape:

- a map (rank 4: N, C, h, w; segmentation or heatmap): the output is resized to the reference's size
  (bilinear) and both are thresholded at `threshold` (probabilities; use 0 for logits), per channel;
  the score is the IoU of the two masks, averaged over images (an image where both are empty agrees);
- boxes (rank 2 or 3 with >= 4 columns, x0, y0, x1, y1 in input pixels): each reference box is matched
  to the predicted box of highest IoU after scaling the prediction to native pixels; the score is the
  mean matched IoU (a reference without boxes and a prediction without boxes agree).

A model whose input has fixed spatial dimensions cannot take another resolution: that is refused,
naming the resolution and the input's shape, before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


@dataclass(frozen=True)
class OnnxInput:
    name: str
    shape: tuple[int, int, int, int]  # N, C, H, W at native resolution


def parse_input(text: str) -> OnnxInput:
    """`NAME:1,3,H,W`."""
    name, sep, dims = text.partition(":")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if (
        not sep
        or not name.strip()
        or len(shape) != 4
        or min(shape) < 1
        or shape[0] != 1
        or shape[1] not in (1, 3)
    ):
        raise ConfigError(
            f"--input {text!r}: give NAME:1,C,H,W with C 1 or 3, e.g. --input images:1,3,256,256"
        )
    return OnnxInput(name.strip(), shape)  # type: ignore[arg-type]


def list_images(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise ConfigError(f"--images {folder} is not a folder of images")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ConfigError(f"--images {folder} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    return files


def input_size(native: tuple[int, int], resolution: int) -> tuple[int, int]:
    """(H, W) at `resolution`: the shorter side `resolution`, the aspect of the native size kept."""
    h, w = native
    scale = resolution / min(h, w)
    return max(1, round(h * scale)), max(1, round(w * scale))


class OnnxDetector:
    """An ONNX detector file with one image input; sessions per input size, one intra-op thread."""

    def __init__(self, path: Path, spec: OnnxInput) -> None:
        import onnx

        if not path.is_file():
            raise ConfigError(f"{path} is not a file; give an ONNX detector (model.onnx)")
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as e:  # noqa: BLE001 - any parse failure is the user's file
            raise ConfigError(f"{path} is not a readable ONNX model ({type(e).__name__})") from None
        from hotloop.finite import check_finite_onnx

        check_finite_onnx(model, path)
        inputs = {i.name: i for i in model.graph.input}
        if spec.name not in inputs:
            raise ConfigError(f"--input {spec.name!r}: the model's inputs are {', '.join(inputs)}")
        dims = inputs[spec.name].type.tensor_type.shape.dim
        self.declared: list[int | str] = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims
        ]
        if len(self.declared) != 4:
            raise ConfigError(
                f"--input {spec.name!r} has rank {len(self.declared)}; an image input is N, C, H, W"
            )
        self.path = path
        self.spec = spec
        self._sessions: dict[tuple[int, int], Any] = {}

    @property
    def native(self) -> tuple[int, int]:
        return self.spec.shape[2], self.spec.shape[3]

    def check_size(self, size: tuple[int, int], resolution: int) -> None:
        for axis, want in zip((2, 3), size, strict=True):
            fixed = self.declared[axis]
            if isinstance(fixed, int) and fixed > 0 and fixed != want:
                raise ConfigError(
                    f"--resolutions {resolution}: {self.path.name} takes a fixed input {self.spec.name} of shape "
                    f"{self.declared}, not {want} px on axis {axis}; drop that resolution or export with "
                    "dynamic height and width"
                )

    def session(self, size: tuple[int, int]) -> Any:
        if size not in self._sessions:
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            self._sessions[size] = ort.InferenceSession(
                str(self.path), so, providers=["CPUExecutionProvider"]
            )
        return self._sessions[size]

    def run(self, x: np.ndarray) -> np.ndarray:
        sess = self.session((x.shape[2], x.shape[3]))
        return np.asarray(sess.run(None, {self.spec.name: x})[0])


def load_images(files: list[Path], channels: int) -> list[np.ndarray]:
    from PIL import Image

    out = []
    for f in files:
        try:
            with Image.open(f) as im:
                out.append(np.asarray(im.convert("RGB" if channels == 3 else "L"), dtype=np.uint8))
        except Exception as e:  # noqa: BLE001 - an unreadable file is named
            raise ConfigError(f"--images: {f} is not a readable image ({type(e).__name__})") from None
    return out


def to_input(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(H, W[, 3]) uint8 -> (1, C, h, w) float32 in [0, 1], resized with area averaging / bilinear."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.array(image, dtype=np.float32)).div_(255.0)
    x = x[None, None] if x.ndim == 2 else x.permute(2, 0, 1)[None]
    if tuple(x.shape[-2:]) != size:
        mode = "area" if size[0] * size[1] < x.shape[-2] * x.shape[-1] else "bilinear"
        kwargs = {} if mode == "area" else {"align_corners": False}
        x = F.interpolate(x, size=size, mode=mode, **kwargs)
    return x.contiguous().numpy()


def map_agreement(ref: np.ndarray, out: np.ndarray, threshold: float) -> float:
    """Mask IoU of two (1, C, h, w) maps after resizing `out` to `ref`'s size."""
    import torch
    import torch.nn.functional as F

    if out.shape[-2:] != ref.shape[-2:]:
        out = F.interpolate(torch.from_numpy(out).float(), size=ref.shape[-2:], mode="bilinear").numpy()
    a, b = ref > threshold, out > threshold
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def box_agreement(ref: np.ndarray, out: np.ndarray, scale: tuple[float, float]) -> float:
    """Mean over reference boxes of the best IoU with a predicted box scaled by (sy, sx) to native pixels."""
    from hotloop.perception.detector_eval import box_iou

    r = ref.reshape(-1, ref.shape[-1])[:, :4].astype(np.float64)
    p = out.reshape(-1, out.shape[-1])[:, :4].astype(np.float64) * np.array(
        [scale[1], scale[0], scale[1], scale[0]]
    )
    if len(r) == 0:
        return 1.0 if len(p) == 0 else 0.0
    if len(p) == 0:
        return 0.0
    best = [float(box_iou(np.repeat(b[None], len(p), 0), p).max()) for b in r]
    return float(np.mean(best))


def output_kind(out: np.ndarray) -> str:
    if out.ndim == 4:
        return "map"
    if out.ndim in (2, 3) and out.shape[-1] >= 4:
        return "boxes"
    raise ConfigError(
        f"the model's first output has shape {list(out.shape)}: neither a map (N, C, h, w) nor boxes "
        "(..., K, >= 4); perception-curve cannot score it"
    )


def agreement(
    det: OnnxDetector,
    images: list[np.ndarray],
    references: list[np.ndarray],
    size: tuple[int, int],
    threshold: float,
) -> float:
    scores = []
    for img, ref in zip(images, references, strict=True):
        out = det.run(to_input(img, size))
        if output_kind(ref) == "map":
            scores.append(map_agreement(ref, out, threshold))
        else:
            native = det.native
            scores.append(box_agreement(ref, out, (native[0] / size[0], native[1] / size[1])))
    return float(np.mean(scores))
