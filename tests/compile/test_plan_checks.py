"""The planner's whole-plan check over several observations (`PiSource.plan_checks`): the worst one decides."""

from __future__ import annotations

import torch

from hotloop.compile.pi_plan import worst_agreement
from hotloop.compile.validate import Tolerance


class _Pipe:
    """Answers each observation (a tag tensor) with the reference plus that observation's error."""

    def __init__(self, refs: list[torch.Tensor], errors: list[float]) -> None:
        self.refs, self.errors = refs, errors

    def sample(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        i = int(obs)
        return self.refs[i] + self.errors[i] * torch.linspace(-1, 1, self.refs[i].numel()).reshape(
            self.refs[i].shape
        )


def _refs(n: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(1, 8, 4, generator=gen) for _ in range(n)]


def test_an_observation_the_first_hides_decides() -> None:
    refs = _refs(3)
    checks = [(torch.tensor(i), torch.zeros(1)) for i in range(3)]
    tol = Tolerance(cos=0.99)
    pipe = _Pipe(refs, [0.0, 2.0, 0.01])  # the first passes exactly, the second is far off
    only_first = worst_agreement(pipe, checks[:1], refs[:1], tol)  # type: ignore[arg-type]
    assert tol.violation(only_first) is None
    worst = worst_agreement(pipe, checks, refs, tol)  # type: ignore[arg-type]
    assert tol.violation(worst) is not None and worst.cosine < 0.99


def test_without_a_violation_the_lowest_cosine_is_reported() -> None:
    refs = _refs(3)
    checks = [(torch.tensor(i), torch.zeros(1)) for i in range(3)]
    pipe = _Pipe(refs, [0.0, 0.02, 0.05])
    worst = worst_agreement(pipe, checks, refs, Tolerance(cos=0.9))  # type: ignore[arg-type]
    assert worst.cosine < 1.0 and worst.max_abs > 0.04
