from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hotloop.compile.calibration import CalibrationSpec, load_calibration, open_dataset
from hotloop.compile.sources import load_target
from hotloop.errors import CheckpointError
from hotloop.families.pi.compression.qat import QatConfig, qat_losses, run_qat
from hotloop.families.pi.sampling import flow_matching_loss


@pytest.fixture(scope="module")
def setup(recorded: Path):  # type: ignore[no-untyped-def]
    model, adapter = load_target("pi05:tiny", open_dataset(recorded))
    calib = load_calibration(recorded, adapter, CalibrationSpec(count=16))
    return model, calib


def test_flow_matching_term_is_the_library_loss(setup) -> None:  # type: ignore[no-untyped-def]
    model, calib = setup
    obs, actions = calib.batch([0, 1]), calib.actions[:2]
    noise, t = torch.randn(actions.shape), torch.tensor([0.3, 0.8])
    mask = torch.ones(actions.shape[-1])
    with torch.no_grad():
        fm, kd = qat_losses(model, model, obs, actions, noise, t, mask)
        ref = flow_matching_loss(model, obs, actions, noise=noise, time=t)
    assert torch.allclose(fm, ref, rtol=1e-5) and float(kd) == 0.0  # teacher == student: no distillation


def test_qat_reduces_its_loss_and_keeps_linears_plain(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, calib = setup
    config = QatConfig(steps=25, batch=4, lr=2e-3, checkpoint_every=10, eval_size=8)
    student, result = run_qat(model, calib, config, tmp_path, action_dim=4)
    assert result.steps_done == 25 and result.resumed_from == 0
    assert result.eval_loss_after < 0.8 * result.eval_loss_before, result
    assert type(student.expert.layers[0].mlp.down_proj) is torch.nn.Linear  # fake quant detached
    assert not torch.equal(
        student.expert.layers[0].mlp.down_proj.weight, model.expert.layers[0].mlp.down_proj.weight
    )


def test_interrupted_qat_resumes_to_the_same_weights(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, calib = setup
    config = QatConfig(steps=8, batch=4, lr=1e-3, checkpoint_every=3, eval_size=4)
    straight, _ = run_qat(model, calib, config, tmp_path / "a", action_dim=4)
    _, first = run_qat(model, calib, config, tmp_path / "b", action_dim=4, stop_after=5)  # dies after 5
    assert first.steps_done == 5
    resumed, second = run_qat(model, calib, config, tmp_path / "b", action_dim=4)
    assert second.resumed_from == 3 and second.steps_done == 8  # from the last checkpoint (step 3)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    other = QatConfig(steps=8, batch=4, lr=5e-4, checkpoint_every=3, eval_size=4)
    with pytest.raises(CheckpointError, match="other settings"):
        run_qat(model, calib, other, tmp_path / "b", action_dim=4)
