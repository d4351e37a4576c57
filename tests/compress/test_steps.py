from __future__ import annotations

import copy

import pytest
import torch

from hotloop.compress.distill import DistillConfig
from hotloop.compress.steps import step_distill, step_sweep
from hotloop.errors import ConfigError
from hotloop.models.pi_targets import build_model, random_observation, resolve_config
from hotloop.targets import TargetOptions


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    cfg = resolve_config("pi05:tiny", TargetOptions())
    return build_model(cfg, torch.float32, "cpu", 0), random_observation(cfg, 4, "cpu", 0)


def test_fewer_steps_sweep(tiny) -> None:  # type: ignore[no-untyped-def]
    model, obs = tiny
    rows = step_sweep(model, obs, (10, 5, 2, 1))
    assert [r["steps"] for r in rows] == [10, 5, 2, 1]
    assert rows[0]["cosine"] == pytest.approx(1.0) and rows[0]["max_abs"] == 0.0
    assert all(r["cosine"] < 1.0 and r["max_abs"] > 0 for r in rows[1:])
    assert rows[-1]["max_abs"] > rows[1]["max_abs"]  # one Euler step strays further than five
    with pytest.raises(ConfigError, match="--steps"):
        step_sweep(model, obs, (0,))


def test_step_distillation_brings_few_steps_closer_to_ten(tiny) -> None:  # type: ignore[no-untyped-def]
    model, obs = tiny
    student = copy.deepcopy(model)
    report = step_distill(model, student, obs, 2, DistillConfig(steps=8, batch=4, lr=1e-3))
    assert report["chunk_mse_after"] < report["chunk_mse_before"]
