"""Re-plan an artifact on this machine (asked for with `Engine.load(..., replan=True)`).

The source weights, config, policy description, budget and tolerance come from the manifest; the
candidates are measured here and a new artifact is written beside the old one (`<ART>-replanned`).
"""

from __future__ import annotations

import json
from pathlib import Path

from hotloop.errors import CheckpointError
from hotloop.finite import check_finite_weights


def replan_artifact(path: Path, iterations: int = 5) -> Path:
    import torch
    from safetensors.torch import load_file

    from hotloop.compile.artifact import is_lean, read_manifest
    from hotloop.compile.plan import plan_policy, write_artifact
    from hotloop.compile.planner import PlanConfig
    from hotloop.compile.validate import parse_tolerance
    from hotloop.families import FAMILIES, get_family
    from hotloop.families.protocol import PolicySource

    manifest = read_manifest(path, check_machine=False)
    kind = manifest.get("kind")
    if kind not in FAMILIES:
        raise CheckpointError(
            f"{path}: only policy artifacts can be re-planned (kind {kind!r}); recompile the ONNX model here"
        )
    if is_lean(manifest):
        raise CheckpointError(
            f"{path}: a lean artifact holds only what runs, not the source weights a new plan is made from; "
            f"recompile it here from its source ({manifest.get('target')}) with `hotloop compile`"
        )
    family = get_family(str(kind))
    cfg = family.config_from_dict(manifest["config"])
    model = family.empty_model(cfg)
    state = load_file(str(path / manifest["weights"]))
    check_finite_weights(state.items(), path / manifest["weights"])
    model.load_state_dict(state, assign=True)
    model = model.float().eval()
    shape = family.shape_from_dict(manifest["shape"])
    policy = manifest.get("policy") or {}
    seed = int(policy.get("seed", 0))
    obs = family.random_observation(cfg, shape, seed)
    noise = family.make_noise(cfg, shape, shape.batch, torch.Generator().manual_seed(seed + 2))
    source = PolicySource(manifest["target"], family, model, shape, obs, noise, policy)
    config = PlanConfig(
        budget_ms=None if manifest.get("budget_ms") is None else float(manifest["budget_ms"]),
        tolerance=parse_tolerance(manifest["tolerance"]),
        backends=tuple(sorted({e["backend"] for e in manifest["sub_engines"]} | {"eager"})),
        variants=tuple(sorted({e.get("variant", "plain") for e in manifest["sub_engines"]})),
        precisions=tuple(sorted({e["precision"] for e in manifest["sub_engines"]} | {"fp32"})),
        warmup=1,
        iterations=iterations,
        threads=manifest.get("threads"),
        progress=False,
    )
    plan = plan_policy(source, config)
    out = path.with_name(path.name + "-replanned")
    art = write_artifact(source, plan, out, config)
    (art / "replanned-from.json").write_text(json.dumps({"source": str(path)}))  # not hashed: a note
    return art
