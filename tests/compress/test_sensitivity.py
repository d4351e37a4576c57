from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from hotloop.compile.calibration import CalibrationSpec, load_calibration, open_dataset
from hotloop.compile.sources import load_target
from hotloop.compile.validate import Tolerance
from hotloop.compress.sensitivity import SensitivityConfig, measure_sensitivity, mixed_precision

FRAGILE = "denoise_step/blocks.1.mlp_down"


def make_fragile(model: torch.nn.Module) -> None:
    """One input channel of the expert's last down projection 1000x larger than the rest (and its
    weight column 1000x smaller): fp32 barely notices, a per-tensor int8 range on that input rounds
    every other channel to zero."""
    mlp = model.expert.layers[1].mlp  # type: ignore[union-attr, index]
    with torch.no_grad():
        mlp.up_proj.weight[0] *= 1000.0
        mlp.down_proj.weight[:, 0] /= 1000.0


@pytest.fixture(scope="module")
def fragile(recorded: Path):  # type: ignore[no-untyped-def]
    ds = open_dataset(recorded)
    model, adapter = load_target("pi05:tiny", ds)
    make_fragile(model)
    calib = load_calibration(recorded, adapter, CalibrationSpec(count=16))
    return model, adapter, calib


def test_sensitivity_ranks_the_fragile_layer_first(fragile) -> None:  # type: ignore[no-untyped-def]
    model, adapter, calib = fragile
    config = SensitivityConfig(mode="int8", samples=8)
    result, probe = measure_sensitivity("pi05:tiny", model, calib, config, 4, adapter.gripper_dim)
    ranking = [u.key for u in result.units]
    assert ranking[0] == "denoise_step/blocks.1.down_proj", ranking[:3]
    worst, second = result.units[0].error, result.units[1].error
    assert 1 - worst.cosine > 3 * (1 - second.cosine), (worst.cosine, second.cosine)
    assert len(worst.dim_error) == 4 and worst.gripper_flip_rate is not None
    assert all(u.gain_ms is not None for u in result.units)  # measured for every int8 unit
    assert not any("action_out_proj" in u.key for u in result.units)  # stays fp32
    plan = mixed_precision(result, probe, Tolerance(cos=0.9995), 4, adapter.gripper_dim)
    assert plan["met"] and plan["error"]["cosine"] >= 0.9995
    assert "blocks.1.down_proj" in plan["fp32_layers"]["denoise_step"]
    no_gain = {u.key for u in result.units if u.gain_ms is not None and u.gain_ms <= 0}
    assert set(plan["fp32_no_gain_units"]) == no_gain  # nothing is quantized that gains nothing here
    # With every unit gaining the same, the search returns the fragile one (most error) first and stops.
    even = replace(result, units=[replace(u, gain_ms=1.0) for u in result.units])
    plan = mixed_precision(even, probe, Tolerance(cos=0.9995), 4, adapter.gripper_dim)
    assert plan["met"] and plan["fp32_units"][0] == "denoise_step/blocks.1.down_proj"
    assert len(plan["quantized_units"]) > len(result.units) // 2


def test_block_granularity_groups_layers(fragile) -> None:  # type: ignore[no-untyped-def]
    model, adapter, calib = fragile
    result, _ = measure_sensitivity(
        "pi05:tiny", model, calib, SensitivityConfig(mode="int8", granularity="block", samples=4), 4
    )
    assert result.units[0].key == "denoise_step/blocks.1"
    assert "blocks.1.down_proj" in result.units[0].layers and len(result.units[0].layers) > 3
