"""SmolVLA through every command on a random LeRobot-layout checkpoint folder and the named targets: bench
(stages and roofline), compile (eager + ONNX Runtime, prompt buckets) into an artifact that Engine.loads and
that matches eager, verify (with --artifact) on a reference run, compress (fewer steps, int8, step
distillation), and bad input refused in one line with exit 2."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.families.reference import as_batch
from hotloop.families.smolvla.targets import SIZES
from hotloop.targets import TargetOptions, find_target

runner = CliRunner()
# The compress tests' own checkpoint: two text layers (one self-, one cross-attention layer, as the
# session's four-layer checkpoint alternates them) halve the work of every candidate the recipe judges.
TWO_LAYERS = dataclasses.replace(SIZES["tiny"], text_layers=2)
FAST = ["--iters", "1", "--warmup", "0", "--threads", "1"]


def write_reference(
    ck: Path, out: Path, tasks: tuple[str, ...] = ("w5 w17 w33 w9", "w7 w8"), seed: int = 0
) -> Path:
    """A reference run in the fixtures' format, made by hotloop's eager model (what --artifact is checked on)."""
    from hotloop.models.smolvla import predict_action_chunk

    policy = find_target(str(ck)).build_policy(str(ck), TargetOptions())
    pre, post = policy.settings.processors
    g = torch.Generator().manual_seed(seed)
    b = len(tasks)
    raw: dict[str, Any] = {
        k: torch.rand(b, 3, 24, 40, generator=g).numpy() for k in policy.config.camera_keys
    }
    raw["observation.state"] = torch.randn(b, policy.config.state_dim, generator=g).numpy()
    raw["task"] = np.array(tasks)
    inputs = {k: v.numpy() for k, v in pre(as_batch(raw)).items() if isinstance(v, torch.Tensor)}
    cfg = policy.config
    noise = torch.randn(b, cfg.chunk_size, cfg.max_action_dim, generator=g)
    actions = predict_action_chunk(policy.model, as_batch(inputs), noise)
    out.mkdir(parents=True)
    np.savez(out / "raw_inputs.npz", **raw)
    np.savez(out / "inputs.npz", **inputs)
    np.save(out / "noise.npy", noise.numpy())
    np.save(out / "actions.npy", actions.numpy())
    np.save(out / "raw_actions.npy", post.action(actions).numpy())
    return out


@pytest.fixture(scope="module")
def reference(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_reference(checkpoint, tmp_path_factory.mktemp("ref") / "run")


@pytest.fixture(scope="module")
def compiled(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("smolvla-art") / "art"
    res = runner.invoke(
        app,
        ["compile", str(checkpoint), "-o", str(out), "--budget-ms", "1e5", "--backends", "eager,onnxruntime",
         "--precisions", "fp32", "--buckets", "4", "--quiet", *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return out


def test_bench_of_the_named_target_has_its_stages_and_roofline(tmp_path: Path) -> None:
    js = tmp_path / "b.json"
    res = runner.invoke(app, ["bench", "smolvla:tiny", "--iters", "2", "--warmup", "1", "--json", str(js)])
    assert res.exit_code == 0, res.output
    report = json.loads(js.read_text())
    assert {"vision", "prefix", "denoise"} <= set(report["stages"])
    assert set(report["roofline"]["stages"]) == {"vision", "prefix", "denoise"}
    assert all(r["gflop"] > 0 for r in report["roofline"]["stages"].values())
    assert report["info"]["parameters"] < 1_000_000 and report["info"]["prompt_real_tokens"] == 12


def test_bench_of_a_checkpoint_routes_its_prompt_to_a_bucket(checkpoint: Path, tmp_path: Path) -> None:
    js = tmp_path / "b.json"
    res = runner.invoke(
        app, ["bench", str(checkpoint), "--iters", "1", "--warmup", "0", "--buckets", "4,8", "--prompt-tokens", "3",
              "--json", str(js)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    info = json.loads(js.read_text())["info"]
    assert info["prompt_buckets"] == [4, 8, 12] and info["prompt_bucket"] == 4


def test_compiled_artifact_loads_and_matches_eager(compiled: Path, checkpoint: Path) -> None:
    from hotloop.runtime.engine import Engine

    manifest = json.loads((compiled / "manifest.json").read_text())
    assert manifest["kind"] == "smolvla" and manifest["prompt_buckets"] == [4, 12]
    names = {e["name"] for e in manifest["sub_engines"]}
    assert {"vision", "prefix", "prefix@4"} <= names and any(n.startswith("denoise_") for n in names)
    engine = Engine.load(compiled, warmup=0)
    family, cfg = engine.family, engine.cfg
    for real in (3, 9):  # a prompt in the small bucket, one in the full prompt
        obs = family.fill_prompt(family.random_observation(cfg, engine.shape, 5), real)
        noise = family.make_noise(cfg, engine.shape, 1, torch.Generator().manual_seed(2))
        eager = find_target(str(checkpoint)).build_source(str(checkpoint), TargetOptions())
        want = family.sample_actions(eager.model, obs, noise)
        got = engine.infer(obs, noise)
        assert (got - want).abs().max() < 1e-5
    # the artifact's policy: same preprocessing and noise stream as the eager checkpoint policy
    policy = find_target(str(compiled)).build_policy(str(compiled), TargetOptions())
    eager_policy = find_target(str(checkpoint)).build_policy(str(checkpoint), TargetOptions())
    g = np.random.default_rng(0)
    obs_raw = {"images": {"top": g.integers(0, 255, (24, 40, 3), dtype=np.uint8),
                          "wrist": g.integers(0, 255, (24, 40, 3), dtype=np.uint8)},
               "state": g.normal(size=10).astype(np.float32), "prompt": "w5 w6 w7"}  # fmt: skip
    np.testing.assert_allclose(
        policy.infer(obs_raw)["actions"], eager_policy.infer(obs_raw)["actions"], atol=1e-5
    )
    assert policy.spec == eager_policy.spec


def test_bench_of_the_artifact_has_the_roofline(compiled: Path, tmp_path: Path) -> None:
    js = tmp_path / "b.json"
    res = runner.invoke(app, ["bench", str(compiled), "--iters", "2", "--warmup", "1", "--prompt-tokens", "3",
                              "--json", str(js)])  # fmt: skip
    assert res.exit_code == 0, res.output
    report = json.loads(js.read_text())
    assert report["info"]["prompt_bucket"] == 4
    assert set(report["roofline"]["stages"]) == {"vision", "prefix", "denoise"}


def test_verify_passes_with_the_artifact(
    checkpoint: Path, reference: Path, compiled: Path, tmp_path: Path
) -> None:
    js = tmp_path / "v.json"
    res = runner.invoke(
        app,
        [
            "verify",
            str(checkpoint),
            "--reference",
            str(reference),
            "--artifact",
            str(compiled),
            "--json",
            str(js),
        ],
    )
    assert res.exit_code == 0, res.output
    report = json.loads(js.read_text())
    names = {c["name"]: c for c in report["comparisons"]}
    assert names["actions"]["max_abs"] == 0.0 and names["raw_actions"]["max_abs"] == 0.0
    assert names["inputs observation.language.tokens"]["max_abs"] == 0.0
    assert names["actions (sub-engines, 12 prompt slots)"]["max_abs"] < 1e-5
    assert report["artifact"]["violation"] is None and report["artifact"]["samples"] == 2


def test_compress_fewer_steps_then_quantize(make_checkpoint: Any, tmp_path: Path) -> None:
    checkpoint = make_checkpoint(sizes=TWO_LAYERS)  # the recipe's steps do not depend on the depth
    out, js = tmp_path / "q", tmp_path / "q.json"
    res = runner.invoke(
        app,
        ["compress", str(checkpoint), "--recipe", "steps:5,quantize", "-o", str(out), "--tolerance", "cos:0.9",
         "--backends", "eager", "--bench-iters", "2", "--eval-observations", "2", "--calibration-frames", "2",
         "--threads", "1", "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = {r["step"]: r for r in json.loads(js.read_text())["rows"]}
    assert rows["steps:5"]["num_steps"] == 5 and rows["quantize"]["action"]["cosine"] >= 0.9
    assert json.loads((out / "manifest.json").read_text())["shape"]["num_steps"] == 5


def test_a_zero_noise_artifact_starts_every_chunk_at_zero(make_checkpoint: Any, tmp_path: Path) -> None:
    """`zero-noise`: the artifact's policy (read from its manifest) gives the same chunk under any noise
    seed, where the checkpoint's own policy draws its start (the control)."""
    checkpoint = make_checkpoint(sizes=TWO_LAYERS)
    out = tmp_path / "z"
    res = runner.invoke(
        app,
        ["compress", str(checkpoint), "--recipe", "steps:2,zero-noise", "-o", str(out), "--tolerance", "cos:0.01",
         "--backends", "eager", "--bench-iters", "2", "--eval-observations", "2", "--calibration-frames", "2",
         "--threads", "1", "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads((out / "manifest.json").read_text())["policy"]["zero_noise"] is True
    g = np.random.default_rng(0)
    obs_raw = {"images": {"top": g.integers(0, 255, (24, 40, 3), dtype=np.uint8),
                          "wrist": g.integers(0, 255, (24, 40, 3), dtype=np.uint8)},
               "state": g.normal(size=10).astype(np.float32), "prompt": "w5 w6 w7"}  # fmt: skip

    def chunks(where: Path) -> list[np.ndarray]:
        return [
            find_target(str(where)).build_policy(str(where), TargetOptions(seed=s)).infer(obs_raw)["actions"]
            for s in (0, 1)
        ]

    a, b = chunks(out)
    np.testing.assert_array_equal(a, b)
    a, b = chunks(checkpoint)
    assert not np.allclose(a, b)


def test_compress_step_distillation_trains_the_expert(make_checkpoint: Any, tmp_path: Path) -> None:
    checkpoint = make_checkpoint(sizes=TWO_LAYERS)
    out, js = tmp_path / "d", tmp_path / "d.json"
    res = runner.invoke(
        app,
        ["compress", str(checkpoint), "--recipe", "step-distill:2", "-o", str(out), "--tolerance", "cos:0.5",
         "--backends", "eager", "--bench-iters", "2", "--eval-observations", "2", "--calibration-frames", "4",
         "--distill-steps", "3", "--distill-batch", "2", "--threads", "1", "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    row = json.loads(js.read_text())["rows"][-1]
    assert row["step"] == "step-distill:2" and row["num_steps"] == 2
    assert (
        row["details"]["steps"] == 3
        and row["details"]["chunk_mse_after"] != row["details"]["chunk_mse_before"]
    )


def test_step_distillation_of_the_smolvla_demo_learns_on_its_own_rollouts(tmp_path: Path) -> None:
    """`--distill-episodes` on demo:conveyor-smolvla rolls the teacher out through eval's episode runner
    (it crashed looking for a pi demo's `meta`) and trains on those observations."""
    out, js = tmp_path / "d", tmp_path / "d.json"
    res = runner.invoke(
        app,
        ["compress", "demo:conveyor-smolvla", "--recipe", "step-distill:2", "--distill-episodes", "1",
         "--distill-steps", "2", "--distill-batch", "2", "--backends", "eager", "--bench-iters", "2",
         "--eval-observations", "2", "--calibration-frames", "4", "--threads", "1", "--tolerance", "cos:0.1",
         "-o", str(out), "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(js.read_text())["rows"][-1]["details"]["data"]
    assert data["source"].startswith("teacher rollouts") and data["episodes"] == 1
    assert data["observations"] > 0 and data["seeds"][0] == data["seeds"][1]


def test_compress_onestep_student_on_recorded_frames(make_checkpoint: Any, tmp_path: Path) -> None:
    """`onestep:2` on a SmolVLA folder: trained on --data frames (their chunks anchor the flow), written
    as a 2-step plan whose fit to the teacher's 10-step chunks improved."""
    checkpoint = make_checkpoint(sizes=TWO_LAYERS)
    data = tmp_path / "data"
    res = runner.invoke(app, ["record", "--task", "reach", "--episodes", "1", "--views", "top,wrist", "-o", str(data),
                              "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    out, js = tmp_path / "o", tmp_path / "o.json"
    res = runner.invoke(
        app,
        ["compress", str(checkpoint), "--recipe", "onestep:2", "-o", str(out), "--data", str(data), "--tolerance",
         "cos:0.01", "--backends", "eager", "--bench-iters", "2", "--eval-observations", "2", "--calibration-frames",
         "4", "--distill-steps", "6", "--distill-batch", "4", "--distill-lr", "1e-3", "--threads", "1", "--json",
         str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    row = json.loads(js.read_text())["rows"][-1]
    assert row["step"] == "onestep:2" and row["num_steps"] == 2
    details = row["details"]
    assert [s["steps"] for s in details["stages"]] == [2] and details["anchor"]["frames"] == 4
    assert details["trajectories"] == 4 * 4  # four start draws per frame: SmolVLA samples from noise
    assert details["chunk_mse_after"] < details["chunk_mse_before"]
    assert json.loads((out / "manifest.json").read_text())["shape"]["num_steps"] == 2


@pytest.mark.slow
def test_compress_int8_calibrates_on_recorded_frames(make_checkpoint: Any, tmp_path: Path) -> None:
    # Three denoising steps as well: ONNX Runtime's static quantizer is quadratic in the graph's nodes, and
    # the unrolled denoising loop of the session's checkpoint (4 layers x 10 steps) made this test the
    # suite's slowest (66 s) for the same calibration.
    checkpoint = make_checkpoint(sizes=dataclasses.replace(TWO_LAYERS, num_steps=3))
    data = tmp_path / "data"
    res = runner.invoke(app, ["record", "--task", "reach", "--episodes", "1", "--views", "top,wrist", "-o", str(data),
                              "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    out, js = tmp_path / "q", tmp_path / "q.json"
    res = runner.invoke(
        app,
        ["compress", str(checkpoint), "--recipe", "quantize,compile", "-o", str(out), "--data", str(data),
         "--tolerance", "cos:0.9", "--backends", "onnxruntime", "--bench-iters", "2", "--eval-observations",
         "2", "--calibration-frames", "4", "--buckets", "4", "--threads", "1", "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["compression"]["calibration"]["frames"] == 4 and manifest["prompt_buckets"] == [4, 12]
    assert all(
        v["precision"] in ("fp32", "bf16", "int8", "int8-dynamic")
        for v in manifest["precision_plan"].values()
    )


# ---- bad input: one line naming it, exit 2 ----------------------------------------------------------------


def _one_line_error(res: Any) -> str:
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


def test_a_missing_tokenizer_folder_is_named(checkpoint: Path, reference: Path, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(checkpoint, ck)
    shutil.rmtree(ck / "tokenizer")
    for command in (
        ["bench", str(ck), *FAST],
        ["verify", str(ck), "--reference", str(reference)],
        ["serve", str(ck), "--port", "0"],
    ):
        line = _one_line_error(runner.invoke(app, command))
        assert "tokenizer" in line and str(ck / "tokenizer") in line


def test_a_corrupt_tokenizer_is_named(checkpoint: Path, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(checkpoint, ck)
    (ck / "tokenizer" / "tokenizer.json").write_text('{"model": {"type": "WordLevel", "vocab": ')
    line = _one_line_error(
        runner.invoke(app, ["compile", str(ck), "-o", str(tmp_path / "a"), "--budget-ms", "1"])
    )
    assert str(ck / "tokenizer" / "tokenizer.json") in line and "not a readable" in line
    assert not (tmp_path / "a").exists()


def test_a_prompt_longer_than_the_maximum_is_refused(
    checkpoint: Path, reference: Path, tmp_path: Path
) -> None:
    line = _one_line_error(runner.invoke(app, ["bench", str(checkpoint), "--prompt-tokens", "13", *FAST]))
    assert "--prompt-tokens 13" in line and "max_length 12" in line
    long = write_reference(checkpoint, tmp_path / "long", tasks=(" ".join(f"w{i}" for i in range(5, 20)),))
    line = _one_line_error(runner.invoke(app, ["verify", str(checkpoint), "--reference", str(long)]))
    assert "is 15 tokens" in line and "max_length 12" in line
    policy = find_target(str(checkpoint)).build_policy(str(checkpoint), TargetOptions())
    obs = {"images": {"top": np.zeros((24, 40, 3), np.uint8), "wrist": np.zeros((24, 40, 3), np.uint8)},
           "state": np.zeros(10, np.float32), "prompt": " ".join(["w5"] * 13)}  # fmt: skip
    with pytest.raises(
        Exception, match="is 13 tokens; the checkpoint's tokenizer step takes at most max_length 12"
    ):
        policy.infer(obs)


def test_images_of_the_wrong_count_are_refused(checkpoint: Path, reference: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    inputs = dict(np.load(run / "inputs.npz"))
    del inputs["observation.images.wrist"]
    np.savez(run / "inputs.npz", **inputs)
    (run / "raw_inputs.npz").unlink()
    line = _one_line_error(runner.invoke(app, ["verify", str(checkpoint), "--reference", str(run)]))
    assert "holds 1 camera image(s)" in line and "observation.images.wrist" in line
    policy = find_target(str(checkpoint)).build_policy(str(checkpoint), TargetOptions())
    top = np.zeros((24, 40, 3), np.uint8)
    for images in ({"top": top}, {"top": top, "wrist": top, "side": top}, np.stack([top] * 3)):
        with pytest.raises(Exception, match="this policy takes 2: top, wrist"):
            policy.infer({"images": images, "state": np.zeros(10, np.float32), "prompt": "w5"})
