"""Numerical agreement with the PyTorch fp32 reference (R7.1): per output, and on the final actions.

Per output: max abs error, shift of the mean and of the variance (relative to the reference's), cosine.
Final actions under the same noise: cosine and max abs error normalised by the reference actions' std.
A `Tolerance` is parsed from the CLI (`cos:0.995`, optionally `,maxabs:0.05` on the normalised error).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from hotloop.errors import ConfigError


@dataclass(frozen=True)
class Tolerance:
    """Accept a candidate when the final-action cosine >= `cos` (and normalised max abs <= `max_abs`)."""

    cos: float = 0.995
    max_abs: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.cos <= 1.0:
            raise ConfigError(f"--tolerance cos:{self.cos} must lie in (0, 1]; e.g. cos:0.995")
        if self.max_abs is not None and self.max_abs <= 0:
            raise ConfigError(f"--tolerance maxabs:{self.max_abs} must be > 0; e.g. cos:0.995,maxabs:0.05")

    @property
    def spec(self) -> str:
        return f"cos:{self.cos:g}" + (f",maxabs:{self.max_abs:g}" if self.max_abs is not None else "")

    def violation(self, agreement: ActionAgreement) -> str | None:
        """Why `agreement` is outside this tolerance, or None when it is inside."""
        if not agreement.cosine >= self.cos:  # NaN fails too
            return f"action cos {agreement.cosine:.6f} < {self.cos:g}"
        if self.max_abs is not None and not agreement.max_abs_normalized <= self.max_abs:
            return f"action max abs / std {agreement.max_abs_normalized:.4g} > {self.max_abs:g}"
        return None


def parse_tolerance(text: str) -> Tolerance:
    """`cos:0.995` or `cos:0.995,maxabs:0.05`; anything else is a ConfigError naming --tolerance."""
    fields: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition(":")
        if not sep or key not in ("cos", "maxabs") or key in fields:
            raise ConfigError(
                f"--tolerance {text!r} is malformed; write it like cos:0.995 or cos:0.995,maxabs:0.05"
            )
        try:
            fields[key] = float(value)
        except ValueError:
            raise ConfigError(f"--tolerance {text!r}: {value!r} is not a number; e.g. cos:0.995") from None
    if "cos" not in fields:
        raise ConfigError(f"--tolerance {text!r} needs a cosine bound, e.g. cos:0.995")
    return Tolerance(cos=fields["cos"], max_abs=fields.get("maxabs"))


@dataclass(frozen=True)
class OutputAgreement:
    name: str
    max_abs: float
    mean_shift: float  # |mean(got) - mean(ref)| / (std(ref) + eps)
    var_shift: float  # |var(got) / var(ref) - 1|
    cosine: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ActionAgreement:
    cosine: float
    max_abs: float
    max_abs_normalized: float  # max abs error / std of the reference actions

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cosine(ref: Tensor, got: Tensor) -> float:
    a, b = ref.detach().double().flatten(), got.detach().double().flatten()
    denom = a.norm() * b.norm()
    if denom == 0:
        return 1.0 if torch.equal(a, b) else 0.0
    return float(torch.dot(a, b) / denom)


def compare_output(name: str, ref: Tensor, got: Tensor) -> OutputAgreement:
    if ref.shape != got.shape:
        raise ConfigError(f"output {name!r} has shape {tuple(got.shape)}, the reference {tuple(ref.shape)}")
    if not ref.is_floating_point():
        same = float(torch.equal(ref, got.to(ref.dtype)))
        return OutputAgreement(name, 0.0 if same else float("inf"), 0.0, 0.0, same)
    r, g = ref.detach().double(), got.detach().double()
    eps = 1e-12
    std = float(r.std()) if r.numel() > 1 else 0.0
    var = float(r.var()) if r.numel() > 1 else 0.0
    return OutputAgreement(
        name=name,
        max_abs=float((r - g).abs().max()) if r.numel() else 0.0,
        mean_shift=float(abs(g.mean() - r.mean())) / (std + eps) if r.numel() else 0.0,
        var_shift=abs(float(g.var()) / (var + eps) - 1.0) if r.numel() > 1 and var > 0 else 0.0,
        cosine=cosine(r, g),
    )


def compare_outputs(
    names: Sequence[str], ref: Sequence[Tensor], got: Sequence[Tensor]
) -> list[OutputAgreement]:
    return [compare_output(n, r, g) for n, r, g in zip(names, ref, got, strict=True)]


def compare_actions(ref: Tensor, got: Tensor) -> ActionAgreement:
    """Final actions of one plan against the reference under the same noise."""
    r, g = ref.detach().double(), got.detach().double()
    max_abs = float((r - g).abs().max())
    std = float(r.std()) if r.numel() > 1 else 1.0
    return ActionAgreement(cosine=cosine(r, g), max_abs=max_abs, max_abs_normalized=max_abs / (std or 1.0))
