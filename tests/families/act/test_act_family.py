"""ACT through the family protocol, on tiny random checkpoints in LeRobot's layout (no fixtures needed) and
on the LeRobot-made fixture: sub-engines against the model, the policy's raw-units chain against LeRobot's
arithmetic done by hand, the work model against torch's own FLOP counter, observations and refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from act_checkpoint_files import STATE_KEY, act_config, random_stats, raw_observation, write_checkpoint
from safetensors.torch import load_file
from torch.utils.flop_counter import FlopCounterMode

from hotloop.errors import CheckpointError, ConfigError
from hotloop.families import get_family
from hotloop.families.act.engines import ActEngineShape, ActObservation
from hotloop.families.act.policy import load_policy
from hotloop.models.act import load_act
from hotloop.targets import TargetOptions, find_target


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("act") / "ckpt", seed=1)


def test_the_protocol_describes_act_and_its_engines_are_the_model(ckpt: Path) -> None:
    family = get_family("act")
    assert family.lerobot_types == ("act",) and [s.name for s in family.stages] == ["backbone", "transformer"]
    source = find_target(str(ckpt)).build_source(str(ckpt), TargetOptions())
    engines = family.build_subengines(source.model, source.shape, torch.float32)
    assert engines["backbone"].input_names == ("image_0", "image_1")
    assert engines["backbone"].output_names == ("features_0", "features_1")
    assert engines["transformer"].input_names == ("features_0", "features_1", "state")
    # Cameras of two sizes are two inputs of their own shapes.
    assert [tuple(x.shape) for x in engines["backbone"].example_inputs] == [(1, 3, 64, 64), (1, 3, 48, 64)]
    want = family.sample_actions(source.model, source.obs, source.noise)
    assert want.shape == (1, 8, 4) and family.noise_shape(source.cfg, source.shape, 1) == (1, 0)
    for loop in (False, True):  # no loop stage: both are the same two engines
        got = family.eager_pipeline(source.cfg, source.shape, engines, loop=loop).sample(
            source.obs, source.noise
        )
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert len(source.plan_checks) == 2 and source.policy["checkpoint"] == str(ckpt.resolve())


def test_bf16_engines_answer_float32_close_to_fp32(ckpt: Path) -> None:
    family = get_family("act")
    cfg, model = load_act(ckpt)
    shape = ActEngineShape(2)
    obs = family.random_observation(cfg, shape, 3)
    engines = family.build_subengines(model, shape, torch.bfloat16)
    got = family.eager_pipeline(cfg, shape, engines).sample(obs, torch.zeros(2, 0))
    want = family.sample_actions(model, obs, torch.zeros(2, 0))
    assert got.dtype == torch.float32 and next(model.parameters()).dtype == torch.float32
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)
    assert 0.98 < float(cos) < 1.0


def test_the_policy_is_lerobots_chain_in_robot_units(ckpt: Path) -> None:
    """uint8 / 255, channels first, (x - mean) / (std + 1e-8), the model, a * std + mean: by hand."""
    cfg, model = load_act(ckpt)
    policy = load_policy(ckpt)
    stats = {k: {s: torch.from_numpy(v) for s, v in d.items()} for k, d in random_stats(cfg, 101).items()}
    raw = raw_observation(cfg, seed=7)
    images = []
    for cam in cfg.cameras:
        x = torch.from_numpy(raw["images"][cam.removeprefix("observation.images.")]).float() / 255
        x = x.permute(2, 0, 1)[None]
        images.append((x - stats[cam]["mean"]) / (stats[cam]["std"] + 1e-8))
    state = (torch.from_numpy(raw["state"])[None] - stats[STATE_KEY]["mean"]) / (
        stats[STATE_KEY]["std"] + 1e-8
    )
    with torch.no_grad():
        chunk = model(images, state)
    want = (chunk * stats["action"]["std"] + stats["action"]["mean"])[0].numpy()
    got = policy.infer(raw)["actions"]
    assert got.shape == (cfg.chunk_size, cfg.action_dim) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    spec = policy.spec
    assert [(i.key, i.height, i.width) for i in spec.images] == [("top", 64, 64), ("wrist", 48, 64)]
    assert (spec.state_dim, spec.action_dim, spec.horizon, spec.action_meaning) == (10, 4, 8, "absolute")
    assert set(policy.observation_spec) == {"images/top", "images/wrist", "state"}
    assert policy.observation_spec["images/wrist"].shape == (48, 64, 3)
    assert policy.strategy_defaults == {"execute_steps": 4}


def test_raw_observations_that_do_not_fit_are_named(ckpt: Path) -> None:
    policy = load_policy(ckpt)
    raw = raw_observation(policy.config, seed=0)
    with pytest.raises(
        ConfigError, match=r"obs\['images'\]\['wrist'\] has shape \(64, 64, 3\).*\(48, 64, 3\)"
    ):
        policy.infer({**raw, "images": {**raw["images"], "wrist": raw["images"]["top"]}})
    with pytest.raises(ConfigError, match="lacks view.*wrist"):
        policy.infer({**raw, "images": {"top": raw["images"]["top"]}})
    with pytest.raises(ConfigError, match=r"obs\['state'\] has shape \(6,\).*takes \(10,\)"):
        policy.infer({**raw, "state": raw["state"][:6]})
    with pytest.raises(ConfigError, match=r"floats must lie in \[0, 1\]"):
        policy.infer({**raw, "images": {**raw["images"], "top": raw["images"]["top"].astype(np.float32)}})


def test_validate_observation_names_the_input(ckpt: Path) -> None:
    family = get_family("act")
    cfg, _ = load_act(ckpt)
    shape = ActEngineShape(1)
    obs = family.example_observation(cfg, shape)
    assert family.validate_observation(cfg, shape, obs).images[1].shape == (1, 3, 48, 64)
    as_dict = {"image_0": obs.images[0], "image_1": obs.images[1], "state": obs.state}
    assert family.validate_observation(cfg, shape, as_dict).state is not None
    with pytest.raises(
        ConfigError, match=r"'image_1' \(observation.images.wrist\) has shape \(1, 3, 64, 64\)"
    ):
        family.validate_observation(cfg, shape, {**as_dict, "image_1": obs.images[0]})
    with pytest.raises(ConfigError, match="input 'state' is missing"):
        family.validate_observation(cfg, shape, ActObservation(obs.images, None))
    with pytest.raises(ConfigError, match="unknown input.*env_state"):
        family.validate_observation(cfg, shape, {**as_dict, "env_state": obs.state})
    with pytest.raises(ConfigError, match="'image_0' contains NaN"):
        family.validate_observation(
            cfg, shape, {**as_dict, "image_0": torch.full_like(obs.images[0], float("nan"))}
        )
    two = family.stack([obs, family.random_observation(cfg, shape, 1)])
    assert family.batch_size(two) == 2
    torch.testing.assert_close(
        family.select(two, [1]).images[1], family.random_observation(cfg, shape, 1).images[1]
    )


def test_stage_work_is_what_torch_counts(ckpt: Path) -> None:
    """The analytic FLOPs equal torch's FlopCounterMode on a real forward, stage by stage."""
    family = get_family("act")
    cfg, model = load_act(ckpt)
    shape = ActEngineShape(2)
    obs = family.random_observation(cfg, shape, 0)
    counted = {}
    model.requires_grad_(False)  # the counter's module tracker hooks autograd: no graph to hook into
    with FlopCounterMode(display=False) as fc:
        maps = [model.backbone(x) for x in obs.images]
    counted["backbone"] = fc.get_total_flops()
    with FlopCounterMode(display=False) as fc:
        model.transformer(maps, obs.state)
    counted["transformer"] = fc.get_total_flops()
    work = family.stage_work(cfg, shape, {"backbone": "int8"})
    assert {k: w["flops"] for k, w in work.items()} == counted
    trunk = sum(v.numel() for k, v in model.state_dict().items() if k.startswith("backbone."))
    assert work["backbone"]["weight_bytes"] == trunk and work["backbone"]["precision"] == "int8"
    assert work["transformer"]["weight_bytes"] > 0 and work["transformer"]["precision"] == "float32"


def test_config_travels_through_a_manifest(ckpt: Path) -> None:
    family = get_family("act")
    cfg, _ = load_act(ckpt)
    assert family.config_from_dict(json.loads(json.dumps(family.config_to_dict(cfg)))) == cfg
    assert family.shape_from_dict({"batch": 3, "num_steps": 1}) == ActEngineShape(3)
    with pytest.raises(ConfigError, match="one pass"):
        family.with_steps(ActEngineShape(1), 5)


def test_a_missing_or_damaged_stats_file_is_refused_by_name(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ckpt")
    stats = folder / "policy_preprocessor_step_3_normalizer_processor.safetensors"
    stats.unlink()
    with pytest.raises(CheckpointError, match=f"{stats.name} is missing"):
        load_policy(folder)
    stats.write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_policy(folder)


def test_temporal_ensembling_is_declared_from_the_checkpoint(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ckpt", act_config(temporal_ensemble_coeff=0.05, n_action_steps=1))
    assert load_policy(folder).strategy_defaults == {"execute_steps": 1, "ensemble_coeff": 0.05}


def test_an_env_state_checkpoint_without_cameras_runs_eagerly_and_is_not_compiled(tmp_path: Path) -> None:
    cfg = act_config(cameras={}, env_state_dim=5, state_dim=None)
    folder = write_checkpoint(tmp_path / "env", cfg)
    policy = load_policy(folder)
    assert policy.spec.images == () and set(policy.observation_spec) == {"env_state"}
    out = policy.infer({"env_state": np.linspace(-1, 1, 5, dtype=np.float32)})["actions"]
    assert out.shape == (8, 4) and np.isfinite(out).all()
    with pytest.raises(ConfigError, match="obs must hold 'env_state'"):
        policy.infer({})
    with pytest.raises(ConfigError, match="field 'input_features' has no VISUAL feature"):
        find_target(str(folder)).build_source(str(folder), TargetOptions())


def test_hotloops_writer_writes_the_layout_of_the_test_writer(tmp_path: Path) -> None:
    from hotloop.families.act.checkpoint_io import save_act_checkpoint

    cfg = act_config()
    ours = write_checkpoint(tmp_path / "test-writer", cfg, seed=4)
    _, model = load_act(ours)
    theirs = save_act_checkpoint(tmp_path / "hotloop-writer", model, cfg, random_stats(cfg, 104))
    for name in ("policy_preprocessor.json", "policy_postprocessor.json"):
        assert json.loads((theirs / name).read_text()) == json.loads((ours / name).read_text())
    for name in ("model.safetensors", "policy_preprocessor_step_3_normalizer_processor.safetensors"):
        a, b = load_file(str(ours / name)), load_file(str(theirs / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    raw = raw_observation(cfg, 2)
    np.testing.assert_array_equal(
        load_policy(theirs).infer(raw)["actions"], load_policy(ours).infer(raw)["actions"]
    )


# ---- on the LeRobot-made fixture ---------------------------------------------------------------------


def test_the_fixture_policy_gives_lerobots_raw_actions(fixtures_dir: Path) -> None:
    folder = fixtures_dir / "lerobot-act-tiny"
    policy = load_policy(folder)
    raw = np.load(folder / "raw_inputs.npz")
    want = np.load(folder / "raw_actions.npy")
    for i in range(want.shape[0]):
        obs = {
            "images": {v: raw[f"observation.images.{v}"][i].transpose(1, 2, 0) for v in ("top", "wrist")},
            "state": raw["observation.state"][i],
        }
        got = policy.infer(obs)["actions"]
        # Batch 1 here, batch 2 there: a matmul's rounding depends on its row count, so not bitwise.
        assert np.abs(got - want[i]).max() <= 1e-5


def test_hotloops_writer_reproduces_the_fixtures_processor_files(fixtures_dir: Path, tmp_path: Path) -> None:
    from hotloop.families.act.checkpoint_io import lerobot_config, save_act_checkpoint

    folder = fixtures_dir / "lerobot-act-tiny"
    cfg, model = load_act(folder)
    flat = load_file(str(folder / "policy_preprocessor_step_3_normalizer_processor.safetensors"))
    stats: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        feature, stat = key.rsplit(".", 1)
        stats.setdefault(feature, {})[stat] = value
    out = save_act_checkpoint(tmp_path / "copy", model, cfg, stats)
    for name in ("policy_preprocessor.json", "policy_postprocessor.json"):
        assert json.loads((out / name).read_text()) == json.loads((folder / name).read_text())
    fixture_config = json.loads((folder / "config.json").read_text())
    written = lerobot_config(cfg)
    assert list(written) == list(fixture_config)
    differ = {k for k in fixture_config if fixture_config[k] != written[k]}
    assert differ == {"push_to_hub"}  # the fixture's LeRobot run left the hub default on
    shutil.copy(folder / "raw_inputs.npz", out / "raw_inputs.npz")
    raw = np.load(folder / "raw_inputs.npz")
    obs = {
        "images": {v: raw[f"observation.images.{v}"][0].transpose(1, 2, 0) for v in ("top", "wrist")},
        "state": raw["observation.state"][0],
    }
    got = load_policy(out).infer(obs)["actions"]
    assert np.abs(got - np.load(folder / "raw_actions.npy")[0]).max() <= 1e-5


# ---- pruning -----------------------------------------------------------------------------------------


def test_pruning_removes_the_neurons_that_contribute_nothing(ckpt: Path) -> None:
    """Half of every layer's feed-forward neurons silenced (outgoing weights 0): prune:0.5 removes exactly
    those, and the chunk is the same (up to the summation order of the smaller matmul)."""
    from hotloop.families.act.compression import ActCompression

    family = get_family("act")
    cfg, model = load_act(ckpt)
    dead = torch.arange(0, cfg.dim_feedforward, 2)
    with torch.no_grad():
        for layer in [*model.encoder.layers, *model.decoder.layers]:
            layer.linear2.weight[:, dead] = 0.0
    obs = family.random_observation(cfg, ActEngineShape(4), 0)
    small, details = ActCompression().prune(model, obs, None, "0.5", 0)
    assert small.cfg.dim_feedforward == cfg.dim_feedforward // 2 and details["dim_feedforward"] == [24, 12]
    for layer in [*small.encoder.layers, *small.decoder.layers, *small.vae_encoder.layers]:
        assert layer.linear1.weight.shape == (12, 16) and layer.linear2.weight.shape == (16, 12)
    want = family.sample_actions(model, obs, torch.zeros(4, 0))
    torch.testing.assert_close(family.sample_actions(small, obs, torch.zeros(4, 0)), want, rtol=0, atol=1e-5)
    # The pruned model is an ACT of its own config: an artifact rebuilds it from the manifest.
    rebuilt = family.empty_model(
        family.config_from_dict(json.loads(json.dumps(family.config_to_dict(small.cfg))))
    )
    rebuilt.load_state_dict(small.state_dict(), assign=True)
    torch.testing.assert_close(
        family.sample_actions(rebuilt, obs, torch.zeros(4, 0)), want, rtol=0, atol=1e-5
    )


def test_prune_arguments_and_sparsity(ckpt: Path) -> None:
    from hotloop.families.act.compression import ActCompression

    family = get_family("act")
    cfg, model = load_act(ckpt)
    obs = family.random_observation(cfg, ActEngineShape(2), 0)
    for bad, message in (
        ("0.5:0.25", "no attention-head pruning"),
        ("1.5", r"in \[0, 1\)"),
        ("x", "a number"),
    ):
        with pytest.raises(ConfigError, match=message):
            ActCompression().prune(model, obs, None, bad, 0)
    sparse, details = ActCompression().sparse24(model)
    w = sparse.encoder.layers[0].linear1.weight.view(24, -1, 4)
    assert details["pattern"] == "2:4" and bool(((w == 0).sum(-1) >= 2).all())
    assert torch.equal(sparse.trunk.conv1.weight, model.trunk.conv1.weight)  # the backbone is untouched


def test_a_renaming_preprocessor_names_the_views_the_robot_sends(tmp_path: Path) -> None:
    """LeRobot's rename step maps the robot's keys onto the config's features: the policy reads the
    robot's view names (`observation.images.front` -> the view "front") and feeds the renamed features."""
    folder = write_checkpoint(tmp_path / "ckpt")
    pre = json.loads((folder / "policy_preprocessor.json").read_text())
    pre["steps"][0]["config"]["rename_map"] = {"observation.images.front": "observation.images.top"}
    (folder / "policy_preprocessor.json").write_text(json.dumps(pre, indent=2))
    policy = load_policy(folder)
    assert [i.key for i in policy.spec.images] == ["front", "wrist"]
    raw = raw_observation(policy.config, 3)
    renamed = {**raw, "images": {"front": raw["images"]["top"], "wrist": raw["images"]["wrist"]}}
    plain = load_policy(write_checkpoint(tmp_path / "plain"))
    np.testing.assert_array_equal(policy.infer(renamed)["actions"], plain.infer(raw)["actions"])
    with pytest.raises(ConfigError, match="lacks view.*front"):
        policy.infer(raw)
