"""Diffusion Policy through the family protocol on random checkpoints in LeRobot's layout (no fixtures):
the sub-engines and pipeline against the eager reference (bitwise), the noise layout, the observation
checks, the DDPM -> DDIM switch, refusals by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from diffusion_checkpoints import config, raw_observation, write_checkpoint

from hotloop.errors import CheckpointError, ConfigError
from hotloop.families import get_family
from hotloop.families.diffusion.engines import DiffusionEngineShape, DiffusionObservation
from hotloop.targets import TargetOptions, find_target

VARIANTS = {
    "ddpm_one_camera": {},
    "ddim_sample_prediction": {"noise_scheduler_type": "DDIM", "prediction_type": "sample"},
    "two_cameras_three_obs_env": {
        "n_obs_steps": 3,
        "horizon": 16,
        "input_features": {
            "observation.images.left": {"type": "VISUAL", "shape": [3, 64, 64]},
            "observation.state": {"type": "STATE", "shape": [10]},
            "observation.images.right": {"type": "VISUAL", "shape": [3, 64, 64]},
            "observation.environment_state": {"type": "ENV", "shape": [3]},
        },
        "use_separate_rgb_encoder_per_camera": False,
        "num_inference_steps": 4,
        "clip_sample": False,
    },
    "state_and_env_only": {
        "input_features": {
            "observation.state": {"type": "STATE", "shape": [10]},
            "observation.environment_state": {"type": "ENV", "shape": [5]},
        },
        "use_film_scale_modulation": False,
        "beta_schedule": "linear",
    },
}


def _source(folder: Path, steps: int | None = None):  # type: ignore[no-untyped-def]
    return find_target(str(folder)).build_source(str(folder), TargetOptions(num_steps=steps))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_step_and_loop_pipelines_equal_the_eager_sampler_bitwise(tmp_path: Path, name: str) -> None:
    folder = write_checkpoint(tmp_path / name, config(**VARIANTS[name]))
    source = _source(folder)
    family, cfg = source.family, source.cfg
    shape = family.default_shape(cfg, 2)
    obs = family.random_observation(cfg, shape, 3)
    noise = family.make_noise(cfg, shape, 2, torch.Generator().manual_seed(4))
    want = family.sample_actions(source.model, obs, noise)
    engines = family.build_subengines(source.model, shape, torch.float32)
    for loop in (False, True):
        got = family.eager_pipeline(cfg, shape, engines, loop=loop).sample(obs, noise)
        assert torch.equal(got, want), f"{name} loop={loop}: max {float((got - want).abs().max())}"
    assert want.shape == (2, cfg.horizon, cfg.action_dim) and bool(torch.isfinite(want).all())


def test_the_step_engine_is_the_unet_and_the_scheduler_update(tiny_ckpt: Path) -> None:
    source = _source(tiny_ckpt)
    engines = source.family.build_subengines(source.model, source.shape, torch.float32)
    step = engines["denoise_step"]
    assert step.input_names == ("x_t", "step_row", "global_cond", "step_noise")
    assert engines["denoise_loop"].module.step is step.module
    table = step.constants["step_table"]
    assert table.dtype == torch.float32 and table.shape[0] == source.shape.num_steps
    assert table[:, 0].tolist() == list(range(9, -1, -1))  # DDPM over 10 training steps
    cfg, model = source.cfg, source.model
    x, row, cond, z = step.example_inputs
    t = torch.full((1,), int(row[0]), dtype=torch.long)
    sched = cfg.make_scheduler()
    sched.set_timesteps(cfg.num_inference_steps)
    want = sched.step(model.unet(x, t, cond), int(row[0]), x, z)
    assert torch.equal(step.module(x, row, cond, z), want)


def test_noise_rows_are_zero_where_the_scheduler_adds_none(tmp_path: Path, tiny_ckpt: Path) -> None:
    family = get_family("diffusion")
    ddpm = _source(tiny_ckpt).cfg
    noise = family.make_noise(ddpm, DiffusionEngineShape(2, 10), 2, None)
    assert noise.shape == (2, 11, 8, 4)
    assert bool((noise[:, -1] == 0).all()) and bool((noise[:, :-1] != 0).all())  # t = 0 draws nothing
    ddim = _source(write_checkpoint(tmp_path / "ddim", config(noise_scheduler_type="DDIM"))).cfg
    noise = family.make_noise(ddim, DiffusionEngineShape(1, 5), 1, None)
    assert bool((noise[:, 1:] == 0).all()) and bool((noise[:, 0] != 0).all())
    engines = family.build_subengines(
        _source(tmp_path / "ddim").model, DiffusionEngineShape(1, 5), torch.float32
    )
    assert engines["denoise_step"].input_names == ("x_t", "step_row", "global_cond")


def test_a_longer_noise_draw_is_read_by_its_first_rows_and_a_shorter_one_refused(tiny_ckpt: Path) -> None:
    source = _source(tiny_ckpt, steps=4)
    family, cfg, shape = source.family, source.cfg, source.shape
    assert shape.num_steps == 4
    engines = family.build_subengines(source.model, shape, torch.float32)
    pipe = family.eager_pipeline(cfg, shape, engines)
    long = family.make_noise(cfg, DiffusionEngineShape(1, 10), 1, None)
    assert torch.equal(pipe.sample(source.obs, long), pipe.sample(source.obs, long[:, :5].clone()))
    with pytest.raises(
        ConfigError, match=r"noise has shape \(1, 3, 8, 4\); this engine takes \(1, 5, 8, 4\)"
    ):
        pipe.sample(source.obs, long[:, :3])


def test_steps_change_the_strided_ddpm_schedule_and_ddim_switches_the_sampler(tiny_ckpt: Path) -> None:
    from hotloop.families.diffusion.compression import DiffusionCompression

    source = _source(tiny_ckpt)
    family = source.family
    obs = source.obs
    noise = family.make_noise(source.cfg, source.shape, 1, torch.Generator().manual_seed(0))
    full = family.sample_actions(source.model, obs, noise)
    strided = family.sample_actions(source.model, obs, noise, 5)
    model, steps, details = DiffusionCompression().recipe_step("ddim", "5", source.model, 10)
    assert steps == 5 and model.cfg.noise_scheduler_type == "DDIM" and details["from"] == "DDPM"
    assert model.unet.final_conv[1].weight.data_ptr() == source.model.unet.final_conv[1].weight.data_ptr()
    ddim = family.sample_actions(model, obs, noise, 5)
    assert not torch.equal(full, strided) and not torch.equal(strided, ddim)
    assert torch.equal(ddim, family.sample_actions(model, obs, noise.clone(), 5))  # deterministic
    # DDIM reads only x_T: other step noise, same actions
    other = noise.clone()
    other[:, 1:] = torch.randn_like(other[:, 1:])
    assert torch.equal(family.sample_actions(model, obs, other, 5), ddim)
    table = family.build_subengines(model, family.with_steps(source.shape, 5), torch.float32)
    assert table["denoise_step"].constants["step_table"][:, 0].tolist() == [8, 6, 4, 2, 0]


def test_refusals_name_the_field_and_value(tmp_path: Path, tiny_ckpt: Path) -> None:
    from hotloop.families.diffusion.compression import DiffusionCompression

    with pytest.raises(
        ConfigError, match=r"--steps 11: .*num_inference_steps.* 1\.\.num_train_timesteps \(10\)"
    ):
        _source(tiny_ckpt, steps=11)
    sigmoid = write_checkpoint(tmp_path / "sig", config(beta_schedule="sigmoid"))
    with pytest.raises(ConfigError, match=r"ddim:4: .*'beta_schedule' is 'sigmoid'"):
        DiffusionCompression().recipe_step("ddim", "4", _source(sigmoid).model, 10)
    with pytest.raises(ConfigError, match="positive step count"):
        DiffusionCompression().check_recipe_step("ddim", "x")
    family = get_family("diffusion")
    cfg = _source(tiny_ckpt).cfg
    shape = DiffusionEngineShape(1, 10)
    good = family.example_observation(cfg, shape)
    with pytest.raises(
        ConfigError, match=r"input 'state' has shape \(1, 1, 10\); this engine takes \(1, 2, 10\)"
    ):
        family.validate_observation(cfg, shape, {"state": good.state[:, :1], "images": good.images})
    with pytest.raises(ConfigError, match="input 'images' is missing"):
        family.validate_observation(cfg, shape, {"state": good.state})
    with pytest.raises(ConfigError, match="input 'env_state' is given"):
        family.validate_observation(cfg, shape, DiffusionObservation(good.state, good.images, good.state))
    nan = good.state.clone()
    nan[0, 0, 0] = float("nan")
    with pytest.raises(ConfigError, match="input 'state' contains NaN"):
        family.validate_observation(cfg, shape, {"state": nan, "images": good.images})
    with pytest.raises(CheckpointError, match="field 'type' is 'act'"):
        from hotloop.models.diffusion import load_diffusion

        write_checkpoint(tmp_path / "act", config(type="act"))
        load_diffusion(tmp_path / "act")


def test_the_policy_keeps_lerobots_history(tiny_ckpt: Path) -> None:
    """populate_queues: the first observation fills the queue, each later one pushes the oldest out; an
    `infer` without `observe` appends its own observation; with `observe`, infer reads the history."""
    policy = find_target(str(tiny_ckpt)).build_policy(str(tiny_ckpt), TargetOptions())
    a, b, c = (raw_observation(i) for i in range(3))
    frame = {k: policy.frame(o)["observation.state"] for k, o in zip("abc", (a, b, c), strict=True)}
    first = policy.infer(a)["actions"]
    assert [torch.equal(f, frame["a"]) for f in policy.history["observation.state"]] == [True, True]
    policy.infer(b)
    assert [torch.equal(f, frame[k]) for f, k in zip(policy.history["observation.state"], "ab", strict=True)]
    policy.reset()
    assert policy.infer(a)["actions"].tolist() == first.tolist()  # reset: empty history, noise restarted
    policy.reset()
    policy.observe(a)
    policy.observe(b)
    policy.observe(c)
    hist = policy.history["observation.state"]
    assert torch.equal(hist[0], frame["b"]) and torch.equal(hist[1], frame["c"])
    policy.infer(c)
    assert torch.equal(policy.history["observation.state"][0], frame["b"])  # infer did not append
    session = policy.new_session()
    assert session.history["observation.state"] == []
    assert session.infer(a)["actions"].tolist() == first.tolist()
    assert torch.equal(policy.history["observation.state"][0], frame["b"])  # the session is its own


def test_the_policy_runs_lerobots_preprocessor_and_postprocessor(tiny_ckpt: Path) -> None:
    from hotloop.families.diffusion.policy import load_processors

    policy = find_target(str(tiny_ckpt)).build_policy(str(tiny_ckpt), TargetOptions(seed=5))
    pre, post = load_processors(tiny_ckpt)
    obs = raw_observation(7)
    out = policy.infer(obs)["actions"]
    # the same chunk by hand: [0, 1] images, normalised, history of copies, the reference sampler
    image = torch.from_numpy(obs["images"]["top"]).permute(2, 0, 1).float() / 255
    batch = pre({"observation.state": torch.from_numpy(obs["state"]), "observation.images.top": image})
    state = torch.stack([batch["observation.state"]] * 2, 1)
    images = torch.stack([batch["observation.images.top"][:, None]] * 2, 1)
    family = get_family("diffusion")
    cfg = policy.config
    noise = family.make_noise(cfg, DiffusionEngineShape(1, 10), 1, torch.Generator().manual_seed(5))
    sample = family.sample_actions(policy.model, DiffusionObservation(state, images), noise)
    want = post.action(sample[:, 1:5])[0].numpy()
    np.testing.assert_array_equal(out, want)
    assert out.shape == (4, 4)
    with pytest.raises(ConfigError, match=r"obs\['images'\]\['top'\] has shape \(32, 32, 3\)"):
        policy.infer({"images": {"top": np.zeros((32, 32, 3), np.uint8)}, "state": obs["state"]})
    with pytest.raises(ConfigError, match=r"has views \['wrist'\]; this checkpoint needs \['top'\]"):
        policy.infer({"images": {"wrist": obs["images"]["top"]}, "state": obs["state"]})
