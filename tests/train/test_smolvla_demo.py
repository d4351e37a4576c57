"""The SmolVLA demo trainer (`hotloop train-demo --family smolvla`): LeRobot's flow-matching time draw and
targets, the frames and prompts it trains on, which weights learn, a few deterministic steps that lower the
loss, and the result a LeRobot SmolVLA checkpoint folder hotloop runs as a target."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.train.smolvla_demo import (
    TrainSmolVLADemoConfig,
    flow_matching_loss,
    frame_prompts,
    new_model,
    sample_time,
    train_smolvla_demo,
)

runner = CliRunner()
# A small version of the demo so that a few steps take a second (the demo's own sizes are the defaults).
SMALL = dict(
    vision_width=16, vision_mlp=32, vision_layers=1, vision_heads=1, text_width=32, text_mlp=64, text_layers=2,
    heads=2, kv_heads=1, head_dim=16, batch=4, warmup=1,
)  # fmt: skip


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hotloop.datasets.recorder import record

    out = tmp_path_factory.mktemp("smolvla-data") / "data"
    record("conveyor-pick", 2, out, seed=10_000, views=("top", "wrist"))
    return out


@pytest.fixture(scope="module")
def trained(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("smolvla-run") / "ckpt"
    cfg = TrainSmolVLADemoConfig(**SMALL, steps=40, lr=3e-3)  # type: ignore[arg-type]
    train_smolvla_demo(cfg, out, dataset_dir=data, progress=False)
    return out


def test_time_is_lerobots_beta_draw() -> None:
    """sample_time: Beta(1.5, 1) * 0.999 + 0.001, whose CDF on [0, 1] is x^1.5."""
    t = sample_time(20_000, torch.Generator().manual_seed(0))
    assert float(t.min()) >= 0.001 and float(t.max()) <= 1.0
    x = ((t - 0.001) / 0.999).sort().values.numpy()
    empirical = np.arange(1, len(x) + 1) / len(x)
    assert np.abs(empirical - x**1.5).max() < 0.015  # Kolmogorov-Smirnov distance
    uniform = torch.rand(20_000, generator=torch.Generator().manual_seed(0))
    assert abs(float(uniform.mean()) - 0.5) < 0.01 and abs(float(t.mean()) - (0.6 * 0.999 + 0.001)) < 0.01


def test_frames_chunks_and_prompts_line_up(data: Path) -> None:
    """Every frame of the successful episodes, its chunk t .. t + 9 clamped to the episode's last action (is_pad
    past it), and its episode's prompt."""
    from hotloop.datasets.lerobot_v3 import Dataset
    from hotloop.train.lerobot_frames import training_frames

    ds = Dataset(data)
    frames, _, used = training_frames(ds, ("top", "wrist"), 10)
    prompts = frame_prompts(ds)
    assert len(prompts) == len(frames.state) and used == 2
    ep = ds.episode(1)
    start = len(ds.episode(0, images=False).action)
    t_last = len(ep.action) - 1
    for t in (0, t_last - 3, t_last):
        row = start + t
        np.testing.assert_array_equal(frames.state[row], ep.state[t])
        np.testing.assert_array_equal(frames.images[row, 1], ep.images["wrist"][t])
        want = ep.action[np.minimum(np.arange(t, t + 10), t_last)]
        np.testing.assert_array_equal(frames.actions[row], want)
        np.testing.assert_array_equal(frames.is_pad[row], np.arange(t, t + 10) > t_last)
        assert prompts[row] == ep.task == "pick up the box from the moving belt"


def _batch(model: torch.nn.Module, b: int = 3) -> dict[str, torch.Tensor]:
    cfg = model.cfg  # type: ignore[attr-defined]
    g = torch.Generator().manual_seed(1)
    lang = torch.randint(5, cfg.vlm.vocab_size, (b, 6), generator=g)
    mask = torch.ones(b, 6, dtype=torch.bool)
    mask[0, 4:] = False
    return {
        "images": torch.rand(b, cfg.views, 3, *cfg.image_size, generator=g) * 2 - 1,
        "image_masks": torch.ones(b, cfg.views, dtype=torch.bool),
        "lang": lang,
        "lang_mask": mask,
        "state": torch.randn(b, cfg.max_state_dim, generator=g),
        "actions": torch.randn(b, cfg.chunk_size, cfg.max_action_dim, generator=g),
    }


def test_the_loss_regresses_noise_minus_actions_at_the_sampled_time(trained: Path) -> None:
    """With the same draws, the loss is the MSE between u_t = noise - actions and the velocity the sampler
    integrates at x_t = t noise + (1 - t) actions; padded steps drop out when masked."""
    model = new_model(trained, seed=0)
    batch = _batch(model)
    loss = flow_matching_loss(model, *batch.values(), torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    noise = torch.randn(batch["actions"].shape, generator=g)
    t = sample_time(3, g)
    x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * batch["actions"]
    with torch.no_grad():
        k, v, pad = model.prefix(
            model.vision(batch["images"]),
            batch["image_masks"],
            batch["lang"],
            batch["lang_mask"],
            batch["state"],
        )
        velocity = model.denoise_step(k, v, pad, x_t, t)
    per = (noise - batch["actions"] - velocity) ** 2
    torch.testing.assert_close(loss.detach(), per.mean(), rtol=1e-5, atol=1e-6)
    is_pad = torch.zeros(3, model.cfg.chunk_size, dtype=torch.bool)
    is_pad[1, 4:] = True
    masked = flow_matching_loss(model, *batch.values(), torch.Generator().manual_seed(5), is_pad)
    torch.testing.assert_close(masked.detach(), (per * (~is_pad)[:, :, None]).mean(), rtol=1e-5, atol=1e-6)


def test_every_weight_learns_but_what_the_last_vlm_layer_does_not_serve(trained: Path) -> None:
    """Nothing is frozen (trained from scratch). As in LeRobot, the last VLM layer serves only its keys and
    values to the expert: its queries, output, MLP and the text model's final norm get no gradient."""
    model = new_model(trained, seed=0)
    flow_matching_loss(model, *_batch(model).values(), torch.Generator().manual_seed(0)).backward()
    last = f"vlm_with_expert.vlm.model.text_model.layers.{model.cfg.vlm.text.depth - 1}."
    idle = {n for n, p in model.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)}
    unused = {f"{last}{s}" for s in ("self_attn.q_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
              "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")}  # fmt: skip
    unused.add("vlm_with_expert.vlm.model.text_model.norm.weight")
    assert idle == unused


def test_training_writes_a_checkpoint_the_family_runs(trained: Path, data: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from hotloop.models.smolvla import load_smolvla, load_tokenizer
    from hotloop.targets import TargetOptions, find_target

    summary = json.loads((trained / "train.json").read_text())
    losses = json.loads((trained / "loss.json").read_text())["loss"]
    assert len(losses) == 40 and np.mean(losses[-10:]) < 0.8 * np.mean(losses[:5])  # it learns
    assert summary["prompts"] == ["pick up the box from the moving belt"]
    cfg, model = load_smolvla(trained)
    assert cfg.camera_keys == ("observation.images.top", "observation.images.wrist")
    assert (cfg.state_dim, cfg.action_dim, cfg.chunk_size, cfg.n_action_steps) == (10, 4, 10, 5)
    assert cfg.image_tokens_per_view == 4 and cfg.tokenizer.folder == "tokenizer"
    ids, mask = load_tokenizer(trained)(["pick up the box from the moving belt"])
    assert mask.all() and ids.shape == (1, 8) and int(ids.min()) >= 5  # every word is in the vocabulary
    policy = find_target(str(trained)).build_policy(str(trained), TargetOptions())
    obs = {
        "images": {v: np.full((64, 64, 3), 90, np.uint8) for v in ("top", "wrist")},
        "state": np.zeros(10, np.float32),
        "prompt": "pick up the box from the moving belt",
    }
    actions = policy.infer(obs)["actions"]
    assert actions.shape == (5, 4) and np.isfinite(actions).all()
    # The same seed trains the same weights.
    again = tmp_path / "again"
    train_smolvla_demo(TrainSmolVLADemoConfig(**SMALL, steps=40, lr=3e-3), again, data, progress=False)  # type: ignore[arg-type]
    a, b = (load_file(str(p / "model.safetensors")) for p in (trained, again))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert set(a) == {f"model.{k}" for k in model.state_dict()} | {"model.vlm_with_expert.vlm.lm_head.weight"}


def test_train_demo_family_smolvla_cli(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "ckpt"
    res = runner.invoke(
        app, ["train-demo", "--family", "smolvla", "--dataset", str(data), "--steps", "1", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    config = json.loads((out / "config.json").read_text())
    assert config["type"] == "smolvla" and config["num_steps"] == 10 and not config["freeze_vision_encoder"]
    assert (out / "tokenizer" / "tokenizer.json").is_file() and (out / "vlm_config.json").is_file()
    res = runner.invoke(
        app, ["train-demo", "--family", "smolvla", "--variant", "vision", "-o", str(tmp_path / "x")]
    )
    assert res.exit_code == 2 and "--variant" in res.output and not (tmp_path / "x").exists()


def test_config_refusals_name_the_value() -> None:
    from hotloop.errors import ConfigError

    with pytest.raises(ConfigError, match="n_action_steps 12 exceeds chunk_size 10"):
        TrainSmolVLADemoConfig(n_action_steps=12)
    with pytest.raises(ConfigError, match="patch 24"):
        TrainSmolVLADemoConfig(patch=24)
    with pytest.raises(ConfigError, match="--steps must be >= 1"):
        dataclasses.replace(TrainSmolVLADemoConfig(), steps=0)
