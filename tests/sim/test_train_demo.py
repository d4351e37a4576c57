"""train-demo end to end at a toy budget: it writes a loadable checkpoint, and it repeats exactly."""

import pytest

from hotloop.demos.conveyor import load_demo_policy
from hotloop.sim.tasks import make_task
from hotloop.train.conveyor import TrainDemoConfig, train_demo


@pytest.mark.slow
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


@pytest.mark.slow
def test_prefix_conditioned_training_is_repeatable_and_its_policy_runs_rtc_prefix(tmp_path):
    import numpy as np

    from hotloop.realtime.rtc import DELAY_KEY, MODE_KEY, PREV_ACTIONS_KEY

    cfg = TrainDemoConfig(episodes=2, steps=3, batch=4, warmup=1, action_prefix_prob=0.5, max_action_prefix=4)
    train_demo(cfg, tmp_path / "a", progress=False)
    train_demo(cfg, tmp_path / "b", dataset_dir=tmp_path / "a" / "dataset", progress=False)
    weights = (tmp_path / "a" / "model.safetensors").read_bytes()
    assert weights == (tmp_path / "b" / "model.safetensors").read_bytes()
    plain = TrainDemoConfig(episodes=2, steps=3, batch=4, warmup=1)
    train_demo(plain, tmp_path / "c", dataset_dir=tmp_path / "a" / "dataset", progress=False)
    assert weights != (tmp_path / "c" / "model.safetensors").read_bytes()  # the augmentation acts
    policy = load_demo_policy(tmp_path / "a")
    obs, _ = make_task("conveyor-pick").reset(seed=0)
    prev = policy.infer(obs)["actions"][:8]
    out = policy.infer({**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 2, MODE_KEY: "prefix"})
    assert out[MODE_KEY] == "prefix"
    np.testing.assert_allclose(out["actions"][:2], prev[:2], atol=1e-5)
