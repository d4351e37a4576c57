"""CUDA Graphs off vs on for a pi target's denoise loop, host and device time side by side.

    PYTHONPATH=src python benchmarks/gpu_cuda_graph.py --target pi05:small --dtype bfloat16 --device cuda \
        --iters 50 --json graphs.json

No `hotloop` command can show this today: `hotloop compile` builds its plans on the CPU, and `Engine.load`
captures a CUDA Graph only for an eager / inductor denoise loop whose buffers are on CUDA. So this builds
the loop engine the way the planner does (`build_pi_subengines` -> the `eager` backend's runner) on
`--device`, times `runner._run` for `--iters` calls, captures it with `hotloop.runtime.cuda_graph.capture`
(what `Engine.load` calls) and times the replay the same way. Each call: a CUDA event pair on the device, the
host clock from launch to `torch.cuda.synchronize()` (so host time includes launch and sync cost, the gap
that capture removes). On a CPU the capture is refused and the JSON says why (graphs_on is null).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import torch

from hotloop.compile.backends import get_backend
from hotloop.errors import ConfigError, HotloopError, UnknownNameError
from hotloop.families.pi.engines import PiEngineShape, build_pi_subengines
from hotloop.families.pi.targets import build_model
from hotloop.io import atomic_write_json, check_output_file
from hotloop.measure.fingerprint import machine_fingerprint
from hotloop.measure.stats import LatencyStats
from hotloop.models.configs import get_pi_config
from hotloop.runtime.cuda_graph import capture
from hotloop.targets import check_device

PRECISION = {"float32": "fp32", "bfloat16": "bf16"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="pi05:small", help="a pi target: pi05:small, pi05:full, pi05:tiny")
    p.add_argument("--dtype", default="bfloat16", choices=sorted(PRECISION), help="the loop's dtype")
    p.add_argument("--device", default="cuda", help="cuda (cpu only times the uncaptured loop)")
    p.add_argument("--views", type=int, default=None, help="camera views (default: the target's)")
    p.add_argument("--iters", type=int, default=50, help="timed calls per mode")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls per mode first")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args(argv)
    for flag, value, low in (
        ("--iters", args.iters, 1),
        ("--warmup", args.warmup, 0),
        ("--views", args.views, 1),
    ):
        if value is not None and value < low:
            p.error(f"{flag} must be >= {low} (got {value})")
    return args


def _time(run: Any, iters: int, warmup: int, cuda: bool) -> dict[str, Any]:
    """p50/p99 of `iters` calls of `run`: host (launch to sync) and, on CUDA, device (event pair)."""
    for _ in range(warmup):
        run()
    if cuda:
        torch.cuda.synchronize()
    host, device = [], []
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter_ns()
        run()
        if cuda:
            end.record()
            torch.cuda.synchronize()
        host.append((time.perf_counter_ns() - t0) / 1e6)
        if cuda:
            device.append(float(start.elapsed_time(end)))

    def stats(samples: list[float]) -> dict[str, float]:
        s = LatencyStats.from_samples(samples)
        return {"p50": s.p50, "p99": s.p99, "mean": s.mean, "max": s.max}

    return {"host_ms": stats(host), "device_ms": stats(device) if device else None}


def run(args: argparse.Namespace) -> dict[str, Any]:
    check_device(args.device)
    check_output_file(args.json, "--json")
    cuda = args.device.startswith("cuda")
    try:
        cfg = get_pi_config(args.target)
    except UnknownNameError as exc:
        raise ConfigError(f"--target: {exc.args[0]}") from None
    if args.views is not None:
        cfg = dataclasses.replace(cfg, views=args.views)
    dtype = getattr(torch, args.dtype)
    model = build_model(cfg, dtype, args.device, args.seed)
    graph = build_pi_subengines(model, PiEngineShape.of(cfg), dtype)["denoise_loop"]
    runner = get_backend("eager").prepare(graph, PRECISION[args.dtype], {})
    off = _time(runner._run, args.iters, args.warmup, cuda)
    want = [y.clone() for y in runner.outputs]
    captured = capture(runner)
    on, max_abs_diff = None, None
    if captured is not None:
        on = _time(runner._run, args.iters, args.warmup, cuda)  # `_run` now replays the graph
        max_abs_diff = max(
            float((a.float() - b.float()).abs().max()) for a, b in zip(runner.outputs, want, strict=True)
        )
    return {
        "target": args.target,
        "sub_engine": "denoise_loop",
        "num_steps": cfg.num_steps,
        "views": cfg.views,
        "dtype": args.dtype,
        "device": args.device,
        "iters": args.iters,
        "graphs_off": off,
        "graphs_on": on,
        "graphs_on_reason": None
        if captured is not None
        else "capture needs a CUDA device (the runner is on the CPU)",
        "replay_max_abs_diff": max_abs_diff,
        "machine": machine_fingerprint(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = run(args)
    except HotloopError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for mode in ("graphs_off", "graphs_on"):
        figures = result[mode]
        if figures is None:
            print(f"{mode}: not measured ({result['graphs_on_reason']})")
            continue
        line = f"{mode}: host p50 {figures['host_ms']['p50']:.3f} ms p99 {figures['host_ms']['p99']:.3f} ms"
        if figures["device_ms"] is not None:
            line += (
                f"; device p50 {figures['device_ms']['p50']:.3f} ms p99 {figures['device_ms']['p99']:.3f} ms"
            )
        print(line)
    if args.json is not None:
        print(f"wrote {atomic_write_json(args.json, result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
