"""Parity with LeRobot's Diffusion Policy on the shared fixture: every intermediate and the actions."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from hotloop.models.diffusion import (
    Encoder,
    TableSampler,
    diffusion_intermediates,
    load_diffusion,
    sample_actions,
    select_action_chunk,
)

ACTIONS_TOL = 1e-5
INTERMEDIATE_TOL = 3e-5
NAME = "lerobot-diffusion-tiny"


def _load(folder: Path) -> dict[str, torch.Tensor]:
    inp = np.load(folder / "inputs.npz")
    return {
        "images": torch.from_numpy(inp["observation.image"])[
            :, :, None
        ],  # one camera: (B, n_obs, 1, C, H, W)
        "state": torch.from_numpy(inp["observation.state"]),
        "noise": torch.from_numpy(np.load(folder / "noise.npy")),
        "step_noise": torch.from_numpy(np.load(folder / "step_noise.npy")),
    }


def _diff(name: str, got: torch.Tensor, ref: np.ndarray) -> float:
    assert tuple(got.shape) == ref.shape, f"{name}: shape {tuple(got.shape)} != {ref.shape}"
    if ref.dtype == np.bool_ or ref.dtype == np.int64:
        assert np.array_equal(got.numpy(), ref), f"{name}: not exactly equal"
        return 0.0
    return float(np.abs(got.double().numpy() - ref.astype(np.float64)).max())


def test_config_matches_the_fixture(fixtures_dir: Path) -> None:
    cfg, model = load_diffusion(fixtures_dir / NAME)
    assert cfg.camera_keys == ("observation.image",) and cfg.image_shape == (3, 84, 84)
    assert cfg.crop_shape == (76, 76) and cfg.feature_map == (32, 3, 3)  # narrowed resnet18, from the tensors
    assert cfg.global_cond_dim == 72 and cfg.cond_dim == 104 and cfg.num_inference_steps == 100
    assert len(model.state_dict()) == 165


def test_every_intermediate_and_the_actions(fixtures_dir: Path) -> None:
    folder = fixtures_dir / NAME
    cfg, model = load_diffusion(folder)
    x = _load(folder)
    ref = np.load(folder / "intermediates.npz")
    with torch.no_grad():
        got = diffusion_intermediates(
            model, cfg.make_scheduler(), x["images"], x["state"], x["noise"], x["step_noise"]
        )
    assert set(got) == set(ref.files), f"keys differ: {set(got) ^ set(ref.files)}"
    diffs = {name: _diff(name, got[name], ref[name]) for name in ref.files}
    # x0 = (x_t - sqrt(1 - a) eps) / sqrt(a) multiplies the U-Net's last-bit differences from the CPU that
    # made the fixture (up to 64x at the first steps): judged per step in the U-Net output's units.
    gain = cfg.make_scheduler().x0_error_gain(got["timesteps"]).numpy()
    x0_err = np.abs(got["pred_x0_per_step"].double().numpy() - ref["pred_x0_per_step"]).reshape(len(gain), -1)
    diffs["pred_x0_per_step"] = float((x0_err.max(axis=1) / gain).max())
    worst = {k: v for k, v in diffs.items() if v > INTERMEDIATE_TOL}
    assert not worst, f"intermediates over {INTERMEDIATE_TOL}: {worst}"
    actions = _diff("actions.npy", got["actions"], np.load(folder / "actions.npy"))
    assert actions <= ACTIONS_TOL, f"actions max abs diff {actions:.3g} > {ACTIONS_TOL}"


@pytest.mark.slow  # tracing 100 unrolled U-Net calls takes ~15 s on one thread
def test_engines_and_traced_loop_reproduce_the_actions(fixtures_dir: Path) -> None:
    folder = fixtures_dir / NAME
    cfg, model = load_diffusion(folder)
    x = _load(folder)
    ref = np.load(folder / "actions.npy")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gc = model.encode(x["images"], x["state"])
        sample = sample_actions(model, cfg.make_scheduler(), gc, x["noise"], step_noise=x["step_noise"])
        d = _diff("sample_actions", select_action_chunk(sample, cfg), ref)
        assert d <= ACTIONS_TOL, f"sample_actions: max abs diff {d:.3g}"
        traced_enc = torch.jit.trace(Encoder(model), (x["images"], x["state"]))
        assert torch.equal(traced_enc(x["images"], x["state"]), gc)
        sampler = TableSampler(model, cfg.make_scheduler())
        traced = torch.jit.trace(sampler, (gc, x["noise"], x["step_noise"]), check_trace=False)
        looped = traced(gc, x["noise"], x["step_noise"])
    d = _diff("traced table loop", select_action_chunk(looped, cfg), ref)
    assert d <= ACTIONS_TOL, f"traced 100-step table loop: max abs diff {d:.3g}"
    assert torch.equal(looped, sample), f"table loop vs step loop: {(looped - sample).abs().max():.3g}"


def test_float64_stays_within_float32_rounding(fixtures_dir: Path) -> None:
    """The README's calibration: LeRobot in float64 moves the actions by ~4.4e-7."""
    folder = fixtures_dir / NAME
    dtype = torch.float64
    cfg, model = load_diffusion(folder, dtype=dtype)
    x = {k: v.to(dtype) for k, v in _load(folder).items()}
    with torch.no_grad():
        gc = model.encode(x["images"], x["state"])
        sample = sample_actions(model, cfg.make_scheduler(), gc, x["noise"], step_noise=x["step_noise"])
    assert sample.dtype == dtype
    d = _diff("float64 actions", select_action_chunk(sample, cfg), np.load(folder / "actions.npy"))
    assert d < 1e-5, f"float64 actions differ by {d:.3g}"
