"""A SmolVLA plan whose every sub-engine runs from its own files (OpenVINO) is written lean, as pi's is:
no source weights, and `Engine.load` and the artifact's policy work without ever building the model,
with the eager checkpoint policy's actions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.targets import TargetOptions, find_target

pytest.importorskip("openvino")


@pytest.mark.slow  # about 16 CPU-s: a whole OpenVINO compile of the checkpoint and two policies
def test_a_lean_smolvla_artifact_serves_its_policy_without_the_model(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "art"
    res = CliRunner().invoke(
        app,
        ["compile", str(checkpoint), "-o", str(out), "--budget-ms", "1e5", "--backends", "openvino",
         "--precisions", "fp32", "--variants", "plain", "--iters", "1", "--warmup", "0", "--threads", "1",
         "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["layout"] == "lean" and manifest["weights"] is None
    assert not (out / "weights.safetensors").exists() and "tables.safetensors" in manifest["files"]
    eager_policy = find_target(str(checkpoint)).build_policy(str(checkpoint), TargetOptions())
    g = np.random.default_rng(0)
    obs = {"images": {"top": g.integers(0, 255, (24, 40, 3), dtype=np.uint8),
                      "wrist": g.integers(0, 255, (24, 40, 3), dtype=np.uint8)},
           "state": g.normal(size=10).astype(np.float32), "prompt": "w5 w6 w7"}  # fmt: skip
    want = eager_policy.infer(obs)["actions"]

    from hotloop.models.smolvla import SmolVLAModel

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("loading a lean SmolVLA artifact built the torch model")

    monkeypatch.setattr(SmolVLAModel, "__init__", refuse)
    policy = find_target(str(out)).build_policy(str(out), TargetOptions())
    assert policy.engine.model is None and {r.backend for r in policy.engine.runners.values()} == {"openvino"}
    np.testing.assert_allclose(policy.infer(obs)["actions"], want, atol=1e-4)
