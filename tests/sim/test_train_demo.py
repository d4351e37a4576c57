"""train-demo end to end at a toy budget: it writes a loadable checkpoint, and it repeats exactly."""

import pytest

from hotloop.sim.demo_policy import load_demo_policy
from hotloop.sim.tasks import make_task
from hotloop.sim.train_demo import TrainDemoConfig, train_demo


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
