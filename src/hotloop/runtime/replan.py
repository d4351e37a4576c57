"""Re-plan an artifact on this machine (asked for with `Engine.load(..., replan=True)`).

The source weights, config, policy description, budget and tolerance come from the manifest; the
candidates are measured here and a new artifact is written beside the old one (`<ART>-replanned`).
"""

from __future__ import annotations

import json
from pathlib import Path

from hotloop.errors import CheckpointError


def replan_artifact(path: Path, iterations: int = 5) -> Path:
    import torch
    from safetensors.torch import load_file

    from hotloop.compile.artifact import read_manifest
    from hotloop.families.pi.engines import PiEngineShape
    from hotloop.compile.pi_plan import PiSource, plan_pi, write_pi_artifact
    from hotloop.compile.planner import PlanConfig
    from hotloop.compile.sources import config_from_dict
    from hotloop.compile.validate import parse_tolerance
    from hotloop.models.pi0 import PiModel
    from hotloop.families.pi.targets import random_observation

    manifest = read_manifest(path, check_machine=False)
    if manifest.get("kind") != "pi":
        raise CheckpointError(f"{path}: only pi artifacts can be re-planned; recompile the ONNX model here")
    cfg = config_from_dict(manifest["config"])
    with torch.device("meta"):
        model = PiModel(cfg)
    model.load_state_dict(load_file(str(path / manifest["weights"])), assign=True)
    model = model.float().eval()
    shape = PiEngineShape(**manifest["shape"])
    policy = manifest.get("policy") or {}
    seed = int(policy.get("seed", 0))
    obs = random_observation(cfg, shape.batch, "cpu", seed)
    shape_noise = (shape.batch, cfg.chunk_size, cfg.max_action_dim)
    noise = torch.randn(shape_noise, generator=torch.Generator().manual_seed(seed + 2))
    source = PiSource(manifest["target"], model, shape, obs, noise, policy)
    config = PlanConfig(
        budget_ms=float(manifest["budget_ms"]),
        tolerance=parse_tolerance(manifest["tolerance"]),
        backends=tuple(sorted({e["backend"] for e in manifest["sub_engines"]} | {"eager"})),
        variants=tuple(sorted({e.get("variant", "plain") for e in manifest["sub_engines"]})),
        precisions=tuple(sorted({e["precision"] for e in manifest["sub_engines"]} | {"fp32"})),
        warmup=1,
        iterations=iterations,
        threads=manifest.get("threads"),
        progress=False,
    )
    plan = plan_pi(source, config)
    out = path.with_name(path.name + "-replanned")
    art = write_pi_artifact(source, plan, out, config)
    (art / "replanned-from.json").write_text(json.dumps({"source": str(path)}))  # not hashed: a note
    return art
