"""LeRobot's feature vocabulary: feature types, normalisation modes, and what each mode computes.

A LeRobot policy describes its inputs and outputs as `{"observation.state": {"type": "STATE", "shape":
[6]}, ...}` (config.json's `input_features` / `output_features`, and the `features` of a normaliser step)
and picks a normalisation per feature *type* (`normalization_mapping` / `norm_map`). These names are read
here, checked, and turned into frozen values; a name LeRobot does not define is a `CheckpointError` naming
the file and the field. `transform` is the arithmetic of LeRobot's `_NormalizationMixin._apply_transform`
(commit 7427f318) operation for operation, so float32 results are bitwise LeRobot's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch

from hotloop.errors import CheckpointError
from hotloop.models.checkpoint_meta import Fields


class FeatureType(StrEnum):
    """LeRobot's `configs.types.FeatureType` (values are the strings its JSON holds)."""

    STATE = "STATE"
    VISUAL = "VISUAL"
    ENV = "ENV"
    ACTION = "ACTION"
    REWARD = "REWARD"
    LANGUAGE = "LANGUAGE"


class NormMode(StrEnum):
    """LeRobot's `configs.types.NormalizationMode`: every mode defined at commit 7427f318."""

    MIN_MAX = "MIN_MAX"
    MEAN_STD = "MEAN_STD"
    IDENTITY = "IDENTITY"
    QUANTILES = "QUANTILES"
    QUANTILE10 = "QUANTILE10"

    @property
    def stat_names(self) -> tuple[str, ...]:
        """The two statistics the mode reads (LeRobot raises when either is missing); () for IDENTITY."""
        return _NEEDS[self]


_NEEDS: dict[NormMode, tuple[str, ...]] = {
    NormMode.MEAN_STD: ("mean", "std"),
    NormMode.MIN_MAX: ("min", "max"),
    NormMode.QUANTILES: ("q01", "q99"),
    NormMode.QUANTILE10: ("q10", "q90"),
    NormMode.IDENTITY: (),
}


@dataclass(frozen=True)
class Feature:
    """One named input or output: its LeRobot type and the per-sample shape (no batch or time axis)."""

    key: str
    type: FeatureType
    shape: tuple[int, ...]


def bad_field(fields: Fields, key: str, want: str) -> CheckpointError:
    """The error `Fields` raises for a field of the wrong kind, for kinds `Fields` has no reader for."""
    value = fields.data[key]
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return CheckpointError(
        f"{fields.file}: field {fields.name(key)!r} must be {want} (got {shown}); fix or delete the field"
    )


def _enum(fields: Fields, key: str, kind: type[FeatureType] | type[NormMode]) -> Any:
    value = fields.data[key]
    names = [m.value for m in kind]
    if not isinstance(value, str) or value not in names:
        raise bad_field(fields, key, "one of " + ", ".join(map(repr, names)))
    return kind(value)


def read_shape(fields: Fields, key: str) -> tuple[int, ...]:
    """A list of non-negative integers (a tensor shape)."""
    value = fields.data.get(key)
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value
    ):
        raise bad_field(fields, key, "a list of non-negative integers (a shape)")
    return tuple(value)


def read_features(features: Fields) -> dict[str, Feature]:
    """`{"name": {"type": "STATE", "shape": [6]}, ...}` -> {name: Feature}, in the file's order.

    `features` is the mapping itself, e.g. `Fields(config, path).obj("input_features")` or a normaliser
    step's `config.features`.
    """
    out: dict[str, Feature] = {}
    for key in features.data:
        entry = features.obj(key)
        assert entry is not None
        for field in ("type", "shape"):
            if field not in entry:
                raise CheckpointError(
                    f"{features.file}: field {entry.name(field)!r} is missing; every feature needs a type "
                    "and a shape"
                )
        out[key] = Feature(key, _enum(entry, "type", FeatureType), read_shape(entry, "shape"))
    return out


def read_policy_features(config: Fields) -> tuple[dict[str, Feature], dict[str, Feature]]:
    """config.json's (`input_features`, `output_features`); an absent one reads as empty."""
    inputs, outputs = config.obj("input_features"), config.obj("output_features")
    return (
        read_features(inputs) if inputs is not None else {},
        read_features(outputs) if outputs is not None else {},
    )


def read_norm_map(norm_map: Fields) -> dict[FeatureType, NormMode]:
    """`{"STATE": "MEAN_STD", ...}` (config.json's `normalization_mapping`, a step's `norm_map`)."""
    out: dict[FeatureType, NormMode] = {}
    types = [t.value for t in FeatureType]
    for key in norm_map.data:
        if key not in types:
            raise CheckpointError(
                f"{norm_map.file}: field {norm_map.name(key)!r} names no LeRobot feature type; use one of "
                + ", ".join(map(repr, types))
            )
        out[FeatureType(key)] = _enum(norm_map, key, NormMode)
    return out


def transform(
    x: torch.Tensor, mode: NormMode, stats: dict[str, torch.Tensor], eps: float, inverse: bool
) -> torch.Tensor:
    """LeRobot's normalisation (inverse: unnormalisation) of `x` with `stats` already in `x`'s dtype.

    Where eps goes matters at float32 (a std below ~1e-6 feels it): MEAN_STD divides by (std + eps) but
    unnormalises with std alone; MIN_MAX and the quantile modes replace an exactly-zero range by eps, and
    only then. The rest is LeRobot's expression order as written (MIN_MAX halves before scaling, the
    quantile modes after; halving is exact, so the two agree).
    """
    if mode is NormMode.IDENTITY:
        return x
    if mode is NormMode.MEAN_STD:
        mean, std = stats["mean"], stats["std"]
        if inverse:
            return x * std + mean
        return (x - mean) / (std + eps)
    low_name, high_name = mode.stat_names
    low, high = stats[low_name], stats[high_name]
    denom = high - low
    denom = torch.where(denom == 0, torch.tensor(eps, device=x.device, dtype=x.dtype), denom)
    if mode is NormMode.MIN_MAX:
        if inverse:
            return (x + 1) / 2 * denom + low
        return 2 * (x - low) / denom - 1
    if inverse:
        return (x + 1.0) * denom / 2.0 + low
    return 2.0 * (x - low) / denom - 1.0


__all__ = [
    "Feature",
    "FeatureType",
    "NormMode",
    "bad_field",
    "read_features",
    "read_norm_map",
    "read_policy_features",
    "read_shape",
    "transform",
]
