"""A SmolVLA whose vision tower takes a lower input resolution: the `vision-res:S` recipe step.

The vision tower's cost grows with its patches squared (attention) and linearly (everything else); at a
side S instead of the checkpoint's N it runs (S/p)^2 patches instead of (N/p)^2 and the pixel-shuffle
connector yields (S/p)^2 / s^2 tokens a view instead of (N/p)^2 / s^2, so the prefix the VLM runs is
shorter too. Three things change, all read from the checkpoint's own config (patch size p, pixel-shuffle
factor s, native side N), none hard-coded:

- the position table: the SigLIP-style learned embeddings of the (N/p) x (N/p) grid are resampled to the
  (S/p) x (S/p) grid once, bicubic over the grid (`align_corners=False`), as transformers'
  `SiglipVisionEmbeddings.interpolate_pos_encoding` does on every call, and stored as the student's weights
  (transformers' SmolVLM would otherwise bucket the smaller grid onto the table: nearest rows);
- the image preprocessing: `image_size` becomes (S, S), so LeRobot's resize-with-pad resizes each camera
  to S (`prepare_images`); observations prepared at N (the recipe's teacher observations) are resized on
  the way in (`fit_images`, `native_image_size`);
- nothing else: every weight but the position table is the teacher's; the connector's projection reads
  s^2 patches per token whatever the grid.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hotloop.models.smolvla import SmolVLAModel
from hotloop.models.smolvla_config import SmolVLAConfig
from hotloop.models.vision_resolution import check_lower_side, interpolate_positions, with_positions

POSITION_KEY = "vlm_with_expert.vlm.model.vision_model.embeddings.position_embedding.weight"


def side_multiple(cfg: SmolVLAConfig) -> int:
    """The sides the vision tower can take are multiples of this: patch size x pixel-shuffle factor (the
    connector groups s x s patches into one token)."""
    return int(cfg.vlm.vision.patch_size * cfg.vlm.scale_factor)


def native_side(cfg: SmolVLAConfig) -> int:
    """The side the checkpoint was trained at (its own image size, before any `vision-res`)."""
    return int((cfg.native_image_size or cfg.image_size)[0])


def check_side(cfg: SmolVLAConfig, side: int, flag: str) -> None:
    """ConfigError (one line naming `flag`, the recipe's value, and the fix) unless `side` is a resolution
    this SmolVLA can run below its current one."""
    p, s = cfg.vlm.vision.patch_size, cfg.vlm.scale_factor
    check_lower_side(
        side,
        int(cfg.image_size[0]),
        side_multiple(cfg),
        f"patch {p} x pixel shuffle {s}",
        f"the connector needs whole {s}x{s} groups of patches",
        flag,
    )


def lower_config(cfg: SmolVLAConfig, side: int) -> SmolVLAConfig:
    """`cfg` with the vision tower fed (side, side) images; the native size kept."""
    vision = dataclasses.replace(cfg.vlm.vision, positions_per_side=side // cfg.vlm.vision.patch_size)
    return dataclasses.replace(
        cfg,
        vlm=dataclasses.replace(cfg.vlm, vision=vision),
        image_size=(side, side),
        native_image_size=cfg.native_image_size or cfg.image_size,
    )


def lower_resolution(model: SmolVLAModel, side: int) -> tuple[SmolVLAModel, dict[str, Any]]:
    """A new SmolVLA taking (side, side) images: `model`'s weights with the position table interpolated
    (the input model is left as it is), and what changed."""
    cfg = model.cfg
    check_side(cfg, side, f"--recipe vision-res:{side}")
    new_cfg = lower_config(cfg, side)
    old, new = cfg.vlm.vision.positions_per_side, new_cfg.vlm.vision.positions_per_side
    student = with_positions(model, SmolVLAModel, new_cfg, POSITION_KEY, old, new)
    return student, resolution_details(cfg, new_cfg)


def resolution_details(before: SmolVLAConfig, after: SmolVLAConfig) -> dict[str, Any]:
    """The sizes before and after the step: side, patches and tokens a view, prefix length at the full
    prompt, and the checkpoint's own side."""

    def sizes(c: SmolVLAConfig) -> dict[str, int]:
        grid = c.image_size[0] // c.vlm.vision.patch_size
        return {
            "side": int(c.image_size[0]),
            "patches_per_view": grid * grid,
            "tokens_per_view": c.image_tokens_per_view,
            "prefix_tokens": c.prefix_len(c.tokenizer.max_length),
        }

    return {"from": sizes(before), "to": sizes(after), "native_side": native_side(after)}


__all__ = [
    "POSITION_KEY",
    "check_side",
    "interpolate_positions",
    "lower_config",
    "lower_resolution",
    "native_side",
    "resolution_details",
    "side_multiple",
]
