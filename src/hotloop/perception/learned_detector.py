"""The learned box detector: a small fully convolutional centre-heatmap network (CenterNet-style).

Why a heatmap and not box regression from a pooled feature: the network is fully convolutional, so
the same weights run at any input resolution that is a multiple of its stride (4): the resolution knob
of `hotloop perception-curve` is then one model run at 32..128 px, not one model per point; and a peak
in a map localises by where it is, which a small network learns in minutes, where regressing
coordinates from a pooled feature must learn the geometry of the whole image. Per output cell (one per
4x4 input pixels) it predicts: the logit that the box centre is in this cell, the centre's offset
inside the cell (sub-cell accuracy: at 32 px one cell is 8 % of the image), and the box's width and
height in image fractions (resolution-free). The centre it finds is the projected 3-D centre of the
box, not the centroid of its visible faces, so back-projection onto the belt plane needs none of the
colour threshold's silhouette correction.

`LearnedBoxDetector` has `ColourBoxDetector`'s interface (`detect(image) -> Detection`): the pipeline's
perception layer takes either. It resamples the camera image to its input resolution (area averaging
down, bilinear up), runs the network (eager torch, or an ONNX Runtime session: the compiled path) and
back-projects the centre through the calibrated camera.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.io import read_json_file

STRIDE = 4  # input pixels per output cell
SIZE_SCALE = 10.0  # the size channels predict width/height x this (targets near 1)
CHANNELS = 5  # heat logit, offset x, offset y, width, height
WEIGHTS = "detector.safetensors"
META = "detector.json"


@dataclass(frozen=True)
class DetectorConfig:
    width: int = 16  # channels of the first stage (the second has twice as many)
    threshold: float = 0.3  # a heat peak below this is "no detection"
    resolution: int = 64  # default input resolution (px, square)
    resolutions: tuple[int, ...] = (32, 48, 64, 96, 128)  # what it was trained at

    def __post_init__(self) -> None:
        check_resolution(self.resolution)
        if not 0.0 < self.threshold < 1.0:
            raise ConfigError(f"detector threshold must be in (0, 1) (got {self.threshold})")


def check_resolution(resolution: int, flag: str = "resolution") -> int:
    """A square input size the network can take: a multiple of its stride, 16..512 px."""
    if (
        isinstance(resolution, bool)
        or not isinstance(resolution, int)
        or resolution % STRIDE
        or not 16 <= resolution <= 512
    ):
        raise ConfigError(
            f"{flag} {resolution!r}: the learned detector takes square inputs of 16..512 px in steps of "
            f"{STRIDE} (e.g. 32, 48, 64, 96, 128)"
        )
    return resolution


def build_network(width: int = 16) -> Any:
    """The network: (B, 3, H, W) float in [0, 1] -> (B, 5, H/4, W/4)."""
    from torch import nn

    c1, c2 = width, 2 * width

    def conv(cin: int, cout: int, stride: int = 1, dilation: int = 1) -> list[Any]:
        return [nn.Conv2d(cin, cout, 3, stride, padding=dilation, dilation=dilation), nn.ReLU(inplace=True)]

    class CentreNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # Receptive field 67 px at the head: a 128 px view's box (~14 px) with its surroundings.
            self.body = nn.Sequential(
                *conv(3, c1, 2), *conv(c1, c1), *conv(c1, c2, 2), *conv(c2, c2), *conv(c2, c2, dilation=2),
                *conv(c2, c2, dilation=4),
            )  # fmt: skip
            self.head = nn.Conv2d(c2, CHANNELS, 1)

        def forward(self, x: Any) -> Any:
            return self.head(self.body(x * 2.0 - 1.0))

    net = CentreNet()
    with_bias = net.head.bias
    if with_bias is not None:  # start from "rarely a centre" (CenterNet's prior): stable early training
        import torch

        with torch.no_grad():
            with_bias[0] = -2.2
    return net


@dataclass(frozen=True)
class BoxEstimate:
    """One decoded output: peak score, centre (column, row) and box (x0, y0, x1, y1), image fractions."""

    score: float
    centre: np.ndarray
    bbox: np.ndarray


def decode(out: np.ndarray) -> BoxEstimate:
    """The strongest peak of one output map (5, h, w)."""
    heat = out[0]
    i, j = np.unravel_index(int(np.argmax(heat)), heat.shape)
    h, w = heat.shape
    score = float(_sigmoid(heat[i, j]))
    cx = (j + float(_sigmoid(out[1, i, j]))) / w
    cy = (i + float(_sigmoid(out[2, i, j]))) / h
    bw = max(0.0, float(out[3, i, j])) / SIZE_SCALE
    bh = max(0.0, float(out[4, i, j])) / SIZE_SCALE
    return BoxEstimate(
        score, np.array([cx, cy]), np.array([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2])
    )


def _sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-x))


def resample(images: np.ndarray, resolution: int) -> np.ndarray:
    """(N, S, S, 3) uint8 -> (N, 3, R, R) float32 in [0, 1]: area averaging down, bilinear up."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.array(images, dtype=np.float32)).permute(0, 3, 1, 2).div_(255.0)
    if x.shape[-1] != resolution:
        mode = "area" if resolution < x.shape[-1] else "bilinear"
        kwargs = {} if mode == "area" else {"align_corners": False}
        x = F.interpolate(x, size=(resolution, resolution), mode=mode, **kwargs)
    return x.contiguous().numpy()


class DetectorModel:
    """The trained network and its config; runs eager (torch) or compiled (ONNX Runtime sessions, one
    per resolution, exported on first use)."""

    def __init__(self, net: Any, config: DetectorConfig, meta: dict[str, Any] | None = None) -> None:
        self.net = net.eval()
        self.config = config
        self.meta = dict(meta or {})
        self._sessions: dict[int, Any] = {}

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.net.parameters())

    def run(self, x: np.ndarray) -> np.ndarray:
        """(B, 3, R, R) float32 -> (B, 5, R/4, R/4), eager torch."""
        import torch

        with torch.inference_mode():
            return self.net(torch.from_numpy(x)).numpy()  # type: ignore[no-any-return]

    def export_onnx(self, path: Path, resolution: int) -> Path:
        import torch

        from hotloop.compile.backends.base import OnnxGraph
        from hotloop.compile.export import export_onnx

        check_resolution(resolution)
        example = (torch.zeros(1, 3, resolution, resolution),)
        graph = OnnxGraph(f"detector-{resolution}", path, example, ("image",), ("maps",), module=self.net)
        return export_onnx(graph, path)

    def save(self, folder: str | Path, store_dtype: str = "float16") -> Path:
        """Write the weights (float16 by default: half the bytes, loaded as float32) and detector.json."""
        import torch

        from hotloop.io import atomic_write_json, save_tensors

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        dtype = getattr(torch, store_dtype)
        tensors = {k: v.detach().to(dtype).contiguous() for k, v in self.net.state_dict().items()}
        save_tensors(tensors, str(folder / WEIGHTS), metadata={"format": "pt"})
        atomic_write_json(
            folder / META, {**self.meta, "config": asdict(self.config), "stored_dtype": store_dtype}
        )
        return folder


def load_detector(folder: str | Path | None = None) -> DetectorModel:
    """The detector in `folder` (default: the shipped `demo:detector` assets), as float32."""
    import torch
    from safetensors.torch import load_file

    from hotloop.finite import check_finite_weights

    folder = Path(folder) if folder is not None else ASSET_DIR
    if not (folder / WEIGHTS).is_file() or not (folder / META).is_file():
        raise ConfigError(
            f"no learned detector in {folder} (needs {WEIGHTS} and {META}); train one with "
            "`hotloop train-demo --variant detector -o DIR`"
        )
    meta = read_json_file(folder / META)
    try:
        raw = dict(meta.get("config", {}))
        raw["resolutions"] = tuple(raw.get("resolutions", DetectorConfig.resolutions))
        config = DetectorConfig(**raw)
    except (AttributeError, TypeError, ValueError) as e:
        raise ConfigError(f"{folder / META}: not a detector description ({e}); train it again") from None
    net = build_network(config.width)
    state = {k: v.to(torch.float32) for k, v in load_file(str(folder / WEIGHTS)).items()}
    check_finite_weights(state.items(), folder / WEIGHTS)
    net.load_state_dict(state)
    return DetectorModel(net, config, {k: v for k, v in meta.items() if k != "config"})


ASSET_DIR = Path(__file__).resolve().parents[1] / "assets" / "demo_detector"
PLAN_KIND = "detector-int8-plan"


class PlanModel:
    """A detector plan `perception-curve --int8` wrote (model.onnx + manifest.json), run by ONNX Runtime at
    its one input resolution; `DetectorModel`'s interface for the pipeline."""

    def __init__(self, folder: Path) -> None:
        import onnxruntime as ort

        manifest = read_json_file(folder / "manifest.json")
        try:
            raw = dict(manifest["detector"]["config"])
            raw["resolutions"] = tuple(raw.get("resolutions", DetectorConfig.resolutions))
            self.config = DetectorConfig(**{**raw, "resolution": int(manifest["resolution"])})
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(
                f"{folder / 'manifest.json'}: not a detector plan ({type(e).__name__}: {e}); write it again"
            ) from None
        self.meta = manifest
        import onnx

        from hotloop.finite import check_finite_onnx

        check_finite_onnx(onnx.load(str(folder / "model.onnx")), folder / "model.onnx")
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(folder / "model.onnx"), so, providers=["CPUExecutionProvider"]
        )

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([self.session.run(None, {"image": row[None]})[0] for row in x])


def load_any(folder: str | Path | None) -> Any:
    """The detector in `folder`: a trained detector (`load_detector`) or an int8 plan (`PlanModel`)."""
    if folder is not None and (Path(folder) / "manifest.json").is_file():
        meta = read_json_file(Path(folder) / "manifest.json")
        if not isinstance(meta, dict) or meta.get("kind") != PLAN_KIND:
            kind = meta.get("kind") if isinstance(meta, dict) else None
            raise ConfigError(f"{folder} holds a manifest.json that is not a detector plan (kind {kind!r})")
        return PlanModel(Path(folder))
    return load_detector(folder)


@dataclass
class LearnedBoxDetector:
    """The learned detector in the pipeline's perception layer (`ColourBoxDetector`'s interface)."""

    model: Any  # DetectorModel, or a PlanModel (ONNX Runtime at its own resolution)
    camera: Any  # PinholeCamera at the camera image's size
    plane_z: float
    resolution: int
    runtime: str = "eager"  # or "onnxruntime"
    _session: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_resolution(self.resolution, "--pipeline resolution=")
        if self.runtime not in ("eager", "onnxruntime"):
            raise ConfigError(f"detector runtime {self.runtime!r}: use eager or onnxruntime")

    def estimate(self, image: np.ndarray) -> BoxEstimate:
        img = np.asarray(image)
        if img.ndim != 3 or img.shape[2] != 3 or img.shape[0] != self.camera.size:
            raise ConfigError(
                f"the box detector needs a {self.camera.size}x{self.camera.size} RGB image (got {img.shape})"
            )
        x = resample(img[None], self.resolution)
        if self.runtime == "onnxruntime":
            out = self._onnx(x)
        else:
            out = self.model.run(x)
        return decode(out[0])

    def _onnx(self, x: np.ndarray) -> np.ndarray:
        if self._session is None:
            import tempfile

            import onnxruntime as ort

            with tempfile.TemporaryDirectory() as tmp:
                path = self.model.export_onnx(Path(tmp) / "detector.onnx", self.resolution)
                so = ort.SessionOptions()
                so.intra_op_num_threads = 1
                self._session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return self._session.run(None, {"image": x})[0]  # type: ignore[no-any-return]

    @property
    def centre_std_m(self) -> float | None:
        """The standard deviation (m, per axis on the belt) of this detector's centre at its resolution, from
        the held-out evaluation its training wrote (`detector.json`): what a tracker should take as its
        measurement noise. The centre error is a distance on the belt plane; for a 2-D Gaussian of
        per-axis std s its median is 1.177 s and its 95th percentile 2.448 s, and the larger of the two
        estimates is taken (the errors have a heavier tail than a Gaussian's). None when unknown (an int8
        plan: its manifest keeps no frame-level evaluation)."""
        evaluation = self.model.meta.get("evaluation") or {}
        stats = (evaluation.get("per_resolution") or {}).get(str(self.resolution))
        if self.resolution == self.camera.size == 64:  # the camera's own image, not a resampled render
            stats = (evaluation.get("camera_64px") or {}).get("learned", stats)
        if not stats or "centre_mm_p50" not in stats or "centre_mm_p95" not in stats:
            return None
        return max(stats["centre_mm_p50"] / 1.1774, stats["centre_mm_p95"] / 2.4477) / 1e3

    def detect(self, image: np.ndarray) -> Any:
        from hotloop.perception.box_detector import Detection

        est = self.estimate(image)
        if est.score < self.model.config.threshold:
            return Detection(None, 0)
        pixel = est.centre * self.camera.size
        position = self.camera.ray_to_plane(pixel, self.plane_z)
        area = float(np.prod(est.bbox[2:] - est.bbox[:2])) * self.camera.size**2
        return Detection(position, int(round(area)), completeness=est.score)
