"""`hotloop compress` on the learned box detector: the int8 plan through the policy's entry point."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.compress.recipe import EXIT_TOLERANCE
from hotloop.perception.learned_detector import PLAN_KIND, load_any

runner = CliRunner()
QUICK = ["--resolution", "32", "--bench-iters", "3", "--calibration-frames", "8", "--quiet"]


@pytest.mark.slow  # an int8 compile and closed-loop episodes: ~25 s
def test_compress_writes_a_gated_int8_plan_the_chain_runs_and_judges_it_in_closed_loop(tmp_path):
    out, report = tmp_path / "plan", tmp_path / "r.json"
    args = ["compress", "demo:detector", "--recipe", "quantize", "-o", str(out), *QUICK]
    args += ["--episodes", "2", "--eval-latency", "fixed:50", "--json", str(report)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest == json.loads(report.read_text())
    assert manifest["kind"] == PLAN_KIND and manifest["precision"] == "int8" and manifest["resolution"] == 32
    assert manifest["tolerance"] == "iou:0.85"  # a detector's default gate, in its own terms
    assert manifest["gate"]["passed"] and manifest["gate"]["iou"] >= 0.85 and manifest["gate"]["frames"] > 100
    assert manifest["calibration"]["frames"] == 8
    speed = manifest["speed"]
    assert speed["interleaved"] and speed["iterations"] == 3
    assert speed["ratio_p50"] == pytest.approx(speed["fp32_ms"]["p50"] / speed["int8_ms"]["p50"])
    assert 0.0 < manifest["accuracy"]["iou"] <= 1.0
    loop = manifest["closed_loop"]
    assert loop["policy"] == "demo:conveyor-chain" and loop["latency"] == "fixed:50"
    assert loop["fp32"]["completed"] == loop["int8"]["completed"] == 2 and loop["paired"]["pairs"] == 2
    assert "int8 plan at 32 px" in r.output and f"--pipeline detector:model={out}" in r.output
    plan = load_any(out)  # what --pipeline detector:model=DIR loads: ONNX Runtime at the plan's size
    assert plan.config.resolution == 32
    assert plan.run(np.zeros((1, 3, 32, 32), np.float32)).shape[:2] == (1, 5)


def test_a_gate_no_int8_layer_keeps_stops_with_the_float32_plan_written(tmp_path):
    out = tmp_path / "plan"
    args = ["compress", "demo:detector", "--recipe", "quantize", "-o", str(out), *QUICK]
    r = runner.invoke(app, [*args, "--tolerance", "centre-mm:0.0001"])  # only float32 is that exact
    assert r.exit_code == EXIT_TOLERANCE, r.output
    assert "stopped: no int8 layer kept centre-mm:0.0001" in r.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["precision"] == "float32" and manifest["fp32_modules"][0] == "head"
    assert manifest["fp32_layers"] == manifest["conv_layers"][::-1]  # from the head back, every one
    assert (out / "model.onnx").is_file()  # the passing (float32) plan is kept


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--recipe", "prune:0.25,quantize"], "--recipe prune:0.25,quantize"),
        (["--recipe", "quantize", "--tolerance", "cos:0.99"], "--tolerance 'cos:0.99'"),
        (["--recipe", "quantize", "--resolution", "30"], "--resolution"),
        (["--recipe", "quantize", "--calibration-frames", "0"], "--calibration-frames"),
        (["--recipe", "quantize", "--episodes", "2", "--eval-latency", "fixed:-1"], "fixed:-1"),
        (["--recipe", "quantize", "--plot", "p.png"], "perception-curve"),
        (["--recipe", "quantize", "--data", "nowhere"], "--data nowhere"),
    ],
)
def test_bad_detector_compress_input_is_one_line_exit_2_before_any_work(tmp_path, monkeypatch, extra, named):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["compress", "demo:detector", "-o", "plan", *extra])
    assert r.exit_code == 2, r.output
    assert named in r.output
    assert not (tmp_path / "plan").exists()


def test_resolution_is_refused_for_a_policy_target(tmp_path):
    r = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "quantize", "--resolution", "64", "-o", str(tmp_path / "b")],
    )
    assert r.exit_code == 2 and "--resolution is for a detector target" in r.output
    assert not (tmp_path / "b").exists()
