"""Simulated quantization of single linear layers (straight-through), shared by sensitivity and QAT.

Quantize-dequantize in float32, so the effect of one layer's precision on the final actions can be
measured with every other layer exact, and trained through (the rounding's gradient is taken as 1,
the straight-through estimator). What each mode simulates, matching the backends in `quantize`:

| mode         | weights                                  | activations (the layer's input)            |
|--------------|------------------------------------------|--------------------------------------------|
| int8         | int8 symmetric, per output channel       | uint8 asymmetric, one range per tensor     |
| int8-dynamic | int8 symmetric, per output channel       | int8 symmetric, one range per token (row)  |
| int8-weight  | int8 symmetric, per output channel       | float32                                    |
| int4-weight  | int4 symmetric, groups of 32 inputs      | float32                                    |

`int8` takes the activation range of each call (static ranges from calibration are the same or wider).
The layers that stay float32 by default (`PROTECTED`) are the action projections and the time MLPs:
the flow-matching integrator accumulates their error over every step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.errors import ConfigError

MODES = ("int8", "int8-dynamic", "int8-weight", "int4-weight")
PROTECTED = ("action_out_proj", "action_time_mlp_in", "action_time_mlp_out", "time_mlp_in", "time_mlp_out")
INT4_GROUP = 32


def check_mode(mode: str, flag: str = "--mode") -> str:
    if mode not in MODES:
        raise ConfigError(f"{flag}: unknown quantization mode {mode!r}; use one of {', '.join(MODES)}")
    return mode


def _round_ste(x: Tensor) -> Tensor:
    return x + (torch.round(x) - x).detach()


def fake_quant_weight(w: Tensor, bits: int, group: int | None = None) -> Tensor:
    """Symmetric per-output-channel (or per-group along the input) quantize-dequantize."""
    out_f, in_f = w.shape
    g = group if group is not None and in_f % group == 0 else in_f
    wg = w.reshape(out_f, in_f // g, g)
    qmax = 2 ** (bits - 1) - 1
    scale = wg.detach().abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / qmax
    q = torch.clamp(_round_ste(wg / scale), -qmax, qmax)
    return (q * scale).reshape(out_f, in_f)


def fake_quant_activation(x: Tensor, per_token: bool) -> Tensor:
    """uint8 asymmetric per tensor, or int8 symmetric per token (last dim is the feature dim)."""
    if per_token:
        scale = x.detach().abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 127
        return torch.clamp(_round_ste(x / scale), -127, 127) * scale
    lo, hi = x.detach().amin().clamp(max=0.0), x.detach().amax().clamp(min=0.0)
    scale = ((hi - lo) / 255).clamp_min(1e-12)
    zero = torch.round(-lo / scale)
    return (torch.clamp(_round_ste(x / scale) + zero, 0, 255) - zero) * scale


class FakeQuantLinear(nn.Module):
    """A linear layer computed with quantize-dequantized weights (and inputs); shares `linear`'s weights."""

    def __init__(self, linear: nn.Linear, mode: str) -> None:
        super().__init__()
        self.linear = linear
        self.mode = check_mode(mode)

    # Engines read `.weight.dtype` of their layers; the wrapped layer's answers.
    @property
    def weight(self) -> Tensor:
        return self.linear.weight

    @property
    def bias(self) -> Tensor | None:
        return self.linear.bias

    @property
    def in_features(self) -> int:
        return self.linear.in_features

    @property
    def out_features(self) -> int:
        return self.linear.out_features

    def forward(self, x: Tensor) -> Tensor:
        w = self.linear.weight
        if self.mode == "int4-weight":
            wq = fake_quant_weight(w, 4, INT4_GROUP)
        else:
            wq = fake_quant_weight(w, 8)
        if self.mode == "int8":
            x = fake_quant_activation(x, per_token=False)
        elif self.mode == "int8-dynamic":
            x = fake_quant_activation(x, per_token=True)
        return F.linear(x, wq.to(x.dtype), self.linear.bias)


@dataclass(frozen=True)
class LayerRef:
    """One linear layer of a sub-engine: `name` is its path inside the sub-engine module."""

    sub_engine: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.sub_engine}/{self.name}"


def linear_layers(module: nn.Module, protected: Iterable[str] = PROTECTED) -> dict[str, nn.Linear]:
    """Every nn.Linear of `module` by qualified name, except the protected ones (matched by last part)."""
    keep = set(protected)
    return {
        name: m
        for name, m in module.named_modules()
        if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] not in keep
    }


def _set(module: nn.Module, name: str, child: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    parent = module.get_submodule(parent_name) if parent_name else module
    setattr(parent, attr, child)


@contextlib.contextmanager
def fake_quantized(module: nn.Module, names: Iterable[str], mode: str) -> Iterator[None]:
    """Swap the named linears of `module` for fake-quantized ones; restore them on exit."""
    swapped: list[tuple[str, nn.Module]] = []
    try:
        for name in names:
            original = module.get_submodule(name)
            if not isinstance(original, nn.Linear):
                raise ConfigError(f"layer {name!r} is a {type(original).__name__}, not a linear layer")
            _set(module, name, FakeQuantLinear(original, mode))
            swapped.append((name, original))
        yield
    finally:
        for name, original in reversed(swapped):
            _set(module, name, original)


def attach_fake_quant(module: nn.Module, names: Iterable[str], mode: str) -> nn.Module:
    """Permanently swap the named linears (QAT trains through them); returns `module`."""
    for name in names:
        original = module.get_submodule(name)
        if isinstance(original, nn.Linear):
            _set(module, name, FakeQuantLinear(original, mode))
    return module


def detach_fake_quant(module: nn.Module) -> nn.Module:
    """Undo `attach_fake_quant`: the plain linears (with the trained weights) back in place."""
    for name, m in list(module.named_modules()):
        if isinstance(m, FakeQuantLinear):
            _set(module, name, m.linear)
    return module
