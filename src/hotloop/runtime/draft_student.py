"""The student artifact of `--draft-from STUDENT` read from its folder (`hotloop eval TEACHER --strategy draft
--draft-from STUDENT`; the method: `hotloop.realtime.draft`).

`read_student` checks what needs no teacher, each failure one ConfigError naming the flag and the fix: the
folder is a hotloop artifact (its manifest and files, as `hotloop.compile.artifact.read_manifest` checks
them; not its CPU features, since the student runs its source weights in PyTorch, not its plan), its
recipe applied `onestep`, and it keeps its PyTorch weights (a lean plan has none). The family then holds
the student beside its teacher and checks the rest against it (pi: `hotloop.families.pi.draft_student`:
the same sizes, and the prefix tensors equal to the teacher's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hotloop.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from torch import Tensor

MAKE_STUDENT = (
    "make one with `hotloop compress TEACHER --recipe onestep --data DIR -o STUDENT` (docs/onestep.md)"
)


@dataclass(frozen=True)
class StudentArtifact:
    """What a family needs of a student artifact: its family (`kind`), config and policy entries as the
    manifest holds them, its step count K, and its source weights (memory-mapped)."""

    path: Path
    kind: str
    config: dict[str, Any]
    policy: dict[str, Any]
    num_steps: int
    state: dict[str, Tensor] = field(repr=False)


def _refuse(path: str | Path, why: str) -> ConfigError:
    from hotloop.realtime.draft import student_refusal

    return ConfigError(student_refusal(str(path), why))


def is_onestep(label: Any) -> bool:
    """Whether a recipe step's label (`compression.applied`: "onestep", "onestep:2") is a onestep student."""
    return isinstance(label, str) and label.split(":")[0] == "onestep"


def read_student(path: str | Path) -> StudentArtifact:
    """The student artifact at `path`, checked as the module docstring says."""
    from hotloop.compile.artifact import is_lean, read_manifest
    from hotloop.compile.lean_files import mapped_state_dict
    from hotloop.finite import check_finite_weights

    root = Path(path)
    if not root.is_dir():
        raise _refuse(path, f"no such folder; {MAKE_STUDENT}")
    try:
        manifest = read_manifest(root, verify_files=True, check_machine=False)
    except CheckpointError as exc:
        raise _refuse(path, f"not a student artifact ({str(exc).splitlines()[0]}); {MAKE_STUDENT}") from None
    compression = manifest.get("compression") if isinstance(manifest.get("compression"), dict) else {}
    applied = list((compression or {}).get("applied") or [])
    if not any(is_onestep(a) for a in applied):
        made = (
            f"its recipe applied {', '.join(map(str, applied))}"
            if applied
            else "no compression recipe made it"
        )
        raise _refuse(path, f"not a onestep student ({made}); {MAKE_STUDENT}")
    if manifest["kind"] == "onnx" or is_lean(manifest) or not manifest.get("weights"):
        raise _refuse(
            path,
            "a lean plan (every stage on ONNX Runtime or OpenVINO) keeps no PyTorch weights, and the draft runs "
            "the student's weights beside the teacher's: compress it again with --backends eager (or any plan "
            "that keeps weights.safetensors)",
        )
    shape = manifest.get("shape") if isinstance(manifest.get("shape"), dict) else {}
    steps = (shape or {}).get("num_steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise _refuse(path, f"its manifest's shape.num_steps is {steps!r}, not a step count; {MAKE_STUDENT}")
    weights = root / str(manifest["weights"])
    try:
        state = mapped_state_dict(weights)
        check_finite_weights(state.items(), weights)
    except CheckpointError as exc:
        raise _refuse(path, str(exc).splitlines()[0]) from None
    policy = manifest.get("policy") if isinstance(manifest.get("policy"), dict) else {}
    return StudentArtifact(
        root, str(manifest["kind"]), dict(manifest["config"]), dict(policy or {}), steps, state
    )
