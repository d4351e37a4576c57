"""Every command on ACT checkpoint folders: verify (the fixture, and a reference run written for a random
checkpoint), bench, compile (eager + ONNX Runtime, fp32 + int8-dynamic), compress (quantize, with and
without recorded calibration frames), eval (an episode of conveyor-pick) and serve (a real websocket)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from act_checkpoint_files import act_config, raw_observation, write_checkpoint
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.targets import TargetOptions, find_target

runner = CliRunner()
FAST = ["--iters", "2", "--warmup", "0", "--threads", "1"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("act") / "ckpt", seed=2)


@pytest.fixture(scope="module")
def compiled(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("act-art") / "art"
    res = runner.invoke(
        app,
        ["compile", str(ckpt), "-o", str(out), "--budget-ms", "1e5", "--backends", "eager,onnxruntime",
         "--precisions", "fp32,int8-dynamic", *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return out


def write_reference(folder: Path, ckpt: Path, batch: int = 2) -> Path:
    """A reference run (docs/verify.md) of `ckpt`: raw LeRobot-batch inputs and every output, computed
    by hotloop's eager policy (what a compiled artifact is judged against)."""
    from hotloop.families.act.policy import load_policy
    from hotloop.models.act import act_intermediates

    policy = load_policy(ckpt)
    cfg = policy.config
    raws = [policy.batch(raw_observation(cfg, seed=20 + i)) for i in range(batch)]
    raw = {k: torch.cat([r[k] for r in raws]) for k in raws[0]}
    inputs = policy.pre(raw)
    images = [inputs[c] for c in cfg.cameras]
    with torch.no_grad():
        actions = policy.model(images, inputs["observation.state"])
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "raw_inputs.npz", **{k: v.numpy() for k, v in raw.items()})
    np.savez(folder / "inputs.npz", **{k: inputs[k].numpy() for k in raw})
    np.save(folder / "actions.npy", actions.numpy())
    np.save(folder / "raw_actions.npy", policy.post.action(actions).numpy())
    stages = act_intermediates(policy.model, images, inputs["observation.state"])
    np.savez(folder / "intermediates.npz", **{k: v.numpy() for k, v in stages.items()})
    return folder


# ---- verify ----------------------------------------------------------------------------------------


def test_verify_the_lerobot_fixture(fixtures_dir: Path, tmp_path: Path) -> None:
    js = tmp_path / "v.json"
    res = runner.invoke(app, ["verify", str(fixtures_dir / "lerobot-act-tiny"), "--json", str(js)])
    assert res.exit_code == 0, res.output
    rows = json.loads(js.read_text())["comparisons"]
    spaces = {r["space"] for r in rows}
    assert spaces == {"raw", "model", "stage"} and all(r["ok"] for r in rows)
    by = {(r["name"], r["space"]): r for r in rows}
    assert by[("actions", "model")]["max_abs"] <= 1e-5 and by[("raw_actions", "raw")]["max_abs"] <= 1e-5
    assert by[("observation.images.top", "model")]["max_abs"] == 0.0  # the preprocessor, bitwise
    assert max(r["max_abs"] for r in rows if r["space"] == "stage") <= 3e-5
    assert "backbone_feature_map_cam1" in {r["name"] for r in rows}


def test_verify_refuses_a_reference_of_the_wrong_shape(fixtures_dir: Path, tmp_path: Path) -> None:
    ref = tmp_path / "ref"
    shutil.copytree(fixtures_dir / "lerobot-act-tiny", ref)
    inputs = dict(np.load(ref / "inputs.npz"))
    inputs["observation.state"] = inputs["observation.state"][:, :5]
    np.savez(ref / "inputs.npz", **inputs)
    res = runner.invoke(app, ["verify", str(fixtures_dir / "lerobot-act-tiny"), "--reference", str(ref)])
    assert res.exit_code == 2
    assert "inputs.npz" in res.output and "observation.state" in res.output and "(2, 5)" in res.output


def test_verify_a_random_checkpoint_and_its_refusals(ckpt: Path, tmp_path: Path) -> None:
    ref = write_reference(tmp_path / "ref", ckpt)
    js = tmp_path / "v.json"
    res = runner.invoke(app, ["verify", str(ckpt), "--reference", str(ref), "--json", str(js)])
    assert res.exit_code == 0, res.output
    names = {(r["name"], r["space"]) for r in json.loads(js.read_text())["comparisons"]}
    assert {("raw_actions", "raw"), ("actions", "model"), ("observation.images.wrist", "model")} <= names
    assert ("backbone_feature_map_cam1", "stage") in names
    np.save(ref / "actions.npy", np.zeros((2, 7, 4), np.float32))  # a chunk of another length
    res = runner.invoke(app, ["verify", str(ckpt), "--reference", str(ref)])
    assert res.exit_code == 2 and "actions.npy" in res.output and "(2, 7, 4)" in res.output
    np.save(ref / "actions.npy", np.zeros((2, 8, 4), np.float32))  # the right shape, wrong numbers
    res = runner.invoke(app, ["verify", str(ckpt), "--reference", str(ref)])
    assert res.exit_code == 1 and "OUTSIDE" in res.output


def test_a_checkpoint_missing_its_stats_file_exits_2_naming_it(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ckpt")
    (folder / "policy_postprocessor_step_0_unnormalizer_processor.safetensors").unlink()
    ref = write_reference(tmp_path / "ref", write_checkpoint(tmp_path / "whole"))
    for args in (["verify", str(folder), "--reference", str(ref)], ["eval", str(folder), "--episodes", "1"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        assert "policy_postprocessor_step_0_unnormalizer_processor.safetensors is missing" in res.output


def test_an_unsupported_backbone_is_refused_naming_field_and_value(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    config["vision_backbone"] = "efficientnet_b0"
    (folder / "config.json").write_text(json.dumps(config))
    res = runner.invoke(app, ["bench", str(folder), "--iters", "1"])
    assert res.exit_code == 2
    assert "field 'vision_backbone' is 'efficientnet_b0'" in res.output


# ---- bench, compile, compress ------------------------------------------------------------------------


def test_bench_times_the_two_stages(ckpt: Path, tmp_path: Path) -> None:
    js = tmp_path / "b.json"
    res = runner.invoke(app, ["bench", str(ckpt), "--iters", "3", "--warmup", "1", "--json", str(js)])
    assert res.exit_code == 0, res.output
    assert "backbone" in res.output and "transformer" in res.output
    report = json.loads(js.read_text())
    assert set(report["stages"]) >= {"backbone", "transformer"}
    assert report["info"]["work"]["backbone"]["flops"] > report["info"]["work"]["transformer"]["flops"] > 0


def test_the_compiled_artifact_loads_and_matches_the_eager_policy(ckpt: Path, compiled: Path) -> None:
    from hotloop.families.act.policy import load_policy
    from hotloop.runtime.engine import Engine

    manifest = json.loads((compiled / "manifest.json").read_text())
    assert manifest["kind"] == "act" and {e["name"] for e in manifest["sub_engines"]} == {
        "backbone",
        "transformer",
    }
    engine = Engine.load(compiled, warmup=0)
    eager = load_policy(ckpt)
    obs = eager.observation(raw_observation(eager.config, 5))
    with torch.no_grad():
        want = eager.model(list(obs.images), obs.state)
    got = engine.infer(obs)
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)
    assert float(cos) >= 0.995  # the tolerance the plan was judged at
    with pytest.raises(Exception, match=r"input 'image_1' \(observation.images.wrist\) has shape"):
        engine.infer({"image_0": obs.images[0], "image_1": obs.images[0], "state": obs.state})
    policy = find_target(str(compiled)).build_policy(str(compiled), TargetOptions())
    raw = raw_observation(eager.config, 6)
    np.testing.assert_allclose(policy.infer(raw)["actions"], eager.infer(raw)["actions"], atol=0.05)
    assert policy.spec == eager.spec and policy.strategy_defaults == eager.strategy_defaults


def test_verify_the_artifact_against_the_reference(ckpt: Path, compiled: Path, tmp_path: Path) -> None:
    ref = write_reference(tmp_path / "ref", ckpt)
    js = tmp_path / "v.json"
    res = runner.invoke(
        app, ["verify", str(ckpt), "--reference", str(ref), "--artifact", str(compiled), "--json", str(js)]
    )
    assert res.exit_code == 0, res.output
    art = json.loads(js.read_text())["artifact"]
    assert art["violation"] is None and art["samples"] == 2 and art["worst"]["cosine"] >= 0.995


def test_an_artifact_whose_processors_changed_is_refused(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ckpt", seed=3)
    out = tmp_path / "art"
    res = runner.invoke(
        app, ["compile", str(folder), "-o", str(out), "--budget-ms", "1e5", "--backends", "eager",
              "--precisions", "fp32", *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    post = folder / "policy_postprocessor.json"
    post.write_text(post.read_text().replace('"eps": 1e-08', '"eps": 1e-06'))
    with pytest.raises(Exception, match="processor files .* changed since the artifact was compiled"):
        find_target(str(out)).build_policy(str(out), TargetOptions())


def test_compress_quantizes_an_act_checkpoint(ckpt: Path, tmp_path: Path) -> None:
    out, js = tmp_path / "q", tmp_path / "q.json"
    res = runner.invoke(
        app,
        ["compress", str(ckpt), "--recipe", "quantize", "-o", str(out), "--tolerance", "cos:0.99",
         "--backends", "eager,onnxruntime", "--bench-iters", "2", "--eval-observations", "2",
         "--calibration-frames", "2", "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = json.loads(js.read_text())["rows"]
    assert rows[-1]["step"] == "quantize" and rows[-1]["action"]["cosine"] >= 0.99
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "act"
    # A compressed plan loads in LeRobot's own loop too (tests/lerobot/test_plugin_files.py).
    assert json.loads((out / "config.json").read_text())["type"] == "hotloop"
    assert {"config.json", "policy_preprocessor.json", "policy_postprocessor.json"} <= set(manifest["files"])


def test_compress_prunes_the_transformer_and_refuses_what_act_lacks(ckpt: Path, tmp_path: Path) -> None:
    out, js = tmp_path / "p", tmp_path / "p.json"
    res = runner.invoke(
        app,
        ["compress", str(ckpt), "--recipe", "prune:0.5", "-o", str(out), "--tolerance", "cos:0.5",
         "--backends", "eager", "--bench-iters", "2", "--eval-observations", "2", "--calibration-frames", "4",
         "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["dim_feedforward"] == 12  # of 24
    policy = find_target(str(out)).build_policy(str(out), TargetOptions())
    assert policy.infer(raw_observation(policy.config, 1))["actions"].shape == (8, 4)
    res = runner.invoke(app, ["compress", str(ckpt), "--recipe", "distill", "-o", str(tmp_path / "d")])
    assert res.exit_code == 2 and "act policy, which has no distillation" in res.output
    assert not (tmp_path / "d").exists()


def test_recorded_frames_calibrate_the_quantized_plan(tmp_path: Path) -> None:
    """build_data: a recorded frame is the policy's own observation of it; targets are the recorded chunk
    normalised by the ACTION stats (last action repeated); compress reads them as calibration frames."""
    from hotloop.compile.calibration import open_dataset
    from hotloop.compile.sources import load_target
    from hotloop.families.act.policy import load_policy

    cameras = {"observation.images.top": (3, 64, 64), "observation.images.wrist": (3, 64, 64)}
    cfg = act_config(cameras=cameras)
    folder = write_checkpoint(tmp_path / "ckpt", cfg, seed=4)
    data = tmp_path / "data"
    res = runner.invoke(
        app, ["record", "--task", "conveyor-pick", "--episodes", "2", "--views", "top,wrist", "-o", str(data)]
    )
    assert res.exit_code == 0, res.output
    dataset = open_dataset(data)
    _, adapter = load_target(str(folder), dataset, num_steps=1)
    ep = dataset.episode(0)
    frame = {k: v[3] for k, v in ep.images.items()}
    obs = adapter.observe(frame, ep.state[3], 0)
    policy = load_policy(folder)
    want = policy.observation({"images": frame, "state": ep.state[3]})
    assert all(torch.equal(a, b) for a, b in zip(obs.images, want.images, strict=True))
    chunk = ep.action[-3:]  # 3 actions left: the chunk of 8 repeats the last
    stats = policy.pre.steps[-1].stats["action"]
    expected = (torch.from_numpy(np.concatenate([chunk, np.repeat(chunk[-1:], 5, 0)])) - stats["mean"]) / (
        stats["std"] + 1e-8
    )
    np.testing.assert_array_equal(adapter.targets(chunk, ep.state[-3]), expected.numpy())
    out, js = tmp_path / "q", tmp_path / "q.json"
    res = runner.invoke(
        app,
        ["compress", str(folder), "--recipe", "quantize,compile", "-o", str(out), "--data", str(data),
         "--tolerance", "cos:0.95", "--backends", "onnxruntime", "--bench-iters", "2",
         "--eval-observations", "2", "--calibration-frames", "4", "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["compression"]["calibration"]["frames"] == 4
    assert manifest["compression"]["calibration"]["dataset"] == str(data.resolve())
    plan = json.loads(js.read_text())["rows"][-1]["precision_plan"]
    assert {p["backend"] for p in plan.values()} == {"onnxruntime"}


# ---- eval, serve ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["sync", "chunk"])
def test_eval_runs_an_episode_of_conveyor_pick(ckpt: Path, tmp_path: Path, strategy: str) -> None:
    js = tmp_path / "e.json"
    res = runner.invoke(
        app,
        ["eval", str(ckpt), "--task", "conveyor-pick", "--episodes", "1", "--workers", "0",
         "--strategy", strategy, "--latency", "fixed:0", "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    run = json.loads(js.read_text())
    (episode,) = run["per_episode"]
    assert episode["error"] is None and episode["inferences"] >= 2
    views = {v["task"]: v["size"] for v in run["adaptation"]["views"]}
    assert views == {"top": [64, 64], "wrist": [48, 64]}
    if strategy == "chunk":  # LeRobot's action queue: n_action_steps (4) actions per inference
        assert run["strategy"]["execute_steps"] == 4


def test_eval_ensembles_with_the_checkpoints_own_coefficient(tmp_path: Path) -> None:
    """temporal_ensemble_coeff 0.05 in config.json: `--strategy ensemble` queries every period and
    averages with it, as LeRobot's select_action does; `--ensemble-coeff` given on the command line wins."""
    folder = write_checkpoint(tmp_path / "ckpt", act_config(temporal_ensemble_coeff=0.05, n_action_steps=1))
    for extra, coeff in (([], 0.05), (["--ensemble-coeff", "0.2"], 0.2)):
        js = tmp_path / f"e{coeff}.json"
        res = runner.invoke(
            app,
            ["eval", str(folder), "--task", "conveyor-pick", "--episodes", "1", "--workers", "0",
             "--strategy", "ensemble", "--latency", "fixed:30", "--json", str(js), "--quiet", *extra],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        run = json.loads(js.read_text())
        assert run["strategy"]["name"] == "ensemble" and run["strategy"]["ensemble_coeff"] == coeff
        (episode,) = run["per_episode"]
        assert episode["error"] is None
        periods = episode["sim_time_s"] * 10  # conveyor-pick runs at 10 Hz: one inference a period
        assert periods - 1 <= episode["inferences"] <= periods + 1


def test_served_act_answers_in_robot_units_like_the_local_policy(ckpt: Path) -> None:
    from hotloop.client import PolicyClient, ServerError
    from hotloop.families.act.policy import load_policy
    from hotloop.serve.policies import load_served_policy
    from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread

    served = load_served_policy(str(ckpt), TargetOptions())
    assert served.observation_spec["images/wrist"].shape == (48, 64, 3)
    local = load_policy(ckpt)
    raw = raw_observation(local.config, 9)
    with (
        ServerThread(PolicyServer(served, ServeConfig(port=0))) as server,
        PolicyClient(port=server.port) as client,
    ):
        got = client.infer(raw)["actions"]
        assert client.metadata.get("strategy_defaults") == {"execute_steps": 4}
        with pytest.raises(ServerError, match="images/wrist"):
            client.infer({**raw, "images": {**raw["images"], "wrist": raw["images"]["top"]}})
    np.testing.assert_array_equal(got, local.infer(raw)["actions"])
