"""demo:conveyor-act, demo:conveyor-diffusion and demo:conveyor-smolvla: the shipped LeRobot checkpoint folders as
targets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.demos.checkpoints import SHIPPED, asset_dir, ship
from hotloop.errors import ConfigError
from hotloop.targets import TargetOptions, default_targets, find_target

runner = CliRunner()
DEMOS = [f"demo:{name}" for name in SHIPPED]


@pytest.mark.parametrize("target", DEMOS)
def test_shipped_demo_is_a_lerobot_checkpoint_of_its_family(target: str) -> None:
    from hotloop.families import checkpoint_type

    family, _ = SHIPPED[target.split(":", 1)[1]]
    folder = asset_dir(target)
    assert checkpoint_type(folder) == family
    config = json.loads((folder / "config.json").read_text())
    assert config["type"] == family and "observation.images.top" in config["input_features"]
    for processor in ("policy_preprocessor.json", "policy_postprocessor.json"):
        for step in json.loads((folder / processor).read_text())["steps"]:
            if step.get("state_file"):
                assert (folder / step["state_file"]).is_file()
    assert find_target(target) is default_targets().get(target)


@pytest.mark.parametrize("target", DEMOS)
def test_shipped_demo_runs_as_its_folder_does(target: str) -> None:
    """The demo name and the folder path are the same policy: same actions on the same observation."""
    options = TargetOptions()
    by_name = default_targets().get(target).build_policy(target, options)
    folder = str(asset_dir(target))
    by_path = find_target(folder).build_policy(folder, options)
    rng = np.random.default_rng(0)
    spec = by_name.observation_spec
    obs = {"images": {}}
    for key, arr in spec.items():
        if key.startswith("images/"):
            obs["images"][key.split("/", 1)[1]] = rng.integers(0, 256, arr.shape, dtype=np.uint8)
        elif key == "prompt":  # SmolVLA's
            obs[key] = "pick up the box from the moving belt"
        elif not getattr(arr, "optional", False):  # not the RTC keys
            obs[key] = rng.standard_normal(arr.shape).astype(np.float32) * 0.05
    a = by_name.infer(obs)["actions"]
    b = by_path.infer(obs)["actions"]
    # ACT returns its chunk (10), Diffusion and SmolVLA their n_action_steps (8, 5) from the current step
    horizon = {"demo:conveyor-act": 10, "demo:conveyor-diffusion": 8, "demo:conveyor-smolvla": 5}[target]
    assert a.shape == (horizon, 4) and np.isfinite(a).all()
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("target", DEMOS)
def test_task_observations_are_the_task_start_frames_as_the_model_sees_them(target: str) -> None:
    entry = default_targets().get(target)
    observations = entry.build_task_observations(target, TargetOptions(seed=3), "conveyor-pick", 2)
    source = entry.build_source(target, TargetOptions())
    batch = source.family.stack(observations)
    assert source.family.batch_size(batch) == 2
    # Different seeds start the box elsewhere: the rendered views differ (not a constant placeholder).
    # ACT: one (1, 3, H, W) tensor per camera; Diffusion: (1, n_obs_steps, cameras, 3, H, W); SmolVLA:
    # (1, cameras, 3, H, W).
    a, b = (torch.cat(list(o.images)) if isinstance(o.images, tuple) else o.images for o in observations)
    assert a.shape == b.shape and not torch.equal(a, b)
    if hasattr(batch, "lang_tokens"):  # SmolVLA: the prompt in the engines' slots, as the planner runs them
        assert batch.lang_tokens.shape[1] == source.shape.prompt_slots
    with torch.no_grad():
        noise = torch.zeros(source.family.noise_shape(source.cfg, source.shape, 2))
        out = source.family.sample_actions(source.model, batch, noise, source.shape.num_steps)
    assert out.shape[0] == 2 and torch.isfinite(out).all()


def test_ship_copies_the_checkpoint_and_its_statistics(tmp_path: Path) -> None:
    src = asset_dir("demo:conveyor-act")
    dest = ship(src, "act", assets=tmp_path)
    assert dest == tmp_path / "demo_conveyor_act"
    for f in src.iterdir():
        assert (dest / f.name).read_bytes() == f.read_bytes(), f.name
    # A run folder without its statistics is refused by name, and nothing is shipped.
    broken = tmp_path / "run"
    broken.mkdir()
    for f in ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"):
        (broken / f).write_bytes((src / f).read_bytes())
    with pytest.raises(ConfigError, match="normalizer_processor.safetensors"):
        ship(broken, "act", assets=tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_ship_copies_smolvlas_tokenizer_folder_and_vlm_config(tmp_path: Path) -> None:
    src = asset_dir("demo:conveyor-smolvla")
    dest = ship(src, "smolvla", assets=tmp_path)
    for name in ("vlm_config.json", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"):
        assert (dest / name).read_bytes() == (src / name).read_bytes(), name
    broken = tmp_path / "run"
    shutil.copytree(src, broken)
    shutil.rmtree(broken / "tokenizer")
    with pytest.raises(ConfigError, match="lacks tokenizer/"):
        ship(broken, "smolvla", assets=tmp_path / "other")
    with pytest.raises(ConfigError, match="no demo:conveyor-pi0 target ships"):
        ship(src, "pi0", assets=tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_unknown_checkpoint_demo_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a shipped checkpoint demo"):
        asset_dir("demo:conveyor-pi0")


def test_eval_demo_act_closed_loop(tmp_path: Path) -> None:
    """Two real episodes through `hotloop eval`: the adapter maps the task's views and state."""
    out = tmp_path / "r.json"
    res = runner.invoke(
        app,
        ["eval", "demo:conveyor-act", "--latency", "fixed:0", "--episodes", "2", "--workers", "0",
         "--quiet", "--json", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    run = json.loads(out.read_text())
    assert run["episodes"] == 2 and run["errors"] == 0 and run["completed"] == 2
    assert {(v["task"], v["policy"]) for v in run["adaptation"]["views"]} == {
        ("top", "top"),
        ("wrist", "wrist"),
    }
    assert run["adaptation"]["state"] == "10 -> 10" and run["adaptation"]["actions"] == "4 -> 4"


def test_demo_smolvla_benches_its_three_sub_engines() -> None:
    """By name, as any SmolVLA: vision, prefix and denoise timed (closed loop: 20/20 at 0 ms when shipped,
    docs/smolvla.md; `hotloop eval` on a checkpoint demo is tested with demo:conveyor-act)."""
    res = runner.invoke(app, ["bench", "demo:conveyor-smolvla", "--iters", "1", "--warmup", "0"])
    assert res.exit_code == 0, res.output
    assert all(stage in res.output for stage in ("vision", "prefix", "denoise"))
