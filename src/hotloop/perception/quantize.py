"""An int8 plan of the learned detector with an accuracy gate stated in the detector's own terms (R3.3).

The network is exported to ONNX at one input resolution and quantized statically by ONNX Runtime (QDQ,
int8 weights per output channel, uint8 activations whose ranges come from calibration frames). The
gate compares the int8 plan with the float32 network on held-out frames, on what the pipeline uses:

- `iou:T`: the mean IoU of the int8 box with the float32 box, over the scored frames the float32
  network detects (an int8 miss counts 0), at least T;
- `centre-mm:X`: the p95 distance on the belt plane between the two centres, at most X mm (an int8
  miss counts as infinitely far).

When the gate fails, convolutions go back to float32 one at a time from the output end (the head
first: its heat logits and sub-cell offsets are where an int8 step costs the most), re-quantizing and
re-scoring each time, until it passes; the layers kept in float32 are named in the plan's manifest.
If every layer is back in float32 the plan is the float32 graph and the manifest says so.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.perception.learned_detector import PLAN_KIND

TOLERANCE_KINDS = ("iou", "centre-mm")


@dataclass(frozen=True)
class Tolerance:
    kind: str
    value: float

    def passes(self, measured: float) -> bool:
        return measured >= self.value if self.kind == "iou" else measured <= self.value

    def describe(self) -> str:
        return f"{self.kind}:{self.value:g}"


def parse_tolerance(text: str) -> Tolerance:
    kind, sep, value = text.partition(":")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not sep or kind not in TOLERANCE_KINDS or not math.isfinite(number):
        raise ConfigError(
            f"--tolerance {text!r}: give iou:T (T in (0, 1]) or centre-mm:X (X > 0), e.g. iou:0.85"
        )
    if kind == "iou" and not 0 < number <= 1:
        raise ConfigError(f"--tolerance {text!r}: an IoU gate is in (0, 1]")
    if kind == "centre-mm" and not number > 0:
        raise ConfigError(f"--tolerance {text!r}: a centre gate is a distance > 0 mm")
    return Tolerance(kind, number)


def agreement(
    reference: np.ndarray, candidate: np.ndarray, frames: Any, threshold: float, plane_z: float, kind: str
) -> float:
    """The gate's measure of `candidate` maps against `reference` maps (both (N, 5, g, g)) on `frames`."""
    from hotloop.perception.detector_eval import box_iou
    from hotloop.perception.learned_detector import decode

    scored = frames.visible & frames.on_belt
    ref = [decode(m) for m in reference]
    cand = [decode(m) for m in candidate]
    use = [i for i in np.flatnonzero(scored) if ref[i].score >= threshold]
    if not use:
        raise ConfigError(
            "the float32 detector finds the box in none of the held-out frames; nothing to gate on"
        )
    hit = np.array([cand[i].score >= threshold for i in use])
    if kind == "iou":
        ious = box_iou(np.stack([cand[i].bbox for i in use]), np.stack([ref[i].bbox for i in use]))
        return float(np.where(hit, ious, 0.0).mean())
    cam, size = frames.camera, frames.size
    dist = [
        1e3
        * float(
            np.linalg.norm(
                cam.ray_to_plane(cand[i].centre * size, plane_z)
                - cam.ray_to_plane(ref[i].centre * size, plane_z)
            )
        )
        if h
        else math.inf
        for i, h in zip(use, hit, strict=True)
    ]
    return float(np.percentile(dist, 95))


def conv_nodes(path: Path) -> list[str]:
    import onnx

    return [n.name for n in onnx.load(str(path)).graph.node if n.op_type == "Conv"]


def module_name(node: str) -> str:
    """The torch module of an exported node (`/body/body.10/Conv` -> `body.10`, `/head/Conv` -> `head`)."""
    parts = [p for p in node.split("/") if p]
    return parts[-2] if len(parts) >= 2 else node


def session(path: Path) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def run_session(sess: Any, batch: np.ndarray) -> np.ndarray:
    return np.concatenate([sess.run(None, {"image": row[None]})[0] for row in batch])


def quantize_detector(
    model: Any,
    resolution: int,
    calibration: Any,
    held_out: Any,
    tolerance: Tolerance,
    out_dir: Path,
    plane_z: float,
) -> dict[str, Any]:
    """Write `out_dir/model.onnx` (the int8 plan that passes the gate) and `manifest.json`; returns the
    manifest. `calibration`, `held_out`: DetectorFrames."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from hotloop.compile.backends.quantize import CalibrationRows, quiet_ort_quantization
    from hotloop.compile.cpu_features import cpu_flags
    from hotloop.io import atomic_write_json
    from hotloop.perception.detector_eval import learned_outputs
    from hotloop.perception.learned_detector import resample

    out_dir.mkdir(parents=True, exist_ok=True)
    fp32_path = model.export_onnx(out_dir / "fp32.onnx", resolution)
    reference = learned_outputs(model, held_out, resolution)
    calib = [resample(calibration.images[i : i + 1], resolution) for i in range(len(calibration))]
    nodes = conv_nodes(fp32_path)
    reduce_range = not ({"avx512_vnni", "avx_vnni"} & cpu_flags())
    plan = out_dir / "model.onnx"
    excluded: list[str] = []
    tried = []
    while True:
        if len(excluded) == len(nodes):  # everything back in float32: the plan is the float32 graph
            plan.write_bytes(fp32_path.read_bytes())
            measured = 1.0 if tolerance.kind == "iou" else 0.0
            tried.append({"fp32_layers": list(excluded), tolerance.kind: measured})
            break
        with quiet_ort_quantization(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_static(
                str(fp32_path),
                str(plan),
                CalibrationRows([{"image": b} for b in calib]),  # resampled frames
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                reduce_range=reduce_range,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                op_types_to_quantize=["Conv"],
                nodes_to_exclude=list(excluded),
            )
        maps = learned_outputs(model, held_out, resolution, lambda b, s=session(plan): run_session(s, b))
        measured = agreement(reference, maps, held_out, model.config.threshold, plane_z, tolerance.kind)
        tried.append({"fp32_layers": list(excluded), tolerance.kind: measured})
        if tolerance.passes(measured):
            break
        excluded.append(nodes[len(nodes) - 1 - len(excluded)])  # the next layer from the output end
    manifest = {
        "kind": PLAN_KIND,
        "precision": "int8" if len(excluded) < len(nodes) else "float32",
        "resolution": resolution,
        "input": {"name": "image", "shape": [1, 3, resolution, resolution]},
        "tolerance": tolerance.describe(),
        "gate": {tolerance.kind: measured, "passed": tolerance.passes(measured), "frames": len(held_out)},
        "fp32_layers": excluded,
        "fp32_modules": [module_name(n) for n in excluded],
        "conv_layers": nodes,
        "attempts": tried,
        "calibration_frames": len(calibration),
        "quantizer": {
            "onnxruntime": ort.__version__,
            "format": "QDQ",
            "weights": "int8 per channel",
            "activations": "uint8",
            "reduce_range": reduce_range,
        },
        "detector": {
            **{k: v for k, v in model.meta.items() if k not in ("evaluation", "training")},
            "config": asdict(model.config),
        },
    }
    atomic_write_json(out_dir / "manifest.json", manifest)
    return manifest


def build_int8_plan(
    model: Any,
    resolution: int,
    calibration: Any,
    frames: Any,
    gate: Tolerance,
    out: Path,
    plane_z: float,
    iters: int,
    warmup: int,
    fp32_session: Any = None,
) -> dict[str, Any]:
    """`quantize_detector`, then the plan scored against the labels like the float32 network (`accuracy`)
    and timed interleaved with the float32 graph in ONNX Runtime (`speed`, the ratio at p50), both added
    to its manifest, which is returned. `fp32_session`: the float32 graph's session if one is open."""
    from hotloop.io import atomic_write_json
    from hotloop.perception.curve import time_calls
    from hotloop.perception.detector_eval import evaluate_maps, learned_outputs
    from hotloop.perception.learned_detector import resample

    manifest = quantize_detector(model, resolution, calibration, frames, gate, out, plane_z)
    plan = session(out / "model.onnx")
    fp32 = fp32_session if fp32_session is not None else session(out / "fp32.onnx")
    maps = learned_outputs(model, frames, resolution, lambda b: run_session(plan, b))
    details = evaluate_maps(model, frames, maps, plane_z).to_dict()
    x = resample(frames.images[:1], resolution)
    int8_ms, fp32_ms = time_calls(
        f"int8 {resolution}", lambda: plan.run(None, {"image": x}), iters, warmup,
        compare=(f"fp32 {resolution}", lambda: fp32.run(None, {"image": x})),
    )  # fmt: skip
    assert fp32_ms is not None
    manifest["speed"] = {
        "int8_ms": int8_ms,
        "fp32_ms": fp32_ms,
        "ratio_p50": fp32_ms["p50"] / int8_ms["p50"],  # > 1: int8 is faster
        "ratio_p99": fp32_ms["p99"] / int8_ms["p99"],
        "interleaved": True,
        "iterations": iters,
    }
    manifest["accuracy"] = details
    atomic_write_json(out / "manifest.json", manifest)
    return manifest
