"""Eager fp32 reference vs hotloop's optimized eager sub-engines on pi05:small, interleaved in one process.

    PYTHONPATH=src python benchmarks/pi05_small_engines.py --iters 100 --threads 2 --json pi05_small_engines.json

Candidates (1 view, 10 steps, `--prompt-tokens` real tokens among the 200 prompt slots, same weights, same
observation, same noise):
- `eager fp32`: `sampling.sample_actions` on the model (all 200 slots; what `hotloop bench pi05:small` times);
- `engines fp32` / `engines bf16`: `compile.pi_recipes.fast_pi_subengines` (time / masks / RoPE
  precomputed, norms folded, projections fused) behind prompt buckets (32, 64, 128, 200), per-step engine;
- `engines fp32 loop`: the same with the unrolled N-step loop module.

Each round runs every candidate once, in rotating order, so drift on a shared machine hits all alike.
Prints p50 / p99 per stage, speedup at p50 against the reference and the final-action cosine against it.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from hotloop.families.pi.buckets import BucketedPiPipeline
from hotloop.families.pi.engines import PiEngineShape
from hotloop.families.pi.recipes import fast_pi_subengines
from hotloop.families.pi.roofline import pi_stage_work
from hotloop.families.pi.sampling import make_noise, sample_actions
from hotloop.families.pi.targets import build_model, random_observation
from hotloop.measure.fingerprint import machine_fingerprint
from hotloop.measure.roofline import cached_peaks, roofline
from hotloop.measure.stages import StageTimer
from hotloop.measure.stats import LatencyStats
from hotloop.targets import TargetOptions

STAGES = ("vision", "prefix", "denoise", "total")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--prompt-tokens", type=int, default=20)
    parser.add_argument(
        "--no-bf16", action="store_true", help="skip the bf16 engines (slow without native bf16)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    from hotloop.families.pi.targets import resolve_config

    cfg = resolve_config("pi05:small", TargetOptions(views=1, num_steps=10))
    model = build_model(cfg, torch.float32, "cpu", seed=0)
    obs = random_observation(cfg, 1, "cpu", seed=0, prompt_tokens=args.prompt_tokens)
    noise = make_noise(model, 1, torch.Generator().manual_seed(2))
    cache = model.allocate_cache(1)
    shape = PiEngineShape.of(cfg, batch=1)

    candidates: dict[str, Callable[[StageTimer], torch.Tensor]] = {
        "eager fp32": lambda timer: sample_actions(model, obs, noise=noise, timer=timer, cache=cache)
    }
    fp32 = fast_pi_subengines(model, shape, torch.float32)
    step32 = BucketedPiPipeline.eager(cfg, fp32)
    loop32 = BucketedPiPipeline.eager(cfg, fp32, loop=True)
    candidates["engines fp32"] = lambda timer: step32.sample(obs, noise, timer)
    candidates["engines fp32 loop"] = lambda timer: loop32.sample(obs, noise, timer)
    if not args.no_bf16:
        bf16 = BucketedPiPipeline.eager(cfg, fast_pi_subengines(model, shape, torch.bfloat16))
        candidates["engines bf16"] = lambda timer: bf16.sample(obs, noise, timer)
    print(
        f"prompt bucket for {args.prompt_tokens} real tokens: {step32.bucket_for(obs)} of {cfg.max_token_len} slots"
    )

    reference = candidates["eager fp32"](StageTimer())
    cosine = {
        name: float(
            torch.nn.functional.cosine_similarity(run(StageTimer()).flatten(), reference.flatten(), dim=0)
        )
        for name, run in candidates.items()
    }
    samples: dict[str, dict[str, list[float]]] = {n: {s: [] for s in STAGES} for n in candidates}
    names = list(candidates)
    timer = StageTimer()
    for i in range(args.warmup + args.iters):
        if i == args.warmup:
            gc.collect()
            gc.disable()
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            timer.begin_iteration()
            t0 = time.perf_counter_ns()
            candidates[name](timer)
            total = (time.perf_counter_ns() - t0) / 1e6
            host, _ = timer.end_iteration()
            if i >= args.warmup:
                for stage in STAGES[:-1]:
                    samples[name][stage].append(host.get(stage, 0.0))
                samples[name]["total"].append(total)
    gc.enable()

    stats = {n: {s: LatencyStats.from_samples(v) for s, v in per.items()} for n, per in samples.items()}
    ref_p50 = stats["eager fp32"]["total"].p50
    header = (
        f"{'candidate':20s}"
        + "".join(f"{s + ' p50/p99':>22s}" for s in STAGES)
        + f"{'speedup':>9s}{'cos':>10s}"
    )
    print(header)
    for name, per in stats.items():
        cells = "".join(f"{per[s].p50:>12.1f}/{per[s].p99:<9.1f}" for s in STAGES)
        print(f"{name:20s}{cells}{ref_p50 / per['total'].p50:>8.2f}x{cosine[name]:>10.6f}")
    # Roofline: analytic work of what each candidate runs, against this machine's matmul peaks.
    peaks = cached_peaks()
    bucket = step32.bucket_for(obs)
    roof: dict[str, dict[str, dict[str, object]]] = {}
    for name, per in stats.items():
        engines = name != "eager fp32"
        work = pi_stage_work(
            cfg,
            "bfloat16" if name.endswith("bf16") else "float32",
            prompt_slots=bucket if engines else cfg.max_token_len,
            time_conditioning=not engines,
            last_layer_query=not engines,
        )
        roof[name] = roofline(work, {s: per[s].p50 for s in STAGES}, peaks)
    print(
        f"matmul peaks (GFLOP/s, {peaks.threads if peaks else '?'} threads): {peaks.gflops if peaks else 'n/a'}"
    )
    for name, rows in roof.items():
        cells = ", ".join(
            f"{stage} {row['gflop']:.1f} GFLOP at {row['achieved_gflops']:.1f} GFLOP/s"
            + (f" ({100 * row['peak_share']:.0f} % of peak)" if row["peak_share"] is not None else "")
            for stage, row in rows.items()
        )
        print(f"{name:20s}{cells}")
    if args.json is not None:
        out = {
            "roofline": roof,
            "peaks": peaks.to_dict() if peaks else None,
            "prompt_tokens": args.prompt_tokens,
            "iterations": args.iters,
            "stages_ms": {n: {s: st.to_dict() for s, st in per.items()} for n, per in stats.items()},
            "speedup_p50": {n: ref_p50 / per["total"].p50 for n, per in stats.items()},
            "action_cosine": cosine,
            "env": machine_fingerprint(threads=args.threads),
        }
        args.json.write_text(json.dumps(out, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
