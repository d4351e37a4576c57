"""The ACT demo trainer: LeRobot's training objective against a transcription with torch's own attention,
LeRobot's dataset statistics against plain numpy, a few deterministic steps that learn, and the result a
LeRobot checkpoint folder hotloop runs as a target (`hotloop train-demo --family act`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.train.act_demo import TrainActDemoConfig, model_config, new_model, train_act_demo
from hotloop.train.act_loss import act_forward, act_loss, vae_latent
from hotloop.train.lerobot_frames import aggregate, episode_stats, sample_indices

runner = CliRunner()
# A small version of the demo so that a few steps take seconds (the demo's own sizes are the defaults).
SMALL = dict(
    stage_widths=(8, 8, 16, 16), stem_width=8, dim_model=32, dim_feedforward=64, n_encoder_layers=1,
    n_vae_encoder_layers=1, latent_dim=8, batch=8, warmup=1,
)  # fmt: skip


@pytest.fixture(autouse=True)
def _one_thread_and_restored_determinism() -> Iterator[None]:
    before = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before[0])
    torch.use_deterministic_algorithms(before[1])


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hotloop.datasets.recorder import record

    out = tmp_path_factory.mktemp("act-data") / "data"
    record("conveyor-pick", 2, out, seed=10_000, views=("top", "wrist"))
    return out


@pytest.fixture(scope="module")
def model_and_batch(data: Path) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    from hotloop.datasets.lerobot_v3 import Dataset

    cfg = TrainActDemoConfig(**SMALL)  # type: ignore[arg-type]
    act_cfg = model_config(cfg, Dataset(data))
    model = new_model(act_cfg, seed=0)
    g = torch.Generator().manual_seed(1)
    b = 3
    batch = {
        "images": [torch.randn(b, *s, generator=g) for s in act_cfg.camera_shapes],
        "state": torch.randn(b, act_cfg.state_dim, generator=g),
        "actions": torch.randn(b, act_cfg.chunk_size, act_cfg.action_dim, generator=g),
        "is_pad": torch.zeros(b, act_cfg.chunk_size, dtype=torch.bool),
    }
    batch["is_pad"][1, 6:] = True
    return model, batch


def _lerobot_encoder_layer(
    layer: nn.Module, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """ACTEncoderLayer.forward (post-norm, eval) with torch's nn.MultiheadAttention holding the weights."""
    mha = nn.MultiheadAttention(x.shape[-1], layer.self_attn.heads)
    mha.load_state_dict(layer.self_attn.state_dict())
    mha.eval()
    q = x + pos
    x = layer.norm1(x + mha(q, q, value=x, key_padding_mask=mask)[0])
    return layer.norm2(x + layer.linear2(layer.activation(layer.linear1(x))))  # type: ignore[no-any-return]


def test_without_dropout_the_training_forward_is_the_inference_path(model_and_batch: tuple) -> None:
    model, batch = model_and_batch
    model.eval()
    latent = torch.zeros(3, model.cfg.latent_dim)
    with torch.no_grad():
        got = act_forward(model, batch["images"], batch["state"], None, latent, p=0.0, training=False)
        want = model(batch["images"], batch["state"])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_vae_encoder_is_lerobots_and_masks_the_padded_actions(model_and_batch: tuple) -> None:
    model, batch = model_and_batch
    model.eval()
    with torch.no_grad():
        mu, log_sigma_x2 = vae_latent(
            model, batch["state"], batch["actions"], batch["is_pad"], 0.0, training=False
        )
        b, d = 3, model.cfg.dim_model
        x = torch.cat(
            [
                model.vae_encoder_cls_embed.weight.expand(b, 1, d),
                model.vae_encoder_robot_state_input_proj(batch["state"]).unsqueeze(1),
                model.vae_encoder_action_input_proj(batch["actions"]),
            ],
            1,
        ).permute(1, 0, 2)
        mask = torch.cat([torch.zeros(b, 2, dtype=torch.bool), batch["is_pad"]], 1)
        for layer in model.vae_encoder.layers:
            x = _lerobot_encoder_layer(layer, x, model.vae_encoder_pos_enc.permute(1, 0, 2), mask)
        params = model.vae_encoder_latent_output_proj(x[0])
        torch.testing.assert_close(mu, params[:, : model.cfg.latent_dim], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(log_sigma_x2, params[:, model.cfg.latent_dim :], rtol=1e-5, atol=1e-5)
        changed = batch["actions"].clone()
        changed[1, 7] += 5.0  # a padded action: no effect
        again, _ = vae_latent(model, batch["state"], changed, batch["is_pad"], 0.0, training=False)
        torch.testing.assert_close(again, mu, rtol=0, atol=1e-6)
        changed[1, 2] += 5.0  # a real one: the latent moves
        assert not torch.allclose(
            vae_latent(model, batch["state"], changed, batch["is_pad"], 0.0, False)[0], mu
        )


def test_the_loss_is_l1_on_valid_actions_plus_weighted_kl(model_and_batch: tuple) -> None:
    model, batch = model_and_batch
    model.train()
    torch.manual_seed(0)
    terms = act_loss(
        model, batch["images"], batch["state"], None, batch["actions"], batch["is_pad"], 10.0, 0.1
    )
    assert set(terms) == {"loss", "l1", "kld"} and float(terms["kld"].detach()) >= 0
    torch.testing.assert_close(terms["loss"], terms["l1"] + 10.0 * terms["kld"])
    terms["loss"].backward()
    trunk_grad = model.trunk.conv1.weight.grad
    assert trunk_grad is not None and float(trunk_grad.abs().sum()) > 0
    assert model.vae_encoder_action_input_proj.weight.grad is not None
    model.zero_grad(set_to_none=True)


def test_statistics_are_lerobots(data: Path) -> None:
    from hotloop.datasets.lerobot_v3 import Dataset

    assert len(sample_indices(1000)) == 177 and sample_indices(50) == list(range(50))
    dataset = Dataset(data)
    episodes = [dataset.episode(i) for i in range(len(dataset))]
    stats = aggregate([episode_stats(ep, ("top", "wrist")) for ep in episodes])
    state = np.concatenate([ep.state for ep in episodes])
    np.testing.assert_allclose(stats["observation.state"]["mean"], state.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["std"], state.std(0), rtol=1e-4, atol=1e-6)
    assert stats["observation.images.top"]["mean"].shape == (3, 1, 1)
    # Episodes this short are sampled whole: the image stats are those of every frame, in [0, 1].
    pixels = np.concatenate([ep.images["wrist"].reshape(-1, 3) for ep in episodes]).astype(np.float64) / 255
    np.testing.assert_allclose(stats["observation.images.wrist"]["mean"].ravel(), pixels.mean(0), rtol=1e-4)
    np.testing.assert_allclose(stats["observation.images.wrist"]["std"].ravel(), pixels.std(0), rtol=1e-3)


def test_a_few_steps_learn_and_repeat_bit_for_bit(data: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    cfg = TrainActDemoConfig(**SMALL, steps=40, lr=1e-3)  # type: ignore[arg-type]
    summary = train_act_demo(cfg, tmp_path / "a", dataset_dir=data, progress=False)
    losses = json.loads((tmp_path / "a" / "loss.json").read_text())["l1"]
    assert np.mean(losses[-8:]) < 0.9 * np.mean(losses[:8])
    assert summary["training"]["episodes_used"] == 2
    train_act_demo(dataclasses.replace(cfg, steps=3), tmp_path / "b", dataset_dir=data, progress=False)
    train_act_demo(dataclasses.replace(cfg, steps=3), tmp_path / "c", dataset_dir=data, progress=False)
    b, c = (load_file(str(tmp_path / x / "model.safetensors")) for x in ("b", "c"))
    assert b.keys() == c.keys() and all(torch.equal(b[k], c[k]) for k in b)


def test_train_demo_family_act_writes_a_checkpoint_folder_target(data: Path, tmp_path: Path) -> None:
    from hotloop.families.act.policy import load_policy
    from hotloop.lerobot.processors import read_policy_processors

    out = tmp_path / "ckpt"
    res = runner.invoke(
        app, ["train-demo", "--family", "act", "--dataset", str(data), "--steps", "2", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    config = json.loads((out / "config.json").read_text())
    assert config["type"] == "act" and list(config["input_features"]) == [
        "observation.state", "observation.images.top", "observation.images.wrist",
    ]  # fmt: skip
    assert config["chunk_size"] == 10 and config["n_action_steps"] == 5 and config["dim_model"] == 64
    pre, _ = read_policy_processors(out)
    policy = load_policy(out)
    obs = {"images": {v: np.zeros((64, 64, 3), np.uint8) for v in ("top", "wrist")}, "state": np.zeros(10)}
    assert policy.infer(obs)["actions"].shape == (10, 4) and pre.steps[-1].stats["action"]["mean"].shape == (
        4,
    )
    res = runner.invoke(app, ["bench", str(out), "--iters", "2", "--warmup", "0"])
    assert res.exit_code == 0 and "backbone" in res.output


def test_train_demo_refuses_pi_options_for_act(tmp_path: Path) -> None:
    for extra, named in ((["--variant", "vision"], "--variant"),
                         (["--action-prefix-prob", "0.5"], "--action-prefix-prob")):  # fmt: skip
        res = runner.invoke(app, ["train-demo", "--family", "act", "-o", str(tmp_path / "x"), *extra])
        assert res.exit_code == 2 and named in res.output and "--family pi" in res.output
    res = runner.invoke(app, ["train-demo", "--family", "pi0fast", "-o", str(tmp_path / "y")])
    assert res.exit_code == 2 and "--family 'pi0fast' is not known" in res.output
    assert not (tmp_path / "y").exists()
