"""The two kinds of `hotloop perception-curve` run: hotloop's learned box detector on labelled frames,
and any ONNX detector scored against its own native-resolution outputs (see `curve` for the measures)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.perception.curve import (
    CurvePoint,
    choose,
    metric_value,
    plot_curve,
    print_table,
    summary,
    time_calls,
)


def resolve_detector(name: str) -> tuple[Any, str]:
    """(DetectorModel, the `--pipeline model=` value that loads it) for demo:detector or a folder."""
    from hotloop.perception.learned_detector import load_detector

    if name == "demo:detector":
        return load_detector(), "learned"
    path = Path(name)
    if not path.is_dir():
        raise ConfigError(
            f"{name!r} is not a detector: give demo:detector, a folder `hotloop train-demo --variant detector` "
            "wrote, or an ONNX file (model.onnx with --input and --images)"
        )
    return load_detector(path), str(path.resolve())


def learned_curve(
    name: str,
    sizes: tuple[int, ...],
    data: Path | None,
    held_out: int,
    metric: str,
    budget_ms: float | None,
    iters: int,
    warmup: int,
    episodes: int | None,
    latency: str,
    workers: int,
    plot: Path | None,
    int8_dir: Path | None = None,
    tolerance: str = "iou:0.85",
    policy: str = "demo:conveyor",
) -> dict[str, Any]:
    import onnxruntime as ort
    import torch

    from hotloop.closedloop.latency import parse_latency
    from hotloop.perception.detector_data import HELD_OUT_SEED, load_frames, render_frames
    from hotloop.perception.detector_eval import evaluate_learned, evaluate_maps, learned_outputs
    from hotloop.perception.learned_detector import check_resolution, resample
    from hotloop.progress import Progress
    from hotloop.sim.tasks.conveyor import BOX_HALF
    from hotloop.sim.tasks.gantry import BELT_TOP

    for r in sizes:  # bad input fails before any work
        check_resolution(r, "--resolutions")
    if episodes is not None:
        parse_latency(latency)
    gate = None
    if int8_dir is not None:
        from hotloop.perception.quantize import parse_tolerance

        gate = parse_tolerance(tolerance)
    model, model_ref = resolve_detector(name)
    if data is not None:
        frames = load_frames(data)
    else:
        frames = render_frames(range(HELD_OUT_SEED, HELD_OUT_SEED + held_out), max(128, max(sizes)))
    if not len(frames):
        raise ConfigError(f"--data {data}: no frames")
    plane_z = BELT_TOP + BOX_HALF
    calibration = None
    if gate is not None:  # calibration frames from training seeds, never the held-out ones
        calibration = render_frames(
            range(CALIBRATION_SEED, CALIBRATION_SEED + 8), frames.size, progress=False
        )
    torch.set_num_threads(1)
    points = []
    with tempfile.TemporaryDirectory() as tmp, Progress(len(sizes), "perception-curve", "px") as bar:
        for r in sizes:
            details = evaluate_learned(model, frames, r, plane_z).to_dict()
            path = model.export_onnx(Path(tmp) / f"detector-{r}.onnx", r)
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            x = resample(frames.images[:1], r)

            def compiled(batch: np.ndarray, s: Any = session) -> np.ndarray:
                return np.concatenate([s.run(None, {"image": row[None]})[0] for row in batch])

            maps = learned_outputs(model, frames, r, compiled)
            compiled_acc = evaluate_maps(model, frames, maps, plane_z).to_dict()
            eager_ms, compiled_ms = time_calls(
                f"eager {r}", lambda x=x: model.run(x), iters, warmup,
                compare=(f"onnxruntime {r}", lambda x=x, s=session: s.run(None, {"image": x})),
            )  # fmt: skip
            point = CurvePoint(r, metric_value(details, metric), details, eager_ms, compiled_ms)
            point.extra["compiled_accuracy"] = compiled_acc
            if gate is not None and int8_dir is not None:
                point.extra["int8"] = _int8_point(
                    model, r, calibration, frames, gate, int8_dir / f"{r}px", plane_z, metric, session,
                    iters, warmup,
                )  # fmt: skip
            if episodes is not None:
                point.success_rate, point.success_ci95 = _closed_loop(
                    policy, model_ref, r, episodes, latency, workers
                )
            points.append(point)
            bar.update(1, f"{r} px")
    chosen = choose(points, metric, budget_ms)
    title = f"perception curve: {name} ({len(frames)} frames, {int((frames.visible & frames.on_belt).sum())} scored)"
    print_table(points, chosen, metric, title)
    if plot is not None:
        plot_curve(points, chosen, metric, budget_ms, plot, title)
    return summary(
        points, chosen, metric, budget_ms, detector=name, frames=len(frames), frame_size=frames.size,
        data=str(data) if data is not None else f"rendered seeds {HELD_OUT_SEED}..{HELD_OUT_SEED + held_out - 1}",
        latency_paths={"eager": "torch, 1 thread", "compiled": f"onnxruntime {ort.__version__}, 1 thread"},
        closed_loop={"policy": policy, "latency": latency, "episodes": episodes} if episodes is not None else None,
    )  # fmt: skip


CALIBRATION_SEED = 10_000  # the detector's training seeds (train-demo --variant detector records from here)


def _int8_point(
    model: Any,
    resolution: int,
    calibration: Any,
    frames: Any,
    gate: Any,
    out: Path,
    plane_z: float,
    metric: str,
    fp32_session: Any,
    iters: int,
    warmup: int,
) -> dict[str, Any]:
    """The int8 plan at one resolution (`build_int8_plan`), as a point of the curve."""
    from hotloop.perception.quantize import build_int8_plan

    manifest = build_int8_plan(
        model, resolution, calibration, frames, gate, out, plane_z, iters, warmup, fp32_session
    )
    return {
        "accuracy": metric_value(manifest["accuracy"], metric),
        "details": manifest["accuracy"],
        "latency_ms": manifest["speed"]["int8_ms"],
        "speed_ratio_p50": manifest["speed"]["ratio_p50"],
        "gate": manifest["gate"],
        "fp32_layers": manifest["fp32_modules"],
        "plan": str(out),
    }


def _closed_loop(
    policy: str, model_ref: str, resolution: int, episodes: int, latency: str, workers: int
) -> tuple[float, list[float]]:
    from hotloop.closedloop.eval_run import EvalRequest, run_eval

    request = EvalRequest(
        target=policy,
        latency=latency,
        episodes=episodes,
        workers=workers,
        pipeline=f"detector:model={model_ref},resolution={resolution}",
    )
    result = run_eval(request, progress=False)
    return float(result["success_rate"]), [float(v) for v in result["success_ci95"]]


def onnx_curve(
    path: Path,
    input_spec: str,
    images_dir: Path,
    sizes: tuple[int, ...],
    threshold: float,
    budget_ms: float | None,
    iters: int,
    warmup: int,
    plot: Path | None,
) -> dict[str, Any]:
    from hotloop.perception.onnx_detector import (
        OnnxDetector,
        agreement,
        input_size,
        list_images,
        load_images,
        output_kind,
        parse_input,
        to_input,
    )
    from hotloop.progress import Progress

    spec = parse_input(input_spec)
    files = list_images(images_dir)
    det = OnnxDetector(path, spec)
    shapes = {r: input_size(det.native, r) for r in sizes}
    for r, size in shapes.items():  # a fixed-shape model refuses other sizes before any work
        det.check_size(size, r)
    images = load_images(files, spec.shape[1])
    references = [det.run(to_input(img, det.native)) for img in images]
    kind = output_kind(references[0])
    points = []
    with Progress(len(sizes), "perception-curve", "px") as bar:
        for r, size in shapes.items():
            acc = agreement(det, images, references, size, threshold)
            x = to_input(images[0], size)
            compiled_ms, _ = time_calls(f"onnxruntime {r}", lambda x=x: det.run(x), iters, warmup)
            points.append(
                CurvePoint(r, acc, {"iou": acc, "input": f"{size[0]}x{size[1]}"}, None, compiled_ms)
            )
            bar.update(1, f"{r} px")
    chosen = choose(points, "iou", budget_ms)
    title = f"perception curve: {path.name} ({len(images)} images; {kind} agreement with native {det.native[0]}x{det.native[1]})"
    print_table(points, chosen, "iou", title)
    if plot is not None:
        plot_curve(points, chosen, "iou", budget_ms, plot, title)
    return summary(
        points, chosen, "iou", budget_ms, detector=str(path), images=len(images), output_kind=kind,
        native=list(det.native), threshold=threshold,
    )  # fmt: skip
