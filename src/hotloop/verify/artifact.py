"""A compiled or compressed artifact against a reference run, at the tolerance the artifact states.

The artifact's engine has fixed shapes (batch 1 as compiled), so each sample of the reference batch runs
alone; the worst sample decides. The comparison is in model space (`inputs.npz`, `noise.npy` ->
`actions.npy`), where the plan was judged when it was made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from hotloop.compile.validate import compare_actions, parse_tolerance
from hotloop.errors import ConfigError
from hotloop.families.reference import ReferenceRun


def verify_artifact(artifact: Path, reference: ReferenceRun) -> dict[str, Any]:
    """{"artifact", "tolerance", "worst": ActionAgreement dict, "violation", "samples"}."""
    from hotloop.runtime.engine import Engine

    engine = Engine.load(artifact, warmup=0)
    family = engine.family
    if family is None:
        raise ConfigError(
            f"--artifact {artifact}: an ONNX plan, not a policy artifact; verify a policy's plan"
        )
    tolerance = parse_tolerance(str(engine.manifest.get("tolerance") or "cos:0.995"))
    inputs = reference.arrays("inputs.npz")
    want = reference.array("actions.npy")
    if inputs is None or want is None:
        raise ConfigError(
            f"--reference {reference.folder}: an artifact is checked in model space and needs inputs.npz "
            "and actions.npy"
        )
    obs, noise = family.reference_inputs(engine.cfg, inputs, reference)
    batch = family.batch_size(obs)
    if engine.shape.batch != 1 and engine.shape.batch != batch:
        raise ConfigError(
            f"--artifact {artifact} was compiled for batch {engine.shape.batch}; the reference holds {batch}"
        )
    rows = range(batch) if engine.shape.batch == 1 else [slice(None)]
    found = []
    with torch.no_grad():
        for i in rows:
            index = [i] if isinstance(i, int) else i
            got = engine.sample(family.select(obs, index), noise[index]).clone()
            ref = torch.from_numpy(want[index]) if isinstance(i, int) else torch.from_numpy(want)
            found.append(compare_actions(ref.float(), family.reference_actions(engine.cfg, got)))
    worst = min(found, key=lambda a: a.cosine)
    return {
        "artifact": str(artifact),
        "tolerance": tolerance.spec,
        "worst": worst.to_dict(),
        "violation": tolerance.violation(worst),
        "samples": len(found),
    }
