"""Parity with LeRobot's own saved processors on the shared fixtures: raw_inputs.npz through the
preprocessor gives inputs.npz bitwise (token ids and masks exactly), actions.npy through the
postprocessor gives raw_actions.npy (measured: bitwise; accepted within 1e-6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hotloop.lerobot.processors import read_policy_processors
from hotloop.lerobot.steps import Device, Normalize, Tokenize

RAW_ACTIONS_TOL = 1e-6
FAMILIES = ["lerobot-act-tiny", "lerobot-diffusion-tiny", "lerobot-smolvla-tiny"]


@pytest.mark.parametrize("name", FAMILIES)
def test_preprocessor_gives_inputs_bitwise(fixtures_dir: Path, name: str) -> None:
    folder = fixtures_dir / name
    pre, _ = read_policy_processors(folder)
    raw, ref = dict(np.load(folder / "raw_inputs.npz")), np.load(folder / "inputs.npz")
    out = pre(raw)
    for key in ref.files:
        got = out[key].numpy()
        assert got.dtype == ref[key].dtype, f"{name} {key}: dtype {got.dtype} != {ref[key].dtype}"
        assert got.shape == ref[key].shape, f"{name} {key}: shape {got.shape} != {ref[key].shape}"
        assert np.array_equal(got, ref[key]), (
            f"{name} {key}: max abs diff {np.abs(got.astype(np.float64) - ref[key]).max():.3g}"
        )
    # Nothing the policy reads was invented: the observation keys are exactly the fixture's.
    assert {k for k in out if k.startswith("observation.")} == set(ref.files)


@pytest.mark.parametrize("name", FAMILIES)
def test_postprocessor_gives_raw_actions(fixtures_dir: Path, name: str) -> None:
    folder = fixtures_dir / name
    _, post = read_policy_processors(folder)
    got = post.action(np.load(folder / "actions.npy")).numpy()
    ref = np.load(folder / "raw_actions.npy")
    assert got.dtype == np.float32 and got.shape == ref.shape
    diff = float(np.abs(got.astype(np.float64) - ref).max())
    assert diff <= RAW_ACTIONS_TOL, f"{name}: raw actions max abs diff {diff:.3g}"


def test_fixture_pipelines_read_as_saved(fixtures_dir: Path) -> None:
    """The steps and settings the READMEs describe are the ones read (e.g. smolvla's IDENTITY images)."""
    pre, post = read_policy_processors(fixtures_dir / "lerobot-smolvla-tiny")
    assert [type(s).__name__ for s in pre.steps] == [
        "RenameObservations", "AddBatchDim", "NewLineTask", "Tokenize", "Device", "Normalize",
    ]  # fmt: skip
    (tok,) = pre.find(Tokenize)
    assert isinstance(tok, Tokenize)
    assert (tok.max_length, tok.padding, tok.padding_side, tok.truncation) == (16, "longest", "right", True)
    (norm,) = pre.find(Normalize)
    assert isinstance(norm, Normalize) and norm.eps == 1e-8 and not norm.inverse
    assert {t.value: m.value for t, m in norm.norm_map.items()} == {
        "VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD",
    }  # fmt: skip
    (unnorm,) = post.find(Normalize)
    assert isinstance(unnorm, Normalize) and unnorm.inverse and list(unnorm.features) == ["action"]
    assert all(isinstance(d, Device) and d.device == "cpu" for d in pre.find(Device) + post.find(Device))
    raw = dict(np.load(fixtures_dir / "lerobot-smolvla-tiny" / "raw_inputs.npz"))
    assert pre(raw)["task"] == [t + "\n" for t in raw["task"].tolist()]
