"""The planner's whole-plan check over several observations (`PolicySource.plan_checks`): the worst one decides."""

from __future__ import annotations

import torch

from hotloop.compile.plan import worst_agreement
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


# ---- repairing a plan whose stages pass alone but not together ----------------------------------------
def _cand(stage: str, precision: str, p99: float, cos: float) -> object:
    from hotloop.compile.planner import Candidate
    from hotloop.compile.validate import ActionAgreement
    from hotloop.measure.stats import LatencyStats

    c = Candidate(stage, stage, "openvino", precision, status="accepted")
    c.latency = LatencyStats.from_samples([p99])
    c.action = ActionAgreement(cos, 0.0, 0.0)
    c.runner = object()  # held: the planner may still use it
    return c


def _plan_cos(plan: dict) -> float:  # type: ignore[type-arg]
    # The plan's cosine falls by each stage's shortfall; int8 denoise alone costs 0.05.
    return 1.0 - sum(1 - c.action.cosine for c in plan.values())


def test_repair_takes_the_fastest_alternative_that_passes_not_the_most_accurate() -> None:
    from hotloop.compile.plan import repair_plan
    from hotloop.compile.validate import ActionAgreement

    vision = _cand("vision", "int8", 1.0, 0.999)
    d_int8, d_bf16, d_fp32 = _cand("denoise", "int8", 5.0, 0.95), _cand("denoise", "bf16", 8.0, 0.998), _cand("denoise", "fp32", 30.0, 1.0)  # fmt: skip
    candidates = [vision, d_int8, d_bf16, d_fp32]
    chosen = {"vision": vision, "denoise": d_int8}
    tried: list[str] = []

    def evaluate(plan: dict) -> tuple[object, ActionAgreement]:  # type: ignore[type-arg]
        tried.append(plan["denoise"].precision)
        return "pipe", ActionAgreement(_plan_cos(plan), 0.0, 0.0)

    tol = Tolerance(cos=0.99)
    plan, pipe, agreement = repair_plan(
        chosen, candidates, evaluate, ("pipe", ActionAgreement(_plan_cos(chosen), 0, 0)), tol
    )
    assert plan["denoise"] is d_bf16 and plan["vision"] is vision and tol.violation(agreement) is None
    assert tried == ["bf16"]  # fastest first; it passed, so fp32 was never needed
    assert chosen["denoise"] is d_int8  # the caller's plan is not changed in place


def test_repair_falls_back_to_the_most_accurate_when_no_alternative_passes_alone() -> None:
    from hotloop.compile.plan import repair_plan
    from hotloop.compile.validate import ActionAgreement

    vision_int8, vision_fp32 = _cand("vision", "int8", 1.0, 0.985), _cand("vision", "fp32", 4.0, 1.0)
    d_int8, d_fp32 = _cand("denoise", "int8", 5.0, 0.98), _cand("denoise", "fp32", 30.0, 1.0)
    d_bf16_released = _cand("denoise", "bf16", 8.0, 0.999)
    d_bf16_released.runner = None  # released: not tried
    candidates = [vision_int8, vision_fp32, d_int8, d_fp32, d_bf16_released]
    chosen = {"vision": vision_int8, "denoise": d_int8}

    def evaluate(plan: dict) -> tuple[object, ActionAgreement]:  # type: ignore[type-arg]
        return "pipe", ActionAgreement(_plan_cos(plan), 0.0, 0.0)

    tol = Tolerance(cos=0.99)
    plan, _, agreement = repair_plan(
        chosen, candidates, evaluate, ("pipe", ActionAgreement(_plan_cos(chosen), 0, 0)), tol
    )
    # vision (least accurate) first: fp32 vision alone gives 0.98 - still out; it stays fp32, then
    # denoise's fastest other held candidate (fp32) brings the plan in.
    assert plan["vision"] is vision_fp32 and plan["denoise"] is d_fp32
    assert tol.violation(agreement) is None
