"""demo:conveyor-vision: the policy never receives the box's pose, reads the camera, and trains repeatably."""

import numpy as np
import pytest
import torch

from hotloop.demos.conveyor_vision import ASSET_DIR, load_vision_policy, make_demo_task, proprio_state
from hotloop.families.pi.training import repeat_cache
from hotloop.targets import TargetOptions, default_targets
from hotloop.train.conveyor_vision import TrainVisionDemoConfig, train_vision_demo


@pytest.fixture(scope="module")
def policy():
    return default_targets().get("demo:conveyor-vision").build_policy("demo:conveyor-vision", TargetOptions())


@pytest.fixture(scope="module")
def env(policy):
    e = make_demo_task(policy.meta)  # rendering the views the shipped weights read
    yield e
    e.close()


def test_observation_holds_only_the_robots_own_state(policy, env):
    obs, _ = env.reset(seed=3)
    box = np.concatenate([env.box_pos(), env.box_vel()])
    inputs = policy.model_inputs(obs)
    state = inputs["state"]
    np.testing.assert_array_equal(
        state, np.concatenate([env.ee_pos(), [env.grip_opening()]]).astype(np.float32)
    )
    assert set(inputs) == {"images", "state", "prompt_tokens"}
    assert inputs["images"].shape == (len(policy.views), 64, 64, 3)
    assert not np.isin(np.round(box, 5), np.round(state, 5)).any()
    # What the network gets: 3 prompt ids + 4 state bins in the prompt, one image, nothing else.
    model_obs = policy.pi.observation(inputs)
    assert int(model_obs.lang_masks.sum()) == 3 + 4
    assert model_obs.state is not None and not model_obs.state[0, 4:].any()  # 4 numbers, zero-padded


def test_box_pose_in_the_state_is_ignored_and_the_image_is_not(policy, env):
    obs, _ = env.reset(seed=3)
    policy.reset()
    actions = policy.infer(obs)["actions"]
    lied = dict(obs, state=obs["state"].copy())
    lied["state"][4:10] = [0.3, 0.1, 0.5, -1.0, 2.0, 3.0]  # a box pose and velocity nowhere near the truth
    policy.reset()
    np.testing.assert_array_equal(policy.infer(lied)["actions"], actions)
    # The same robot state with the box elsewhere in a picture: the plan changes, for every view it reads.
    elsewhere = env.reset(seed=4)[0]["images"]
    for view in policy.views:
        other = dict(obs, images=dict(obs["images"], **{view: elsewhere[view]}))
        policy.reset()
        assert np.abs(policy.infer(other)["actions"] - actions).max() > 1e-3, view


def test_spec_names_the_views_the_weights_read(policy):
    spec = policy.spec
    assert [i.key for i in spec.images] == list(policy.views)
    assert spec.min_views == len(policy.views)
    assert policy.pi.config.views == len(policy.views)
    # Weights trained before the wrist camera (no `views` in demo.json) read the top view only.
    import dataclasses

    old = dataclasses.replace(policy, meta={k: v for k, v in policy.meta.items() if k != "views"})
    assert old.views == ("top",) and [i.key for i in old.spec.images] == ["top"]


def test_shipped_weights_are_small_float16_and_load_as_float32(policy):
    from safetensors import safe_open

    path = ASSET_DIR / "model.safetensors"
    assert path.stat().st_size < 30_000_000
    with safe_open(str(path), "pt") as f:
        assert f.get_slice("model.action_out_proj.weight").get_dtype() == "F16"
    params = list(policy.pi.model.parameters())
    assert all(p.dtype == torch.float32 for p in params)
    assert 10_000_000 <= sum(p.numel() for p in params) <= 30_000_000


def test_proprio_state_takes_the_first_four_numbers():
    state = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(proprio_state(state), [0, 1, 2, 3])
    assert proprio_state(np.zeros((5, 10))).shape == (5, 4)


def test_repeat_cache_matches_a_repeated_batch():
    from hotloop.models.configs import get_pi_config
    from hotloop.models.pi0 import PiModel, init_weights

    cfg = get_pi_config("pi05:tiny")
    model = init_weights(PiModel(cfg), torch.Generator().manual_seed(0)).eval()
    gen = torch.Generator().manual_seed(1)
    images = torch.rand(2, 1, 3, 56, 56, generator=gen) * 2 - 1
    tokens = torch.randint(0, 500, (2, cfg.max_token_len), generator=gen)
    masks = torch.ones(2, cfg.max_token_len, dtype=torch.bool)
    views = torch.ones(2, 1, dtype=torch.bool)
    with torch.no_grad():
        cache = model.prefix(model.vision(images), views, tokens, masks)
        rep = model.prefix(
            model.vision(images.repeat_interleave(3, 0)),
            views.repeat_interleave(3, 0),
            tokens.repeat_interleave(3, 0),
            masks.repeat_interleave(3, 0),
        )
        x = torch.randn(6, cfg.chunk_size, cfg.max_action_dim, generator=gen)
        t = torch.rand(6, generator=gen)
        torch.testing.assert_close(
            model.denoise_step(repeat_cache(cache, 3), x, t), model.denoise_step(rep, x, t)
        )


def test_config_rejects_bad_values_by_flag():
    from hotloop.errors import ConfigError

    with pytest.raises(ConfigError, match="--noise-draws"):
        TrainVisionDemoConfig(noise_draws=0)
    with pytest.raises(ConfigError, match="--recovery-starts"):
        TrainVisionDemoConfig(recovery_starts=-0.1)
    with pytest.raises(ConfigError, match="--views"):  # which names exist is the dataset's to say
        TrainVisionDemoConfig(views=("top", "top"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--variant", "vision", "--views", "top,side"], "--views"),
        (["--variant", "vision", "--views", ""], "--views"),
        (["--variant", "state", "--views", "top,wrist"], "--views"),
    ],
)
def test_bad_views_flag_exits_2_with_one_line_and_writes_nothing(tmp_path, args, needle):
    import typer
    from typer.testing import CliRunner

    from hotloop.closedloop.commands import add_commands as add_eval
    from hotloop.datasets.commands import add_commands as add_record
    from hotloop.train.commands import add_commands as add_train

    app = typer.Typer()
    for add in (add_record, add_eval, add_train):
        add(app)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["train-demo", "-o", str(out), *args])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]
    assert not out.exists()


def test_unknown_variant_exits_2():
    import typer
    from typer.testing import CliRunner

    from hotloop.closedloop.commands import add_commands as add_eval
    from hotloop.datasets.commands import add_commands as add_record
    from hotloop.train.commands import add_commands as add_train

    app = typer.Typer()
    for add in (add_record, add_eval, add_train):
        add(app)
    r = CliRunner().invoke(app, ["train-demo", "--variant", "lidar"])
    assert r.exit_code == 2 and "--variant" in r.output and "vision" in r.output


def test_training_is_seeded_and_repeatable(tmp_path):
    cfg = TrainVisionDemoConfig(episodes=2, steps=2, batch=4, warmup=1)
    a = train_vision_demo(cfg, tmp_path / "a", progress=False)
    train_vision_demo(cfg, tmp_path / "b", dataset_dir=tmp_path / "a" / "dataset", progress=False)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (
        tmp_path / "b" / "model.safetensors"
    ).read_bytes()
    assert a["training"]["frames"] > 0 and a["parameters"] > 10_000_000
    assert np.isfinite(a["training"]["final_box_probe_mse"])
    policy = load_vision_policy(tmp_path / "a")
    assert policy.views == ("top", "wrist") and policy.pi.config.views == 2
    obs, _ = make_demo_task(policy.meta).reset(seed=0)
    assert policy.infer(obs)["actions"].shape == (16, 4)


def test_compile_source_uses_the_vision_adapter():
    from hotloop.compile.sources import compilable_entry
    from hotloop.demos.source import demo_source

    compilable_entry("demo:conveyor-vision")
    source = demo_source("demo:conveyor-vision", TargetOptions())
    assert source.policy["kind"] == "demo:conveyor-vision"
    assert sum(p.numel() for p in source.model.parameters()) > 10_000_000
    assert int(source.obs.lang_masks.sum()) == 3 + 4  # prompt + proprioceptive state bins only
