"""A compiled or compressed artifact against a reference run, at the tolerance the user gives
(`--artifact-tolerance`; the one the artifact records is shown, never trusted: it is a file anyone can edit).

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

DEFAULT_TOLERANCE = "cos:0.995"  # `hotloop compile`'s default


def check_made_from(artifact: Path, manifest: dict[str, Any], checkpoint: Path) -> None:
    """Refuse an artifact made from other weights than `checkpoint`'s (one line, before any comparison):
    its numbers would say nothing about this checkpoint. A compressed artifact is checked against the
    teacher it was compressed from, which its manifest records."""
    from hotloop.compile.artifact import sha256_state_dict
    from hotloop.compile.sources import policy_source
    from hotloop.targets import TargetOptions

    compression = manifest.get("compression") if isinstance(manifest.get("compression"), dict) else {}
    recorded = {manifest.get("source_weights_sha256"), (compression or {}).get("teacher_weights_sha256")}
    recorded.discard(None)
    ours = sha256_state_dict(policy_source(str(checkpoint), TargetOptions()).model.state_dict())
    if ours in recorded:
        return
    theirs = str(manifest.get("source_weights_sha256") or "none")[:12]
    older = (
        " (a compressed artifact from before hotloop recorded its teacher's weights: compress it again)"
        if compression and "teacher_weights_sha256" not in compression
        else ""
    )
    raise ConfigError(
        f"--artifact {artifact} was made from other weights than CKPT {checkpoint} (source sha256 "
        f"{theirs}..., CKPT's {ours[:12]}...){older}; verify it against the checkpoint it was made from"
    )


def verify_artifact(
    artifact: Path,
    reference: ReferenceRun,
    tolerance_spec: str = DEFAULT_TOLERANCE,
    checkpoint: Path | None = None,
) -> dict[str, Any]:
    """{"artifact", "tolerance" (the one judged at: the caller's), "artifact_tolerance" (the one the
    artifact records, shown only), "worst": ActionAgreement dict, "violation", "samples"}."""
    from hotloop.runtime.engine import Engine

    tolerance = parse_tolerance(tolerance_spec)
    engine = Engine.load(artifact, warmup=0)
    family = engine.family
    if family is None:
        raise ConfigError(
            f"--artifact {artifact}: an ONNX plan, not a policy artifact; verify a policy's plan"
        )
    if checkpoint is not None:
        check_made_from(artifact, engine.manifest, checkpoint)
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
        "artifact_tolerance": engine.manifest.get("tolerance"),
        "worst": worst.to_dict(),
        "violation": tolerance.violation(worst),
        "samples": len(found),
    }
