"""A LeRobot pi0.5 checkpoint folder is a target of every command (bench, compile, eval, verify), and a
folder that is not one is refused naming what is missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import CheckpointError, ConfigError
from hotloop.targets import TargetOptions, find_target

runner = CliRunner()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hotloop.families.pi.checkpoint import save_lerobot_checkpoint
    from hotloop.families.pi.targets import build_model
    from hotloop.models.configs import get_pi_config

    cfg = get_pi_config("pi05:tiny")
    folder = tmp_path_factory.mktemp("pi") / "pretrained_model"
    save_lerobot_checkpoint(build_model(cfg, torch.float32, "cpu", 3), cfg, folder)
    return folder


def test_a_checkpoint_folder_is_a_target(checkpoint: Path) -> None:
    entry = find_target(str(checkpoint))
    assert "pi05 checkpoint" in entry.description
    policy = entry.build_policy(str(checkpoint), TargetOptions())
    out = policy.infer({"images": np.zeros((1, 56, 56, 3), np.uint8), "state": np.zeros(4, np.float32)})
    assert out["actions"].shape == (policy.horizon, policy.action_dim)


def test_bench_and_compile_take_the_folder(checkpoint: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["bench", str(checkpoint), "--iters", "2", "--warmup", "0"])
    assert res.exit_code == 0, res.output
    assert "prefix" in res.output and "denoise" in res.output
    art = tmp_path / "art"
    res = runner.invoke(
        app,
        ["compile", str(checkpoint), "-o", str(art), "--budget-ms", "1e5", "--backends", "eager",
         "--variants", "plain", "--iters", "1", "--warmup", "0", "--threads", "1"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["kind"] == "pi" and manifest["policy"]["checkpoint"] == str(checkpoint.resolve())


def test_eval_runs_the_folder_in_closed_loop(checkpoint: Path) -> None:
    from hotloop.closedloop.pool import run_episodes
    from hotloop.closedloop.workers import EpisodeJob

    job = EpisodeJob(
        target=str(checkpoint), task="reach", difficulty=None, strategy="chunk", latency="fixed:0"
    )
    records, interrupted = run_episodes(job, [0], workers=0)
    assert not interrupted and records[0]["error"] is None and records[0]["inferences"] >= 1


def test_folders_that_are_not_checkpoints_are_refused_by_name(checkpoint: Path, tmp_path: Path) -> None:
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(checkpoint / "config.json", half / "config.json")
    with pytest.raises(ConfigError, match="no model.safetensors"):
        find_target(str(half))
    res = runner.invoke(app, ["bench", str(half)])
    assert res.exit_code == 2 and "model.safetensors" in res.output
    odd = tmp_path / "odd"
    shutil.copytree(checkpoint, odd)
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "type": "vqbet"}))
    with pytest.raises(CheckpointError, match="field 'type' is 'vqbet'.*act.*diffusion"):
        find_target(str(odd))


def test_verify_on_the_public_fixtures(fixtures_dir: Path, tmp_path: Path) -> None:
    for name in ("lerobot-pi0-tiny", "lerobot-pi05-tiny"):
        js = tmp_path / f"{name}.json"
        res = runner.invoke(app, ["verify", str(fixtures_dir / name), "--json", str(js)])
        assert res.exit_code == 0, res.output
        report = json.loads(js.read_text())
        assert {c["name"] for c in report["comparisons"]} >= {"actions", "img_emb_view0", "x_t_trajectory"}
        assert all(c["max_abs"] <= 1e-5 for c in report["comparisons"])


def test_verify_fails_outside_tolerance_and_refuses_a_foreign_reference(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    folder = fixtures_dir / "lerobot-pi05-tiny"
    ref = tmp_path / "ref"
    ref.mkdir()
    for f in ("inputs.npz", "noise.npy"):
        shutil.copy(folder / f, ref / f)
    actions = np.load(folder / "actions.npy")
    np.save(ref / "actions.npy", actions + 1e-3)  # a reference hotloop cannot meet
    res = runner.invoke(app, ["verify", str(folder), "--reference", str(ref)])
    assert res.exit_code == 1 and "OUTSIDE" in res.output
    np.save(ref / "actions.npy", actions[:, :5])  # made for another chunk size
    res = runner.invoke(app, ["verify", str(folder), "--reference", str(ref)])
    assert res.exit_code == 2 and "actions" in res.output and "(2, 5, 32)" in res.output
    res = runner.invoke(app, ["verify", str(tmp_path)])
    assert res.exit_code == 2 and "not a LeRobot checkpoint folder" in res.output


def test_verify_checks_a_compiled_artifact_at_its_own_tolerance(fixtures_dir: Path, tmp_path: Path) -> None:
    folder = fixtures_dir / "lerobot-pi05-tiny"
    art = tmp_path / "art"
    res = runner.invoke(
        app,
        ["compile", str(folder), "-o", str(art), "--budget-ms", "1e5", "--backends", "eager,onnxruntime",
         "--precisions", "fp32", "--variants", "plain", "--iters", "1", "--warmup", "0", "--threads", "1"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    js = tmp_path / "v.json"
    res = runner.invoke(app, ["verify", str(folder), "--artifact", str(art), "--json", str(js)])
    assert res.exit_code == 0, res.output
    artifact = json.loads(js.read_text())["artifact"]
    assert artifact["violation"] is None and artifact["samples"] == 2 and artifact["worst"]["cosine"] > 0.999
