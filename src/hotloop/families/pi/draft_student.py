"""A one-step student beside its pi0 / pi0.5 teacher, proposing the drafts of `--strategy draft`
(`hotloop eval TEACHER --strategy draft --draft-from STUDENT`; the method: `hotloop.realtime.draft`).

The student is an artifact of `hotloop compress TARGET --recipe onestep` (docs/onestep.md): its vision
tower, projector, token embedding and VLM (`PREFIX_MODULES`, everything the prefix cache is computed from)
are frozen during its training, so they are the teacher's own tensors, and only the denoising side
differs (the action expert, the action / time / state projections). The teacher's prefix cache is then
the student's too: `PiDraftStudent` keeps only the student's denoising side, its prefix modules replaced
by the teacher's (shared, not copied), and proposes a chunk with its K Euler steps on the cache the
teacher's call already filled. A student whose prefix tensors are not the teacher's, as the teacher runs
them (dtype and device included), is refused by name: its chunk would need a prefix of its own, and the
cost model (vision + prefix once per call) would no longer hold.

The student runs its fp32 source weights in PyTorch (`weights.safetensors`), cast like the teacher's, not
the compiled plan of its artifact; a lean artifact (no weights) is refused when it is read
(`hotloop.runtime.draft_student`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families.pi.sampling import denoise
from hotloop.models.pi0 import PiModel, PrefixCache

# What the prefix cache is computed from (`PiModel.vision`, `PiModel.prefix`): the modules the onestep
# student leaves frozen (`hotloop.families.pi.compression.step_distill.PREFIX_MODULES`, the same names; a
# test holds them equal).
PREFIX_MODULES = ("vision_tower", "projector", "embed_tokens", "vlm")


@dataclass
class PiDraftStudent:
    """The student's denoising side on its teacher's prefix: `model` is a `PiModel` whose prefix modules are
    the teacher's own, `steps` its K, `zero_noise` whether its sampler starts at x = 0 (its artifact's
    policy says so: a `zero-noise` recipe step, or a demo whose sampler starts there)."""

    path: str
    model: PiModel
    steps: int
    zero_noise: bool = False

    def propose(self, cache: PrefixCache, state: Tensor | None, noise: Tensor) -> Tensor:
        """The student's chunk (1, chunk, max_action_dim), model space, for the observation whose prefix
        `cache` holds, from the call's start `noise` (x = 0 for a zero-noise student)."""
        start = torch.zeros_like(noise) if self.zero_noise else noise
        return denoise(self.model, cache, state, start, self.steps)


def _refuse(path: str, why: str) -> ConfigError:
    from hotloop.realtime.draft import student_refusal

    return ConfigError(student_refusal(path, why))


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as dotted keys ("expert.width") to its leaves."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _prefix_name(name: str) -> bool:
    return name.split(".")[0] in PREFIX_MODULES


def pi_draft_student(student: Any, teacher: PiModel, horizon: int, action_dim: int) -> PiDraftStudent:
    """`student` (a `hotloop.runtime.draft_student.StudentArtifact`) beside `teacher`: the same family and
    sizes, its prefix tensors equal to the teacher's, else one ConfigError naming `--draft-from`."""
    path = str(student.path)
    fix = "make the student from this teacher with `hotloop compress TEACHER --recipe onestep --data DIR -o STUDENT`"
    if student.kind != "pi":
        raise _refuse(path, f"a {student.kind} student, and the teacher is a pi0 / pi0.5 policy: {fix}")
    # The manifest's config as written (`dataclasses.asdict`, through JSON), against the teacher's; the step
    # count is the plan's own. Equal, the student is built with the teacher's config.
    ours = dataclasses.asdict(teacher.cfg)
    theirs = {**dict(student.config), "num_steps": ours["num_steps"]}
    if theirs != ours:
        a, b = _flat(theirs), _flat(ours)
        odd = [
            f"{k} {a.get(k)!r} against {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
        ]
        more = f" and {len(odd) - 3} more" if len(odd) > 3 else ""
        raise _refuse(path, f"the student's sizes are not the teacher's ({', '.join(odd[:3])}{more}): {fix}")
    cfg = teacher.cfg
    for key, mine in (("horizon", horizon), ("action_dim", action_dim)):
        value = (student.policy or {}).get(key)
        if value is not None and int(value) != int(mine):
            raise _refuse(path, f"the student's {key} is {value}, the teacher's {mine}: {fix}")
    want = teacher.state_dict()
    state = dict(student.state)
    if set(state) != set(want) or any(tuple(state[k].shape) != tuple(want[k].shape) for k in want):
        odd = sorted(set(state) ^ set(want)) or [
            k for k in want if tuple(state[k].shape) != tuple(want[k].shape)
        ]
        raise _refuse(path, f"the student's tensors are not the teacher's ({odd[0]} differs): {fix}")
    for name in sorted(k for k in want if _prefix_name(k)):
        ours_t = want[name]
        if not torch.equal(state[name].to(device=ours_t.device, dtype=ours_t.dtype), ours_t):
            raise _refuse(
                path,
                f"its {name} differs from the teacher's: a student shares the teacher's vision and VLM (the "
                f"prefix cache), and this one does not; {fix}",
            )
    with torch.device("meta"):
        model = PiModel(cfg)
    for name in PREFIX_MODULES:  # the teacher's own modules: the cache they fill is the student's input
        setattr(model, name, getattr(teacher, name))
    suffix = {
        k: v.to(device=want[k].device, dtype=want[k].dtype) for k, v in state.items() if not _prefix_name(k)
    }
    model.load_state_dict(suffix, strict=False, assign=True)
    left = [n for n, p in [*model.named_parameters(), *model.named_buffers()] if p.is_meta]
    assert not left, f"the student's weights left {left[:3]} unset"
    for name, p in model.named_parameters():
        if not _prefix_name(name):
            p.requires_grad_(False)
    model.eval()
    zero_noise = bool((student.policy or {}).get("zero_noise", False))
    return PiDraftStudent(path, model, int(student.num_steps), zero_noise)
