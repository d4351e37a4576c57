"""What every `vision-res:S` step shares, whatever the family (SmolVLA: `smolvla_resolution`, pi0 / pi0.5:
`pi_resolution`): the refusal of a side the patch grid cannot take, the learned position table resampled
to the smaller grid, and the lowered model rebuilt from the teacher's weights with that table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.errors import ConfigError

ModelT = TypeVar("ModelT", bound=nn.Module)


def check_lower_side(side: int, current: int, multiple: int, basis: str, why: str, flag: str) -> None:
    """ConfigError (one line naming `flag`, the recipe's value, and the fix) unless `side` is a multiple of
    `multiple` below `current`. `basis` says where the multiple comes from (`patch 16`), `why` why a side
    must be one (`the tower cuts whole patches`)."""
    m = multiple
    lower = list(range(m, current, m))
    if not lower:
        raise ConfigError(
            f"{flag}: the vision tower takes {current} px, the smallest side its patch grid allows "
            f"({basis}: multiples of {m}); no lower resolution exists: drop the step"
        )
    if side >= current:
        raise ConfigError(
            f"{flag}: the vision tower already takes {current} px; give a smaller side, a multiple of {m} "
            f"({basis}), e.g. vision-res:{lower[-1]}"
        )
    if side % m:
        near = sorted({max(m, side // m * m), min(lower[-1], (side // m + 1) * m)})
        raise ConfigError(
            f"{flag}: {side} px is not a multiple of {m} ({basis}: {why}); "
            f"use {' or '.join(f'vision-res:{x}' for x in near)}"
        )


def interpolate_positions(table: Tensor, old_side: int, new_side: int) -> Tensor:
    """(old_side^2, width) position embeddings of a row-major patch grid -> (new_side^2, width): bicubic over
    the grid, `align_corners=False`, in float32, as transformers' `interpolate_pos_encoding`."""
    width = table.shape[-1]
    grid = table.float().reshape(1, old_side, old_side, width).permute(0, 3, 1, 2)
    out = F.interpolate(grid, size=(new_side, new_side), mode="bicubic", align_corners=False)
    return out.permute(0, 2, 3, 1).reshape(new_side * new_side, width).to(table.dtype)


@torch.no_grad()
def with_positions(
    model: nn.Module, build: Callable[[Any], ModelT], cfg: Any, key: str, old_grid: int, new_grid: int
) -> ModelT:
    """A new model `build(cfg)` holding `model`'s weights but its position table (`key`, an old_grid x
    old_grid grid) resampled to new_grid x new_grid; `model` is left as it is. Built on the meta device and
    loaded by assignment: no second random initialisation of a large model."""
    state = dict(model.state_dict())
    state[key] = interpolate_positions(state[key], old_grid, new_grid)
    dtype = state[key].dtype
    with torch.device("meta"):
        student = build(cfg).to(dtype)
    student.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True, assign=True)
    return student.eval()


__all__ = ["check_lower_side", "interpolate_positions", "with_positions"]
