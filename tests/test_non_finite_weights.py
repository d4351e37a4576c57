"""Weights holding NaN or inf are refused at load, on every load path, in one line naming the file and
the tensor (exit 2): each family's checkpoint folder (the shipped demo checkpoints, one tensor poisoned),
LeRobot normaliser statistics, an artifact's weight file, an ONNX file's initializers, the learned detector."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import CheckpointError

ASSETS = Path(__file__).resolve().parents[1] / "src" / "hotloop" / "assets"
runner = CliRunner()


def poison(path: Path, value: float = float("nan"), key: str | None = None) -> str:
    """Set one entry of a float tensor of the safetensors file `path` to `value`; returns its name."""
    tensors = load_file(str(path))
    name = key or next(k for k, v in tensors.items() if v.is_floating_point() and v.numel() > 1)
    tensors[name].reshape(-1)[1] = value
    save_file(tensors, str(path), metadata={"format": "pt"})
    return name


def one_error_line(args: list[str]) -> str:
    res = runner.invoke(app, args)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.output[-2000:]
    return lines[0]


@pytest.mark.parametrize(
    ("asset", "value"),
    [
        ("demo_conveyor", float("nan")),  # pi
        ("demo_conveyor_act", float("inf")),
        ("demo_conveyor_diffusion", float("-inf")),
        ("demo_conveyor_smolvla", float("nan")),
    ],
)
def test_a_checkpoint_folder_with_a_non_finite_weight_is_refused_at_load(
    asset: str, value: float, tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(ASSETS / asset, tmp_path / asset))
    name = poison(folder / "model.safetensors", value)
    line = one_error_line(["bench", str(folder), "--iters", "1", "--warmup", "0", "--quiet"])
    assert str(folder / "model.safetensors") in line and repr(name) in line, line
    assert "1 non-finite value(s)" in line


def test_normaliser_statistics_with_nan_are_refused(tmp_path: Path) -> None:
    folder = Path(shutil.copytree(ASSETS / "demo_conveyor_act", tmp_path / "act"))
    stats = next(folder.glob("*normalizer_processor.safetensors"))
    name = poison(stats)
    from hotloop.targets import TargetOptions, find_target

    with pytest.raises(CheckpointError, match=rf"{stats}: tensor '{name}' holds 1 non-finite"):
        find_target(str(folder)).build_policy(str(folder), TargetOptions())


def test_an_artifact_whose_weight_file_holds_nan_is_refused(tmp_path: Path, compile_tiny) -> None:
    """An artifact compiled before the weights were checked (its sha256 matches the damaged file)."""
    art = tmp_path / "art"
    res = compile_tiny(art, "eager")
    assert res.exit_code == 0, res.output
    manifest = json.loads((art / "manifest.json").read_text())
    weights = art / manifest["weights"]
    name = poison(weights, float("inf"))
    manifest["files"][manifest["weights"]] = hashlib.sha256(weights.read_bytes()).hexdigest()
    (art / "manifest.json").write_text(json.dumps(manifest))
    line = one_error_line(["bench", str(art), "--iters", "1", "--warmup", "0", "--quiet"])
    assert str(weights) in line and repr(name) in line, line


def test_an_onnx_file_with_a_nan_initializer_is_refused(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    with torch.no_grad():
        model[0].weight[1, 2] = float("nan")
    path = tmp_path / "bad.onnx"
    torch.onnx.export(model, (torch.zeros(1, 4),), str(path), input_names=["x"], dynamo=False)
    line = one_error_line(
        ["compile", str(path), "--input", "x:1,4", "-o", str(tmp_path / "art"), "--backends", "onnxruntime"]
    )
    assert str(path) in line and "non-finite" in line, line
    assert not (tmp_path / "art").exists()


def test_the_learned_detector_with_nan_weights_is_refused(tmp_path: Path) -> None:
    from hotloop.perception.learned_detector import load_detector

    folder = Path(shutil.copytree(ASSETS / "demo_detector", tmp_path / "det"))
    name = poison(folder / "detector.safetensors")
    with pytest.raises(CheckpointError, match=rf"detector.safetensors: tensor '{name}' holds 1 non-finite"):
        load_detector(folder)


def test_finite_checks_scan_large_tensors_in_slices() -> None:
    from hotloop.finite import SLICE, count_non_finite, is_finite, non_finite_output

    big = torch.zeros(SLICE * 2 + 5)
    assert is_finite(big) and count_non_finite(big) == 0
    big[-1] = float("nan")
    assert not is_finite(big) and count_non_finite(big) == 1
    assert is_finite(torch.arange(10))  # integers are always finite
    out = {"actions": np.zeros((2, 3)), "extra": (np.ones(2), np.array([1.0, np.inf]))}
    assert non_finite_output(out) == "extra[1]: 1 of 2 values"
    assert non_finite_output({"actions": np.zeros(3), "flag": True, "mode": "guided"}) is None
