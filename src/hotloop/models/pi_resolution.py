"""A pi0 / pi0.5 whose SigLIP tower takes a lower input resolution: the `vision-res:S` recipe step.

At a side S instead of the checkpoint's N the tower runs (S/p)^2 patches instead of (N/p)^2, and every
patch is one image token of the prefix, so the VLM's prefix is shorter by views x ((N/p)^2 - (S/p)^2)
tokens too (pi05:small at S = 160: 100 tokens a view instead of 196). What changes, all read from the
config (patch size p, current side, native side N), none hard-coded:

- the position table: the learned embeddings of the (N/p) x (N/p) grid resampled to (S/p) x (S/p), bicubic
  over the grid as SmolVLA's (`hotloop.models.vision_resolution.interpolate_positions`), stored as the
  student's weights;
- the config: `vision.image_size` = S, `native_image_size` = N. Observations, bench inputs and served
  frames stay at N (`PiConfig.image_side`); the model's own vision path resizes them to S
  (`hotloop.models.pi0.fit_views`), inside the traced vision engine too, so a compiled plan takes the same
  inputs as the teacher's;
- nothing else: every weight but the position table is the teacher's (the projector reads one patch at a
  time, whatever the grid).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hotloop.models.configs import PiConfig
from hotloop.models.pi0 import PiModel
from hotloop.models.vision_resolution import check_lower_side, with_positions

POSITION_KEY = "vision_tower.position_embedding.weight"


def check_side(cfg: PiConfig, side: int, flag: str) -> None:
    """ConfigError (one line naming `flag`, the recipe's value, and the fix) unless `side` is a multiple of
    the patch size below the tower's current side."""
    p = cfg.vision.patch_size
    check_lower_side(side, cfg.vision.image_size, p, f"patch {p}", "the tower cuts whole patches", flag)


def lower_config(cfg: PiConfig, side: int) -> PiConfig:
    """`cfg` with the vision tower fed (side, side) images; the side observations come at kept."""
    return dataclasses.replace(
        cfg, vision=dataclasses.replace(cfg.vision, image_size=side), native_image_size=cfg.image_side
    )


def lower_resolution(model: PiModel, side: int) -> tuple[PiModel, dict[str, Any]]:
    """A new pi model taking (side, side) images: `model`'s weights with the position table interpolated
    (the input model is left as it is), and what changed."""
    cfg = model.cfg
    check_side(cfg, side, f"--recipe vision-res:{side}")
    new_cfg = lower_config(cfg, side)
    p = cfg.vision.patch_size
    student = with_positions(model, PiModel, new_cfg, POSITION_KEY, cfg.vision.image_size // p, side // p)
    return student, resolution_details(cfg, new_cfg)


def resolution_details(before: PiConfig, after: PiConfig) -> dict[str, Any]:
    """The sizes before and after the step: side, patches (= image tokens) a view, prefix length at the
    full prompt, and the side observations come at."""

    def sizes(c: PiConfig) -> dict[str, int]:
        return {
            "side": int(c.vision.image_size),
            "patches_per_view": c.vision.tokens_per_view,
            "tokens_per_view": c.vision.tokens_per_view,
            "prefix_tokens": c.prefix_len,
        }

    return {"from": sizes(before), "to": sizes(after), "native_side": int(after.image_side)}


__all__ = ["POSITION_KEY", "check_side", "lower_config", "lower_resolution", "resolution_details"]
