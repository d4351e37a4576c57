"""Final-action agreement of a compressed pi artifact with its fp32 teacher on observations the recipe
never saw: random images and prompts (`random_observation`), each under its own noise, teacher at its own
step count. The recipe judges on held-out recorded frames; this checks the agreement does not hinge on
the recording's distribution.

    PYTHONPATH=src python benchmarks/compressed_agreement.py ART [--observations 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from hotloop.compile.sources import policy_source
from hotloop.compile.validate import compare_actions
from hotloop.families.pi.batching import select
from hotloop.families.pi.sampling import make_noise, sample_actions
from hotloop.families.pi.targets import random_observation
from hotloop.runtime.engine import Engine
from hotloop.targets import TargetOptions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifact", type=Path)
    ap.add_argument("--observations", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1234, help="seed of the random observations and noise")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    manifest = json.loads((args.artifact / "manifest.json").read_text())
    target = manifest["target"]
    source = policy_source(target, TargetOptions(seed=0))
    teacher = source.model.float().eval()
    n = args.observations
    obs = random_observation(teacher.cfg, n, "cpu", args.seed)
    noise = make_noise(teacher, n, torch.Generator().manual_seed(args.seed + 1))
    with torch.no_grad():
        ref = sample_actions(teacher, obs, noise=noise, num_steps=source.shape.num_steps)
    engine = Engine.load(args.artifact, threads=args.threads, warmup=1)
    found = [
        compare_actions(ref[i], engine.sample(select(obs, [i]), noise[i : i + 1]).clone()[0])
        for i in range(n)
    ]
    cos = [a.cosine for a in found]
    result = {
        "artifact": str(args.artifact),
        "target": target,
        "observations": n,
        "teacher_steps": source.shape.num_steps,
        "artifact_steps": engine.shape.num_steps,
        "cos_min": min(cos),
        "cos_mean": sum(cos) / n,
        "max_abs_normalized_max": max(a.max_abs_normalized for a in found),
    }
    print(
        f"{args.artifact} against the fp32 {target} ({result['teacher_steps']} steps) on {n} random "
        f"observations: cos worst {result['cos_min']:.5f}, mean {result['cos_mean']:.5f}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
