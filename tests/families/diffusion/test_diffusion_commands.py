"""A LeRobot Diffusion checkpoint folder through the commands: bench, compile (eager + ONNX Runtime, the
loop engine among the candidates), the artifact loaded and sampled like the eager model, verify against a
reference run (with --artifact), compress with the family's ddim:N step and quantize."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusion_checkpoints import raw_observation
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.families import get_family
from hotloop.targets import TargetOptions, find_target

runner = CliRunner()
FAST = ["--iters", "2", "--warmup", "0", "--threads", "1"]


@pytest.fixture(scope="module")
def compiled(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("diffusion-art")
    art, js = out / "art", out / "plan.json"
    res = runner.invoke(
        app,
        ["compile", str(tiny_ckpt), "-o", str(art), "--budget-ms", "1e5", "--backends", "eager,onnxruntime",
         "--precisions", "fp32", "--json", str(js), *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return art, json.loads(js.read_text())


def _reference_run(folder: Path, ckpt: Path, batch: int = 2) -> Path:
    """A reference run of `ckpt` in docs/verify.md's format, from hotloop's eager sampler."""
    from hotloop.families.diffusion.engines import DiffusionEngineShape

    source = find_target(str(ckpt)).build_source(str(ckpt), TargetOptions())
    family, cfg = source.family, source.cfg
    shape = DiffusionEngineShape(batch, cfg.num_inference_steps)
    obs = family.random_observation(cfg, shape, 11)
    noise = family.make_noise(cfg, shape, batch, torch.Generator().manual_seed(12))
    actions = family.reference_actions(cfg, family.sample_actions(source.model, obs, noise))
    folder.mkdir(parents=True)
    assert obs.images is not None
    np.savez(folder / "inputs.npz", **{"observation.state": obs.state.numpy(),
             "observation.images.top": obs.images[:, :, 0].numpy()})  # fmt: skip
    np.save(folder / "noise.npy", noise[:, 0].numpy())
    np.save(folder / "step_noise.npy", noise[:, 1:].transpose(0, 1).contiguous().numpy())
    np.save(folder / "actions.npy", actions.numpy())
    return folder


def test_bench_of_the_checkpoint_shows_encoder_and_denoise(tiny_ckpt: Path, tmp_path: Path) -> None:
    for steps, want in ((None, 10), ("4", 4)):
        js = tmp_path / f"b{steps}.json"
        extra = ["--steps", steps] if steps else []
        res = runner.invoke(
            app, ["bench", str(tiny_ckpt), "--iters", "2", "--warmup", "0", "--json", str(js), *extra]
        )
        assert res.exit_code == 0, res.output
        report = json.loads(js.read_text())
        assert set(report["stages"]) >= {"encoder", "denoise"}
        assert report["info"]["num_steps"] == want and report["info"]["scheduler"] == "DDPM"
        work = report["info"]["work"]
        assert work["denoise"]["flops"] > 0 and work["encoder"]["flops"] > 0
    res = runner.invoke(app, ["bench", str(tiny_ckpt), "--steps", "11"])
    assert res.exit_code == 2 and "--steps 11" in res.output and "num_train_timesteps (10)" in res.output


def test_the_compiled_artifact_loads_and_samples_like_the_eager_model(
    compiled: tuple[Path, dict], tiny_ckpt: Path
) -> None:  # type: ignore[type-arg]
    from hotloop.runtime.engine import Engine

    art, _ = compiled
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["kind"] == "diffusion" and manifest["family"] == "ddpm"  # the variant: its sampler
    engine = Engine.load(art, warmup=0)
    source = find_target(str(tiny_ckpt)).build_source(str(tiny_ckpt), TargetOptions())
    family = get_family("diffusion")
    for seed in range(3):
        obs = family.random_observation(source.cfg, source.shape, seed)
        noise = family.make_noise(source.cfg, source.shape, 1, torch.Generator().manual_seed(seed))
        want = family.sample_actions(source.model, obs, noise)
        got = engine.sample(obs, noise).clone()
        assert float((got - want).abs().max()) < 1e-4
    # The artifact as a robot policy: the same history, noise and processors as the eager wrapper.
    eager = find_target(str(tiny_ckpt)).build_policy(str(tiny_ckpt), TargetOptions())
    policy = find_target(str(art)).build_policy(str(art), TargetOptions())
    assert policy.spec == eager.spec
    for i in range(3):
        obs_raw = raw_observation(i)
        np.testing.assert_allclose(
            policy.infer(obs_raw)["actions"], eager.infer(obs_raw)["actions"], atol=1e-4
        )
    with pytest.raises(Exception, match=r"input 'state' has shape \(1, 1, 10\)"):
        engine.infer({"state": torch.zeros(1, 1, 10), "images": torch.zeros(1, 2, 1, 3, 64, 64)})


def test_the_loop_engine_exports_and_is_chosen_or_rejected_honestly(compiled: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    art, plan = compiled
    rows = [c for c in plan["candidates"] if c["stage"] == "denoise"]
    loop = [c for c in rows if c["sub_engine"] == "denoise_loop"]
    assert {c["backend"] for c in loop} == {"eager", "onnxruntime"}
    assert all(c["status"] == "accepted" for c in loop), loop  # the unrolled loop exports and runs
    # The denoise stage's choice is the fastest accepted candidate, step engine x N or loop engine
    accepted = [c for c in rows if c["status"] == "accepted"]
    chosen = plan["plan"]["denoise"]
    best = min(accepted, key=lambda c: c["latency_ms"]["p99"])
    assert (chosen["sub_engine"], chosen["backend"]) == (best["sub_engine"], best["backend"])
    manifest = json.loads((art / "manifest.json").read_text())
    assert chosen["sub_engine"] in {e["name"] for e in manifest["sub_engines"]}


def test_verify_the_artifact_against_a_reference_run(
    compiled: tuple[Path, dict], tiny_ckpt: Path, tmp_path: Path
) -> None:  # type: ignore[type-arg]
    art, _ = compiled
    ref = _reference_run(tmp_path / "ref", tiny_ckpt)
    js = tmp_path / "v.json"
    res = runner.invoke(
        app, ["verify", str(tiny_ckpt), "--reference", str(ref), "--artifact", str(art), "--json", str(js)]
    )
    assert res.exit_code == 0, res.output
    result = json.loads(js.read_text())
    assert result["artifact"]["violation"] is None and result["artifact"]["samples"] == 2
    assert [c["name"] for c in result["comparisons"]] == ["actions"]
    assert result["comparisons"][0]["max_abs"] == 0.0


@pytest.mark.slow  # a whole ddim + quantize recipe over OpenVINO: ~40 s
def test_compress_switches_to_ddim_and_quantizes(trained_ckpt: Path, tmp_path: Path) -> None:
    """DDPM 50 -> DDIM 10 on a trained checkpoint keeps the chunks within cos 0.8 of the reference (0.91
    measured), then quantize asks the planner for int8 / bf16 per sub-engine (fp32 where they miss)."""
    out, js = tmp_path / "c", tmp_path / "c.json"
    res = runner.invoke(
        app,
        ["compress", str(trained_ckpt), "--recipe", "ddim:10,quantize", "-o", str(out), "--tolerance",
         "cos:0.8", "--backends", "eager", "--bench-iters", "2", "--eval-observations", "4",
         "--calibration-frames", "4", "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    report = json.loads(js.read_text())
    assert [r["step"] for r in report["rows"]] == ["reference", "ddim:10", "quantize"]
    assert [r["num_steps"] for r in report["rows"]] == [50, 10, 10]
    assert report["rows"][1]["details"] == {"scheduler": "DDIM", "from": "DDPM"}
    assert 0.8 <= report["rows"][1]["action"]["cosine"] < 1.0  # another sampler: close, not equal
    assert report["rows"][1]["latency_ms"]["p50"] < report["rows"][0]["latency_ms"]["p50"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["noise_scheduler_type"] == "DDIM" and manifest["shape"]["num_steps"] == 10
    assert manifest["family"] == "ddim"
    assert {p["precision"] for p in manifest["precision_plan"].values()} <= {"int8-dynamic", "bf16", "fp32"}
    from hotloop.runtime.engine import Engine

    engine = Engine.load(out, warmup=0)
    assert engine.pipeline.table[:, 0].tolist() == [45, 40, 35, 30, 25, 20, 15, 10, 5, 0]  # DDIM's spacing


def test_a_step_that_breaks_the_tolerance_stops_the_recipe(tiny_ckpt: Path, tmp_path: Path) -> None:
    """On random weights DDIM is another function altogether: ddim:5 breaks cos 0.99, the reference is kept."""
    out, js = tmp_path / "c", tmp_path / "c.json"
    res = runner.invoke(
        app,
        ["compress", str(tiny_ckpt), "--recipe", "ddim:5", "-o", str(out), "--tolerance", "cos:0.99",
         "--backends", "eager", "--bench-iters", "2", "--eval-observations", "2", "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 3, res.output
    report = json.loads(js.read_text())
    assert report["kept_step"] == "reference" and "step ddim:5 broke the tolerance" in report["stopped"]
    assert json.loads((out / "manifest.json").read_text())["config"]["noise_scheduler_type"] == "DDPM"


def test_compress_refuses_the_ddim_step_for_other_families_and_typos(tmp_path: Path, tiny_ckpt: Path) -> None:
    res = runner.invoke(app, ["compress", "toy:mlp", "--recipe", "ddim:5", "-o", str(tmp_path / "t")])
    assert res.exit_code == 2 and "unknown step 'ddim'" in res.output
    res = runner.invoke(app, ["compress", str(tiny_ckpt), "--recipe", "ddim:x", "-o", str(tmp_path / "d")])
    assert res.exit_code == 2 and "ddim:x: give a positive step count" in res.output
    res = runner.invoke(app, ["compress", str(tiny_ckpt), "--recipe", "prune:0.5", "-o", str(tmp_path / "p")])
    assert (
        res.exit_code == 2 and "diffusion policy, which has no pruning" in res.output and "ddim" in res.output
    )
    assert not any((tmp_path / n).exists() for n in "tdp")


def test_compress_onestep_distils_the_ddim_sampler_into_two_steps(tiny_ckpt: Path, tmp_path: Path) -> None:
    """`ddim:5,onestep:2`: a DDIM 2-step U-Net trained toward the DDIM 5 samples on recorded frames, written
    as a DDIM 2 plan; a DDPM policy (stochastic, no one trajectory) is refused before any work."""
    data = tmp_path / "data"
    res = runner.invoke(
        app, ["record", "--task", "conveyor-pick", "--episodes", "1", "-o", str(data), "--quiet"]
    )
    assert res.exit_code == 0, res.output
    common = ["--data", str(data), "--backends", "eager", "--bench-iters", "2", "--eval-observations", "2",
              "--calibration-frames", "4", "--threads", "1", "--quiet"]  # fmt: skip
    res = runner.invoke(
        app, ["compress", str(tiny_ckpt), "--recipe", "onestep:2", "-o", str(tmp_path / "x"), *common]
    )
    assert res.exit_code == 2 and "put its DDIM sampler first, e.g. --recipe ddim:10,onestep:2" in res.output
    assert not (tmp_path / "x").exists()
    out, js = tmp_path / "o", tmp_path / "o.json"
    res = runner.invoke(
        app,
        ["compress", str(tiny_ckpt), "--recipe", "ddim:5,onestep:2", "-o", str(out), "--tolerance", "cos:0.01",
         "--distill-steps", "8", "--distill-batch", "4", "--distill-lr", "1e-3", "--json", str(js), *common],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    row = json.loads(js.read_text())["rows"][-1]
    assert row["step"] == "onestep:2" and row["num_steps"] == 2 and row["details"]["teacher_steps"] == 5
    assert row["details"]["chunk_mse_after"] < row["details"]["chunk_mse_before"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["noise_scheduler_type"] == "DDIM" and manifest["shape"]["num_steps"] == 2


# ---- the parity fixture ---------------------------------------------------------------------------------


def test_verify_passes_on_the_fixture_and_fails_below_its_rounding(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    ckpt = fixtures_dir / "lerobot-diffusion-tiny"
    js = tmp_path / "v.json"
    res = runner.invoke(app, ["verify", str(ckpt), "--json", str(js)])
    assert res.exit_code == 0, res.output
    rows = json.loads(js.read_text())["comparisons"]
    spaces = {c["space"] for c in rows}
    assert spaces == {"raw", "model", "stage"}
    by_name = {(c["name"], c["space"]): c for c in rows}
    assert by_name["actions", "model"]["max_abs"] <= 1e-5 and by_name["raw_actions", "raw"]["max_abs"] <= 1e-5
    assert by_name["observation.image", "raw"]["max_abs"] == 0.0
    stages = [c for c in rows if c["space"] == "stage"]
    assert len(stages) >= 25 and all(c["ok"] and c["tolerance"] == pytest.approx(3e-5) for c in stages)
    # Only the x0 prediction is judged through its gain; every other stage by its own max abs.
    assert [c["name"] for c in stages if c["judged_as"]] == ["pred_x0_per_step"]
    assert all(c["max_abs"] <= 3e-5 for c in stages if not c["judged_as"])
    # On the CPU that made the fixture this is bit for bit (max abs 0 everywhere), elsewhere within a few
    # last bits: a tolerance can only be too small for a reference that differs, here by 1e-6.
    ref = tmp_path / "ref"
    shutil.copytree(ckpt, ref)
    for f in ref.iterdir():
        f.chmod(0o644)
    np.save(ref / "actions.npy", np.load(ckpt / "actions.npy") + np.float32(1e-6))
    res = runner.invoke(app, ["verify", str(ckpt), "--reference", str(ref)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["verify", str(ckpt), "--reference", str(ref), "--tolerance", "1e-7"])
    assert res.exit_code == 1 and "OUTSIDE" in res.output


def test_a_reference_of_the_wrong_shape_exits_2_naming_file_and_key(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    ckpt = fixtures_dir / "lerobot-diffusion-tiny"
    ref = tmp_path / "ref"
    shutil.copytree(ckpt, ref)
    for f in ref.iterdir():
        f.chmod(0o644)
    with np.load(ckpt / "inputs.npz") as data:
        arrays = {k: data[k] for k in data.files}
    arrays["observation.state"] = arrays["observation.state"][:, :, :3]
    np.savez(ref / "inputs.npz", **arrays)
    (ref / "raw_inputs.npz").unlink()
    res = runner.invoke(app, ["verify", str(ckpt), "--reference", str(ref)])
    assert res.exit_code == 2, res.output
    assert "inputs.npz" in res.output and "'observation.state'" in res.output and "(2, 2, 3)" in res.output
    np.save(ref / "step_noise.npy", np.zeros((10, 2, 16, 3), np.float32))
    np.savez(ref / "inputs.npz", **{k: v for k, v in np.load(ckpt / "inputs.npz").items()})
    res = runner.invoke(app, ["verify", str(ckpt), "--reference", str(ref)])
    assert res.exit_code == 2 and "step_noise.npy" in res.output and "10 steps' noise" in res.output


def test_an_eager_artifact_of_the_fixture_verifies(fixtures_dir: Path, tmp_path: Path) -> None:
    ckpt = fixtures_dir / "lerobot-diffusion-tiny"
    art = tmp_path / "art"
    res = runner.invoke(
        app,
        ["compile", str(ckpt), "-o", str(art), "--budget-ms", "1e5", "--backends", "eager", "--precisions",
         "fp32", "--iters", "1", "--warmup", "0", "--threads", "1"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["verify", str(ckpt), "--artifact", str(art)])
    assert res.exit_code == 0, res.output
    assert "artifact" in res.output and "within" in res.output


def test_static_int8_calibrates_on_recorded_frames_and_falls_back_honestly(
    tiny_ckpt: Path, tmp_path: Path
) -> None:
    """Recorded conveyor-pick frames through the checkpoint's preprocessor (its own statistics) calibrate
    the static int8 candidates; each is judged like any other, and a stage keeps fp32 when int8 is slower
    or outside the tolerance."""
    from hotloop.datasets.recorder import record

    data = tmp_path / "rec"
    record("conveyor-pick", 2, data, seed=3)
    art, js = tmp_path / "art", tmp_path / "plan.json"
    res = runner.invoke(
        app,
        ["compile", str(tiny_ckpt), "-o", str(art), "--budget-ms", "1e5", "--calibration", str(data),
         "--calibration-frames", "4", "--precisions", "int8,fp32", "--backends", "onnxruntime", "--json",
         str(js), "--steps", "2", *FAST],
    )  # fmt: skip  # two DDPM steps: the loop engine's quantization grows faster than its unrolled nodes
    assert res.exit_code == 0, res.output
    plan = json.loads(js.read_text())
    int8 = [c for c in plan["candidates"] if c["precision"] == "int8"]
    assert {c["sub_engine"] for c in int8} == {"encoder", "denoise_step", "denoise_loop"}
    assert all(c["status"] in ("accepted", "rejected") for c in int8), [
        (c["sub_engine"], c["reason"]) for c in int8
    ]
    assert any(c["status"] == "accepted" for c in int8)
    for c in int8:
        if c["status"] == "rejected":
            assert "action cos" in c["reason"]
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["compression"]["calibration"]["frames"] == 4


def test_openvino_compiles_the_groupnorm_encoder_without_crashing(tiny_ckpt: Path, tmp_path: Path) -> None:
    """OpenVINO's CPU snippets crashed the process (SIGSEGV) on a GroupNorm ResNet block; the backend turns
    them off for such graphs. Run in a child, so a crash fails this test and not the suite. Two denoising
    steps: the encoder is what crashed, and OpenVINO unrolls the loop engine once per step."""
    import subprocess
    import sys

    art, js = tmp_path / "ov", tmp_path / "ov.json"
    child = subprocess.run(
        [sys.executable, "-m", "hotloop", "compile", str(tiny_ckpt), "-o", str(art), "--budget-ms", "1e5",
         "--backends", "eager,openvino", "--precisions", "fp32", "--steps", "2", "--json", str(js), *FAST],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-2000:]
    candidates = json.loads(js.read_text())["candidates"]
    encoder = [c for c in candidates if c["sub_engine"] == "encoder" and c["backend"] == "openvino"]
    assert encoder and all(c["status"] == "accepted" for c in encoder), encoder
