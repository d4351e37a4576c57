"""A `DiffusionConfig` as JSON-ready data and back (an artifact's manifest stores it)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hotloop.errors import CheckpointError
from hotloop.models.diffusion_config import DiffusionConfig

_TUPLES = ("camera_keys", "image_shape", "resize_shape", "crop_shape", "down_dims", "feature_map")


def config_from_dict(data: dict[str, Any]) -> DiffusionConfig:
    """The inverse of `dataclasses.asdict` after a JSON round trip (lists back to tuples); a manifest
    written for other fields is refused naming them."""
    names = {f.name for f in dataclasses.fields(DiffusionConfig)}
    unknown, missing = sorted(set(data) - names), sorted(n for n in names if n not in data)
    missing = [n for n in missing if n not in ("backbone_shapes", "feature_map")]
    if unknown or missing:
        raise CheckpointError(
            f"the manifest's diffusion config does not fit this hotloop (unknown fields {unknown}, "
            f"missing {missing}); recompile the artifact"
        )
    values = dict(data)
    for name in _TUPLES:
        if values.get(name) is not None:
            values[name] = tuple(values[name])
    values["backbone_shapes"] = tuple(
        (str(key), tuple(int(d) for d in shape)) for key, shape in values.get("backbone_shapes") or ()
    )
    return DiffusionConfig(**values)
