"""`hotloop compress` on a learned box detector: the int8 plan of `hotloop.perception.quantize` through
the same entry point a policy is compressed with, its gate stated in the detector's own terms.

A detector's recipe has one step, `quantize`: its network is all convolutions, which the policy recipe's
quantizers (MatMul/Gemm sub-engines) do not take, and prune / distill / steps / compile are policy steps.
The plan is written as the artifact folder (`model.onnx`, `manifest.json` naming the layers kept in
float32, the gate's score, the accuracy against the labels and the int8/fp32 speed ratio timed
interleaved), loadable by `--pipeline detector:model=DIR`. With `--episodes N` the chain runs in closed
loop behind the float32 network and behind the plan on the same seeds, and the pair is compared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError

DETECTOR_RECIPE = ("quantize",)
DEFAULT_TOLERANCE = "iou:0.85"
DEFAULT_RESOLUTION = 64  # the closed loop's top camera renders 64 px: the plan runs at its native size
GATE_EPISODES = 20  # held-out episodes rendered for the gate (~230 frames), as perception-curve's default
CALIBRATION_EPISODES = 8  # training-seed episodes rendered for calibration when --data is not given
DETECTOR_BENCH_ITERS = 1000  # per path: a call takes ~0.2-1 ms, and fewer leave p99 to a handful of samples
CHAIN_POLICY = "demo:conveyor-chain"  # the policy trained for the chain's estimate


def is_detector(target: str) -> bool:
    """demo:detector, or a folder `hotloop train-demo --variant detector` wrote."""
    from hotloop.perception.learned_detector import META, WEIGHTS

    if target == "demo:detector":
        return True
    path = Path(target)
    return path.is_dir() and (path / WEIGHTS).is_file() and (path / META).is_file()


@dataclass(frozen=True)
class DetectorCompressConfig:
    target: str
    recipe: tuple[str, ...]
    tolerance: str
    out: Path
    resolution: int = DEFAULT_RESOLUTION
    data: Path | None = None  # calibration frames: a frames .npz or a dataset `hotloop record` wrote
    calibration_frames: int = 32
    episodes: int = 0
    eval_latency: str = "fixed:50"
    workers: int = 2
    bench_iters: int = DETECTOR_BENCH_ITERS
    seed: int = 0

    def __post_init__(self) -> None:
        from hotloop.closedloop.latency import parse_latency
        from hotloop.perception.learned_detector import check_resolution
        from hotloop.perception.quantize import parse_tolerance

        if self.recipe != DETECTOR_RECIPE:
            raise ConfigError(
                f"--recipe {','.join(self.recipe)}: a detector's recipe is `quantize` (int8 with the "
                "--tolerance gate, layers falling back to float32 from the head); prune, distill, steps and "
                "compile are policy steps"
            )
        parse_tolerance(self.tolerance)
        check_resolution(self.resolution, "--resolution")
        for flag, value, low in (
            ("--calibration-frames", self.calibration_frames, 1),
            ("--episodes", self.episodes, 0),
            ("--bench-iters", self.bench_iters, 1),
            ("--seed", self.seed, 0),
        ):
            if value < low:
                raise ConfigError(f"{flag} must be >= {low} (got {value})")
        if self.episodes:
            parse_latency(self.eval_latency)


def compress_detector(config: DetectorCompressConfig, log: Callable[[str], None]) -> dict[str, Any]:
    """Quantize the detector into `config.out` and return the report (the plan's manifest, and the
    closed-loop pair with --episodes)."""
    import numpy as np
    import torch

    from hotloop.io import atomic_write_json
    from hotloop.perception.curve_runs import CALIBRATION_SEED, resolve_detector
    from hotloop.perception.detector_data import HELD_OUT_SEED, load_frames, render_frames
    from hotloop.perception.quantize import build_int8_plan, parse_tolerance
    from hotloop.sim.tasks.conveyor import BOX_HALF
    from hotloop.sim.tasks.gantry import BELT_TOP

    gate = parse_tolerance(config.tolerance)
    model, model_ref = resolve_detector(config.target)
    size = max(128, config.resolution)
    if config.data is not None:
        calibration = load_frames(config.data)
        if not len(calibration):
            raise ConfigError(f"--data {config.data}: no frames to calibrate on")
        source = str(config.data)
    else:
        seeds = range(CALIBRATION_SEED, CALIBRATION_SEED + CALIBRATION_EPISODES)
        log(f"rendering calibration frames (training seeds {seeds.start}..{seeds.stop - 1})")
        calibration = render_frames(seeds, size, progress=False)
        source = f"rendered training seeds {seeds.start}..{seeds.stop - 1}"
    if len(calibration) > config.calibration_frames:  # evenly spread over the recording
        pick = np.linspace(0, len(calibration) - 1, config.calibration_frames).round().astype(int)
        calibration = calibration.subset(np.unique(pick))
    held = range(HELD_OUT_SEED, HELD_OUT_SEED + GATE_EPISODES)
    log(f"rendering gate frames (held-out seeds {held.start}..{held.stop - 1})")
    frames = render_frames(held, size, progress=False)
    torch.set_num_threads(1)
    log(f"quantizing at {config.resolution} px, gate {gate.describe()}")
    manifest = build_int8_plan(
        model, config.resolution, calibration, frames, gate, config.out, BELT_TOP + BOX_HALF,
        config.bench_iters, warmup=20,
    )  # fmt: skip
    manifest["calibration"] = {"frames": len(calibration), "source": source}
    manifest["gate_frames"] = f"rendered held-out seeds {held.start}..{held.stop - 1}"
    if config.episodes:
        manifest["closed_loop"] = _closed_loop_pair(config, model_ref, log)
    atomic_write_json(config.out / "manifest.json", manifest)
    return manifest


def _closed_loop_pair(config: DetectorCompressConfig, model_ref: str, log: Callable[[str], None]) -> dict:  # type: ignore[type-arg]
    """The chain behind the float32 network and behind the plan, same seeds: successes and the paired
    difference (McNemar's exact test), so the plan is judged where it is used, not only on frames."""
    from hotloop.closedloop.eval_run import EvalRequest, run_eval
    from hotloop.measure.compare import paired_success

    runs = {}
    for name, ref in (("fp32", model_ref), ("int8", str(config.out.resolve()))):
        resolution = f",resolution={config.resolution}" if name == "fp32" else ""
        log(f"closed loop: {CHAIN_POLICY} behind the {name} detector, {config.episodes} episodes")
        request = EvalRequest(
            target=CHAIN_POLICY,
            latency=config.eval_latency,
            episodes=config.episodes,
            seed=config.seed,
            workers=config.workers,
            pipeline=f"detector:model={ref}{resolution}",
        )
        runs[name] = run_eval(request, progress=False)
    outcome = {
        name: {int(r["seed"]): bool(r["success"]) for r in run["per_episode"] if not r.get("error")}
        for name, run in runs.items()
    }
    shared = sorted(set(outcome["fp32"]) & set(outcome["int8"]))
    paired = paired_success([outcome["fp32"][s] for s in shared], [outcome["int8"][s] for s in shared])
    return {
        "policy": CHAIN_POLICY,
        "latency": config.eval_latency,
        "seeds": [config.seed, config.seed + config.episodes - 1],
        **{
            name: {
                "successes": run["successes"],
                "completed": run["completed"],
                "errors": run["errors"],
                "success_ci95": run["success_ci95"],
            }
            for name, run in runs.items()
        },
        "paired": paired.to_dict(),
    }
