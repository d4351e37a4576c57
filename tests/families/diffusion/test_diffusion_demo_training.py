"""`hotloop train-demo --family diffusion` (a few steps; the lead runs the real training): a LeRobot
checkpoint folder comes out (config.json, model.safetensors under "diffusion.", the processors with the
dataset's statistics as LeRobot computes them), seeded and repeatable, and hotloop runs it as a target."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.targets import TargetOptions, find_target
from hotloop.train.diffusion_demo import TrainDiffusionDemoConfig, train_diffusion_demo

runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("diffusion-demo") / "run"
    train_diffusion_demo(
        TrainDiffusionDemoConfig(episodes=2, steps=2, batch=2, warmup=1), out, progress=False
    )
    return out


def test_the_run_is_a_lerobot_checkpoint_hotloop_runs(trained: Path) -> None:
    from hotloop.lerobot.processors import read_policy_processors
    from hotloop.models.diffusion import load_diffusion

    config = json.loads((trained / "config.json").read_text())
    assert config["type"] == "diffusion" and config["vision_backbone"] == "resnet18"
    assert set(config["input_features"]) == {"observation.state", "observation.images.top"}
    # 0, not LeRobot's default 7: the grasp is in the last frames of conveyor-pick's short episodes
    assert config["drop_n_last_frames"] == 0 and config["use_group_norm"] and config["crop_shape"] == [56, 56]
    tensors = load_file(str(trained / "model.safetensors"))
    assert all(k.startswith("diffusion.") for k in tensors)
    # a quarter of torchvision's resnet18 widths (TrainDiffusionDemoConfig.backbone_widths), read back from
    # the tensors
    assert tensors["diffusion.rgb_encoder.0.backbone.7.1.conv2.weight"].shape == (128, 128, 3, 3)
    cfg, model = load_diffusion(trained)  # strict: every key and shape
    assert cfg.noise_scheduler_type == "DDPM" and cfg.num_inference_steps == 100
    pre, post = read_policy_processors(trained)
    policy = find_target(str(trained)).build_policy(str(trained), TargetOptions(num_steps=2))
    rng = np.random.default_rng(0)
    obs = {"images": {"top": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)}, "state": rng.normal(size=10)}
    actions = policy.infer(obs)["actions"]
    assert actions.shape == (8, 4) and np.isfinite(actions).all()
    summary = json.loads((trained / "demo.json").read_text())
    assert summary["views"] == ["top"] and summary["training"]["frames"] > 0


def test_the_statistics_are_lerobots(trained: Path) -> None:
    """Per episode float32 mean / mean of squares, aggregated by count (the parallel variance): the
    dataset-wide mean and std of every state and action column; images per channel in [0, 1]."""
    from hotloop.datasets.lerobot_v3 import Dataset

    stats = load_file(str(trained / "policy_preprocessor_step_3_normalizer_processor.safetensors"))
    post = load_file(str(trained / "policy_postprocessor_step_0_unnormalizer_processor.safetensors"))
    assert post.keys() == stats.keys() and all(torch.equal(post[k], stats[k]) for k in stats)
    dataset = Dataset(trained / "dataset")
    eps = [dataset.episode(i) for i in range(len(dataset))]
    for key, attr in (("observation.state", "state"), ("action", "action")):
        allv = np.concatenate([getattr(e, attr) for e in eps]).astype(np.float64)
        np.testing.assert_allclose(stats[f"{key}.mean"].numpy(), allv.mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(stats[f"{key}.std"].numpy(), allv.std(0), rtol=1e-3, atol=1e-5)
        np.testing.assert_array_equal(stats[f"{key}.min"].numpy(), allv.min(0).astype(np.float32))
        assert stats[f"{key}.count"].tolist() == [len(allv)]
    mean = stats["observation.images.top.mean"]
    assert mean.shape == (3, 1, 1) and float(mean.min()) > 0 and float(mean.max()) < 1
    frames = [e.images["top"] for e in eps]
    assert stats["observation.images.top.count"].tolist() == [sum(min(len(f), 100) for f in frames)]


def test_training_is_seeded_and_repeatable(trained: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    cfg = TrainDiffusionDemoConfig(episodes=2, steps=2, batch=2, warmup=1)
    train_diffusion_demo(cfg, again, dataset_dir=trained / "dataset", progress=False)
    first, second = load_file(str(trained / "model.safetensors")), load_file(str(again / "model.safetensors"))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_the_command_refuses_pi_options_for_the_diffusion_family(tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["train-demo", "--family", "diffusion", "--variant", "vision", "-o", str(tmp_path / "x")]
    )
    assert res.exit_code == 2 and "--family diffusion" in res.output
    res = runner.invoke(app, ["train-demo", "--family", "groot", "-o", str(tmp_path / "y")])
    assert res.exit_code == 2 and "--family 'groot' is not known" in res.output
    res = runner.invoke(
        app, ["train-demo", "--family", "diffusion", "--views", "top,nose", "-o", str(tmp_path / "z")]
    )
    assert res.exit_code == 2 and "--views" in res.output
    assert not any((tmp_path / n).exists() for n in "xyz")


def test_training_frames_reach_the_episode_end_unless_dropped(trained: Path) -> None:
    """drop_n_last_frames 0 (the demo's): every frame is a training frame, the grasp at the end included;
    LeRobot's 7 leaves the last 7 of each episode out."""
    from hotloop.datasets.lerobot_v3 import Dataset
    from hotloop.train.diffusion_demo import _arrays

    dataset = Dataset(trained / "dataset")
    lengths = [
        len(dataset.episode(i).action)
        for i in range(len(dataset))
        if dataset.episodes[i].get("success", True)
    ]
    kept = _arrays(dataset, TrainDiffusionDemoConfig())["index"]
    assert len(kept) == sum(lengths)
    assert {t for e, t in kept if e == 0} == set(range(lengths[0]))
    dropped = _arrays(dataset, TrainDiffusionDemoConfig(drop_n_last_frames=7))["index"]
    assert len(dropped) == sum(max(1, n - 7) for n in lengths)
