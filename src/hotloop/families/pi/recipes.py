"""The one place the pi sub-engine transforms are composed (each transform lives in its own module)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hotloop.families.pi.engines import PiEngineShape, SubEngine, build_pi_subengines
from hotloop.families.pi.fuse import drop_unused_query, fold_norms, fold_pi0_time, fuse_projections
from hotloop.models.pi0 import PiModel


def fast_pi_subengines(model: PiModel, shape: PiEngineShape, dtype: torch.dtype) -> dict[str, SubEngine]:
    """`build_pi_subengines` (time, masks and RoPE precomputed) with norms folded, projections fused and
    the prefix's unused last queries dropped; pi0 also gets its time MLP half folded into a per-step bias. Same interface, same outputs up to
    rounding (tests/compile/test_fuse.py states the tolerances)."""
    engines = drop_unused_query(fuse_projections(fold_norms(build_pi_subengines(model, shape, dtype))))
    return engines if model.cfg.pi05 else fold_pi0_time(engines)


# Sub-engine recipes the planner may pick between: "plain" is the model's own structure with the tables
# precomputed; "fused" folds norms into the next linear and fuses Q/K/V and gate/up (compile-fast).
RECIPES: dict[str, Callable[[PiModel, PiEngineShape, torch.dtype], dict[str, SubEngine]]] = {
    "plain": build_pi_subengines,
    "fused": fast_pi_subengines,
}
