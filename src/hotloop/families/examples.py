"""Sub-engines given their example inputs, for every family: the model in the engines' dtype, then each
module run once on a synthetic observation, in signature order, so that every engine's example inputs are
what the engine before it really answers (realistic values for calibration and the backends' tracing)."""

from __future__ import annotations

import copy
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from hotloop.families.protocol import Signature, SubEngine, as_tuple


def model_in(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """`model` in eval mode and `dtype`: a copy when its dtype differs (the caller's model stays as it is)."""
    # A model that says its dtype (pi's, SmolVLA's: the action projection's) is taken at its word.
    current = getattr(model, "dtype", None) or next(model.parameters()).dtype
    if current != dtype:
        model = copy.deepcopy(model).to(dtype)
    return model.eval()


@torch.no_grad()
def run_examples(
    modules: Mapping[str, nn.Module],
    signatures: Mapping[str, Signature],
    values: dict[str, Tensor],
    constants: Mapping[str, dict[str, Tensor]] | None = None,
) -> dict[str, SubEngine]:
    """The sub-engines of `modules`, in `signatures`' order, each run on the `values` it names (its outputs
    added to them for the engines after it); `constants`: each engine's build-time tables, by its name."""
    engines: dict[str, SubEngine] = {}
    for name, sig in signatures.items():
        inputs = tuple(values[n] for n in sig.input_names)
        values.update(zip(sig.output_names, as_tuple(modules[name](*inputs)), strict=True))
        own = (constants or {}).get(name, {})
        engines[name] = SubEngine(name, modules[name], inputs, sig.input_names, sig.output_names, own)
    return engines
