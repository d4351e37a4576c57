"""Model-agnostic torch tools below every family and every optimisation: fake quantization, resumable
training. Nothing here knows a family or a backend."""

from torch import nn


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
