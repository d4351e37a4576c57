"""A compiled engine over many inferences: is its latency stable, and does it leak?

    PYTHONPATH=src python benchmarks/engine_stability.py ART --iters 1000 --leak-iters 10000 --json s.json

ART is a `hotloop compile` artifact. After `--warmup` untimed inferences it times `--iters` inferences
(garbage collection off, as `hotloop bench` does) and reports p50, p99 and p99/p50 (the issue's target:
p99 <= 1.3 x p50). Then, with garbage collection on as in deployment, it runs `--leak-iters` more
inferences and reads this process's resident memory after the 100th and after the last: the change in
percent (the target: within 2 %), with the curve sampled every `--sample-every` inferences in the JSON
and, with `--plot`, a PNG of both.
The same observation and noise every time, so any growth is the engine's, not the input's. Run it on an
otherwise idle machine; timings taken under load say little.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

import torch

from hotloop.errors import HotloopError
from hotloop.io import atomic_write_json, check_output_file
from hotloop.measure.fingerprint import machine_fingerprint
from hotloop.measure.stats import LatencyStats
from hotloop.progress import Progress
from hotloop.runtime.engine import Engine
from hotloop.runtime.memory import MIB, resident_bytes

LEAK_BASE = 100  # the leak check compares against the resident set after this many inferences


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("artifact", type=Path, help="a compiled artifact folder (hotloop compile -o ART)")
    p.add_argument("--iters", type=int, default=1000, help="timed inferences")
    p.add_argument("--leak-iters", type=int, default=10_000, help="inferences of the leak check")
    p.add_argument("--warmup", type=int, default=20, help="untimed inferences first")
    p.add_argument("--sample-every", type=int, default=100, help="resident-memory sample interval")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: the manifest's)")
    p.add_argument("--prompt-tokens", type=int, default=None, help="real prompt tokens (VLA artifacts)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--plot", type=Path, default=None, help="PNG: latency per inference and resident memory")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    for flag, value, low in (
        ("--iters", args.iters, 1),
        ("--leak-iters", args.leak_iters, LEAK_BASE),
        ("--warmup", args.warmup, 0),
        ("--sample-every", args.sample_every, 1),
        ("--threads", args.threads, 1),
    ):
        if value is not None and value < low:
            p.error(f"{flag} must be >= {low} (got {value})")
    return args


def _inputs(engine: Engine, prompt_tokens: int | None) -> tuple[Any, Any]:
    if engine.kind == "onnx":
        return engine.example_observation(), None
    shape = (engine.shape.batch, engine.cfg.chunk_size, engine.cfg.max_action_dim)
    noise = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    return engine.example_observation(prompt_tokens), noise


def run(args: argparse.Namespace) -> dict[str, Any]:
    check_output_file(args.json, "--json")  # before the long work, not after it
    check_output_file(args.plot, "--plot")
    engine = Engine.load(args.artifact, threads=args.threads)
    obs, noise = _inputs(engine, args.prompt_tokens)
    progress = not args.quiet

    def infer() -> None:
        engine.infer(obs) if noise is None else engine.infer(obs, noise)

    for _ in range(args.warmup):
        infer()
    samples = []
    gc.collect()
    gc.disable()  # the timed phase measures the engine, not Python's collector
    try:
        with Progress(args.iters, "timed", "inf", enabled=progress) as bar:
            for _ in range(args.iters):
                t0 = time.perf_counter_ns()
                infer()
                samples.append((time.perf_counter_ns() - t0) / 1e6)
                bar.update(1)
    finally:
        gc.enable()
    stats = LatencyStats.from_samples(samples)

    curve: list[tuple[int, float]] = []
    with Progress(args.leak_iters, "leak check", "inf", enabled=progress) as bar:
        for i in range(1, args.leak_iters + 1):
            infer()
            if i == LEAK_BASE or i % args.sample_every == 0 or i == args.leak_iters:
                curve.append((i, resident_bytes() / MIB))
            bar.update(1)
    by_count = dict(curve)
    base, last = by_count[LEAK_BASE], by_count[args.leak_iters]
    return {
        "artifact": str(args.artifact),
        "target": engine.manifest.get("target"),
        "plan": engine.describe()["plan"],
        "machine": machine_fingerprint(),
        "warmup": args.warmup,
        "iters": args.iters,
        "latency_ms": stats.to_dict(),
        "p50_ms": stats.p50,
        "p99_ms": stats.p99,
        "p99_over_p50": stats.p99 / stats.p50,
        "leak_iters": args.leak_iters,
        "rss_mb_after_100": base,
        "rss_mb_after_n": last,
        "rss_change_pct": (last - base) / base * 100.0,
        "rss_curve_mb": [[n, mb] for n, mb in curve],
        "engine_memory": engine.memory.to_dict(),
        "samples_ms": samples,
    }


def plot(result: dict[str, Any], path: Path) -> Path:
    """Latency of each timed inference (p50 / p99 marked) beside resident memory over the leak check."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hotloop.io import atomic_write_bytes

    fig, (ax_lat, ax_mem) = plt.subplots(1, 2, figsize=(11, 4))
    ax_lat.plot(result["samples_ms"], linewidth=0.6)
    for q, style in (("p50_ms", "--"), ("p99_ms", ":")):
        ax_lat.axhline(
            result[q], linestyle=style, color="k", linewidth=1, label=f"{q[:3]} {result[q]:.2f} ms"
        )
    ax_lat.set_xlabel("timed inference")
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.set_title(f"p99/p50 {result['p99_over_p50']:.2f}")
    ax_lat.legend(fontsize=8)
    counts, mb = zip(*result["rss_curve_mb"], strict=True)
    ax_mem.plot(counts, mb, marker=".")
    ax_mem.set_xlabel("inferences of the leak check")
    ax_mem.set_ylabel("resident memory (MiB)")
    ax_mem.ticklabel_format(axis="y", useOffset=False)
    ax_mem.set_title(f"after {LEAK_BASE} -> after {result['leak_iters']}: {result['rss_change_pct']:+.2f} %")
    fig.suptitle(f"{result['artifact']} ({result['target']})")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = run(args)
    except HotloopError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{result['artifact']}: p50 {result['p50_ms']:.3f} ms, p99 {result['p99_ms']:.3f} ms, "
        f"p99/p50 {result['p99_over_p50']:.3f} over {result['iters']} inferences; resident "
        f"{result['rss_mb_after_100']:.1f} MiB after {LEAK_BASE} -> {result['rss_mb_after_n']:.1f} MiB "
        f"after {result['leak_iters']} ({result['rss_change_pct']:+.2f} %)"
    )
    if args.json is not None:
        print(f"wrote {atomic_write_json(args.json, result)}")
    if args.plot is not None:
        print(f"wrote {plot(result, args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
