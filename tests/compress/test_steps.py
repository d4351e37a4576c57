from __future__ import annotations

import copy

import pytest
import torch

from hotloop.compress.steps import step_sweep
from hotloop.errors import ConfigError
from hotloop.families import get_family
from hotloop.families.pi.compression.distill import DistillConfig
from hotloop.families.pi.compression.step_distill import (
    PREFIX_MODULES,
    StepDistillOptions,
    shared_times,
    step_distill,
)
from hotloop.families.pi.targets import build_model, random_observation, resolve_config
from hotloop.targets import TargetOptions


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    cfg = resolve_config("pi05:tiny", TargetOptions())
    return build_model(cfg, torch.float32, "cpu", 0), random_observation(cfg, 4, "cpu", 0)


def test_fewer_steps_sweep(tiny) -> None:  # type: ignore[no-untyped-def]
    model, obs = tiny
    rows = step_sweep(get_family("pi"), model, obs, (10, 5, 2, 1))
    assert [r["steps"] for r in rows] == [10, 5, 2, 1]
    assert rows[0]["cosine"] == pytest.approx(1.0) and rows[0]["max_abs"] == 0.0
    assert all(r["cosine"] < 1.0 and r["max_abs"] > 0 for r in rows[1:])
    assert rows[-1]["max_abs"] > rows[1]["max_abs"]  # one Euler step strays further than five
    with pytest.raises(ConfigError, match="--steps"):
        step_sweep(get_family("pi"), model, obs, (0,))


def test_step_distillation_brings_few_steps_closer_to_ten(tiny) -> None:  # type: ignore[no-untyped-def]
    model, obs = tiny
    student = copy.deepcopy(model)
    report = step_distill(model, student, obs, 2, DistillConfig(steps=8, batch=4, lr=1e-3))
    assert report["chunk_mse_after"] < report["chunk_mse_before"]


def test_shared_flow_times_pair_student_and_teacher_states() -> None:
    assert shared_times(4, 10) == [(2, 5), (4, 10)]  # t = 0.5 and the chunk
    assert shared_times(2, 10) == [(1, 5), (2, 10)]
    assert shared_times(3, 10) == [(3, 10)]  # only the chunk: 10/3 steps never land together
    assert shared_times(5, 10) == [(1, 2), (2, 4), (3, 6), (4, 8), (5, 10)]


def test_step_distill_refuses_as_many_steps_as_the_teacher(tiny) -> None:  # type: ignore[no-untyped-def]
    model, obs = tiny
    for n in (10, 12):
        with pytest.raises(
            ConfigError, match=rf"--recipe step-distill:{n}: .* fewer steps than the teacher's 10"
        ):
            step_distill(model, copy.deepcopy(model), obs, n, DistillConfig(steps=1))
    with pytest.raises(ConfigError, match="--recipe step-distill"):
        step_distill(model, copy.deepcopy(model), obs, 0, DistillConfig(steps=1))


def test_zero_start_distillation_trains_only_the_expert(tiny) -> None:  # type: ignore[no-untyped-def]
    """From x = 0 with a frozen prefix: the chunk from zero noise comes closer to the teacher's 10-step one,
    vision and VLM weights are bit-identical, the expert's moved."""
    from hotloop.families.pi.sampling import sample_actions

    model, obs = tiny
    student = copy.deepcopy(model)
    opts = StepDistillOptions(noise="zero", train="expert", intermediate_weight=0.5)
    report = step_distill(model, student, obs, 2, DistillConfig(steps=10, batch=4, lr=1e-3), options=opts)
    zero = torch.zeros(obs.batch, model.cfg.chunk_size, model.cfg.max_action_dim)
    ref = sample_actions(model, obs, noise=zero, num_steps=10)
    before = float(((sample_actions(model, obs, noise=zero, num_steps=2) - ref) ** 2).mean())
    after = float(((sample_actions(student, obs, noise=zero, num_steps=2) - ref) ** 2).mean())
    assert after < 0.7 * before
    assert report["chunk_mse_before"] == pytest.approx(before, rel=1e-4)
    assert report["chunk_mse_after"] == pytest.approx(after, rel=1e-4)
    assert report["matched_times"] == [0.5, 0.0]
    teacher_params, student_params = dict(model.named_parameters()), dict(student.named_parameters())
    for name, p in student_params.items():
        same = torch.equal(p, teacher_params[name])
        if name.split(".")[0] in PREFIX_MODULES:
            assert same, name
    assert not torch.equal(student.action_out_proj.weight, model.action_out_proj.weight)
    assert not torch.equal(
        student.expert.layers[0].mlp.down_proj.weight, model.expert.layers[0].mlp.down_proj.weight
    )


def test_distillation_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="noise"):
        StepDistillOptions(noise="gaussian")
    with pytest.raises(ConfigError, match="trains one of"):
        StepDistillOptions(train="vision")
    with pytest.raises(ConfigError, match="intermediate"):
        StepDistillOptions(intermediate_weight=-1.0)


def test_first_action_weight_fits_the_executed_action_closer(tiny) -> None:  # type: ignore[no-untyped-def]
    """Same data, seeds and steps: weighting the first action brings it closer to the teacher's than the
    plain chunk loss does (a sync loop executes only that action)."""
    from hotloop.families.pi.sampling import sample_actions

    model, obs = tiny
    zero = torch.zeros(obs.batch, model.cfg.chunk_size, model.cfg.max_action_dim)
    ref = sample_actions(model, obs, noise=zero, num_steps=10)[:, 0]
    errors = []
    for weight in (0.0, 20.0):
        student = copy.deepcopy(model)
        opts = StepDistillOptions(noise="zero", first_action_weight=weight)
        step_distill(model, student, obs, 1, DistillConfig(steps=10, batch=4, lr=1e-3), options=opts)
        errors.append(
            float(((sample_actions(student, obs, noise=zero, num_steps=1)[:, 0] - ref) ** 2).mean())
        )
    assert errors[1] < 0.9 * errors[0]  # measured: 0.25 against 0.31 (one step from 2.5 undistilled)
