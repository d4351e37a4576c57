from __future__ import annotations

import pytest
import torch

from hotloop.compile.validate import Tolerance, compare_actions, compare_output, parse_tolerance
from hotloop.errors import ConfigError


def test_parse_tolerance() -> None:
    assert parse_tolerance("cos:0.995") == Tolerance(cos=0.995)
    assert parse_tolerance("cos:0.99,maxabs:0.05") == Tolerance(cos=0.99, max_abs=0.05)


@pytest.mark.parametrize(
    "text", ["0.995", "cos=0.995", "cos:abc", "maxabs:0.1", "cos:1.5", "cos:0.9,cos:0.8", ""]
)
def test_malformed_tolerance_names_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="--tolerance"):
        parse_tolerance(text)


def test_output_agreement_figures() -> None:
    ref = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    same = compare_output("y", ref, ref.clone())
    assert same.cosine == pytest.approx(1.0) and same.max_abs == 0 and same.mean_shift == 0
    shifted = compare_output("y", ref, ref + 0.5)
    assert shifted.max_abs == pytest.approx(0.5) and shifted.mean_shift == pytest.approx(
        0.5 / float(ref.std()), rel=1e-6
    )
    scaled = compare_output("y", ref, 2 * ref)
    assert scaled.var_shift == pytest.approx(3.0, rel=1e-6) and scaled.cosine == pytest.approx(1.0)


def test_action_tolerance_violation_says_why() -> None:
    ref = torch.randn(1, 10, 4, generator=torch.Generator().manual_seed(1))
    noisy = ref + 0.5 * torch.randn(1, 10, 4, generator=torch.Generator().manual_seed(2))
    agreement = compare_actions(ref, noisy)
    assert "action cos" in (Tolerance(0.995).violation(agreement) or "")
    assert Tolerance(0.5).violation(compare_actions(ref, ref)) is None
    nan = compare_actions(ref, torch.full_like(ref, float("nan")))
    assert Tolerance(0.5).violation(nan) is not None
