"""train-demo end to end at a toy budget: it writes a loadable checkpoint, and it repeats exactly."""

import pytest

from hotloop.demos.conveyor import load_demo_policy
from hotloop.sim.tasks import make_task
from hotloop.train.conveyor import TrainDemoConfig, train_demo


def test_training_is_seeded_and_repeatable(tmp_path):
    cfg = TrainDemoConfig(episodes=2, steps=3, batch=4, warmup=1)
    a = train_demo(cfg, tmp_path / "a", progress=False)
    train_demo(cfg, tmp_path / "b", dataset_dir=tmp_path / "a" / "dataset", progress=False)
    weights_a = (tmp_path / "a" / "model.safetensors").read_bytes()
    assert weights_a == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert (tmp_path / "a" / "loss.png").stat().st_size > 0
    assert a["training"]["frames"] > 0 and a["horizon"] == 16
    policy = load_demo_policy(tmp_path / "a")
    obs, _ = make_task("conveyor-pick").reset(seed=0)
    assert policy.infer(obs)["actions"].shape == (16, 4)


def test_ordinal_bin_embeddings_start_neighbouring_bins_close():
    import torch

    from hotloop.families.pi.training import ordinal_bin_embeddings
    from hotloop.models.configs import get_pi_config
    from hotloop.models.pi0 import PiModel, init_weights

    cfg = get_pi_config("pi05:nano")
    model = PiModel(cfg)
    gen = torch.Generator().manual_seed(0)
    init_weights(model, gen)
    words = model.embed_tokens.weight[:256].detach().clone()
    ordinal_bin_embeddings(model, 256, gen)
    weight = model.embed_tokens.weight.detach()
    assert torch.equal(weight[:256], words)  # prompt-word rows untouched
    rows = torch.nn.functional.normalize(weight[256:], dim=1)
    near = (rows[:-1] * rows[1:]).sum(1)  # cosine of bins b and b+1
    far = (rows[:128] * rows[128:]).sum(1)  # bins half the range apart
    assert near.min() > 0.9 and far.mean() < 0.5
    # Same scale as the other rows, so no token dominates the prompt at the start.
    assert weight[256:].norm(dim=1).mean() == pytest.approx(words.norm(dim=1).mean().item(), rel=1e-4)


def test_config_rejects_a_bad_fraction():
    from hotloop.errors import ConfigError

    with pytest.raises(ConfigError, match="recovery_starts"):
        TrainDemoConfig(recovery_starts=1.5)


def test_prefix_conditioned_training_is_repeatable_and_its_policy_runs_rtc_prefix(tmp_path):
    import numpy as np

    from hotloop.realtime.rtc import DELAY_KEY, MODE_KEY, PREV_ACTIONS_KEY

    cfg = TrainDemoConfig(episodes=2, steps=3, batch=4, warmup=1, action_prefix_prob=0.5, max_action_prefix=4)
    _assert_repeatable_and_unlike_plain_training(cfg, tmp_path)  # the augmentation acts
    policy = load_demo_policy(tmp_path / "a")
    obs, _ = make_task("conveyor-pick").reset(seed=0)
    prev = policy.infer(obs)["actions"][:8]
    out = policy.infer({**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 2, MODE_KEY: "prefix"})
    assert out[MODE_KEY] == "prefix"
    np.testing.assert_allclose(out["actions"][:2], prev[:2], atol=1e-5)


def test_state_noise_perturbs_only_the_box_xy_position_and_velocity():
    import numpy as np

    from hotloop.train.conveyor import StateNoise

    state = np.arange(50, dtype=np.float32).reshape(5, 10)
    assert StateNoise().draws(state)[0] is state  # no noise: the one exact copy
    noise = StateNoise(position_std=0.003, velocity_std=0.02, copies=3, seed=7)
    draws = noise.draws(state)
    assert len(draws) == 3
    for drawn in draws:
        changed = np.flatnonzero(np.any(drawn != state, axis=0))
        assert changed.tolist() == [4, 5, 7, 8]  # box x, y and its x, y velocity; ee, grip, heights exact
        assert np.abs(drawn[:, 4:6] - state[:, 4:6]).max() < 6 * 0.003
    assert not np.array_equal(draws[0], draws[1])  # each copy its own draw
    again = noise.draws(state)
    assert all(np.array_equal(a, b) for a, b in zip(draws, again, strict=True))  # seeded


def test_state_noise_bounds_are_checked_by_flag():
    from hotloop.errors import ConfigError

    with pytest.raises(ConfigError, match="--box-noise-mm"):
        TrainDemoConfig(box_noise_mm=-1.0)
    with pytest.raises(ConfigError, match="--box-velocity-noise"):
        TrainDemoConfig(box_velocity_noise_mms=500.0)


def test_noisy_state_training_is_repeatable_and_differs_from_the_exact_state(tmp_path):
    import json

    cfg = TrainDemoConfig(
        episodes=2, steps=3, batch=4, warmup=1, box_noise_mm=3.0, box_velocity_noise_mms=20.0
    )
    _assert_repeatable_and_unlike_plain_training(cfg, tmp_path)  # the noise reaches the model
    meta = json.loads((tmp_path / "a" / "demo.json").read_text())
    assert meta["state_noise"] == {"box_xy_mm": 3.0, "box_velocity_xy_mms": 20.0}
    assert json.loads((tmp_path / "c" / "demo.json").read_text())["state_noise"] is None
    policy = load_demo_policy(tmp_path / "a")
    obs, _ = make_task("conveyor-pick").reset(seed=0)
    assert policy.infer(obs)["actions"].shape == (16, 4)


def test_train_demo_refuses_state_noise_for_other_variants(tmp_path):
    import typer
    from typer.testing import CliRunner

    from hotloop.datasets.commands import add_commands as add_record
    from hotloop.train.commands import add_commands as add_train

    app = typer.Typer()
    for add in (add_record, add_train):  # two commands: a group, called by name as the CLI does
        add(app)
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["train-demo", "--variant", "vision", "--box-noise-mm", "3", "-o", str(out)]
    )
    assert result.exit_code == 2
    assert "--box-noise-mm" in result.output and "--variant state or chain" in result.output
    assert not out.exists()
    result = CliRunner().invoke(
        app, ["train-demo", "--variant", "chain", "--box-noise-mm", "-1", "-o", str(out)]
    )
    assert result.exit_code == 2 and "--box-noise-mm must be in [0, 100]" in result.output


def _assert_repeatable_and_unlike_plain_training(cfg, tmp_path):
    """Train `cfg` twice on one recording (into a/ and b/) and once without its option (into c/):
    the twin runs must match to the byte and differ from the plain one, so the option reaches the model."""
    train_demo(cfg, tmp_path / "a", progress=False)
    train_demo(cfg, tmp_path / "b", dataset_dir=tmp_path / "a" / "dataset", progress=False)
    weights = (tmp_path / "a" / "model.safetensors").read_bytes()
    assert weights == (tmp_path / "b" / "model.safetensors").read_bytes()
    plain = TrainDemoConfig(episodes=2, steps=3, batch=4, warmup=1)
    train_demo(plain, tmp_path / "c", dataset_dir=tmp_path / "a" / "dataset", progress=False)
    assert weights != (tmp_path / "c" / "model.safetensors").read_bytes()
