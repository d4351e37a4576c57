import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import ConfigError
from hotloop.perception.curve import CurvePoint, choose
from hotloop.perception.detector_data import render_frames
from hotloop.perception.learned_detector import DetectorConfig, DetectorModel, build_network
from hotloop.perception.onnx_detector import box_agreement

runner = CliRunner()


@pytest.fixture(scope="module")
def frames_file(tmp_path_factory):
    """Two episodes of labelled 32 px frames (cheap to render)."""
    path = tmp_path_factory.mktemp("frames") / "frames.npz"
    return render_frames([50_200, 50_201], size=32, progress=False).save(path)


def tiny_detector(folder):
    torch.manual_seed(0)
    DetectorModel(build_network(4), DetectorConfig(width=4, resolution=32, resolutions=(16, 32))).save(folder)
    return folder


def test_choose_picks_the_most_accurate_point_within_the_budget():
    def point(r, acc, p99):
        return CurvePoint(r, acc, {}, {"p50": p99 / 2, "p99": p99}, {"p50": p99 / 3, "p99": p99 / 1.5})

    points = [point(32, 0.7, 1.5), point(64, 0.85, 3.0), point(128, 0.9, 9.0)]
    assert choose(points, "iou", None).resolution == 128
    assert choose(points, "iou", 2.5).resolution == 64  # compiled p99 of 64 px: 2.0 ms; 128 px: 6.0 ms
    assert choose(points, "iou", 0.5) is None
    assert choose(points, "centre-mm", None).resolution == 32  # lower is better for centre error


def test_curve_of_a_detector_folder_writes_points_chosen_and_a_plot(tmp_path, frames_file):
    folder = tiny_detector(tmp_path / "det")
    out, plot = tmp_path / "c.json", tmp_path / "c.png"
    args = ["perception-curve", str(folder), "--data", str(frames_file), "--resolutions", "32,16"]
    args += ["--iters", "3", "--warmup", "0", "--json", str(out), "--plot", str(plot)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert [p["resolution"] for p in doc["points"]] == [16, 32]
    for p in doc["points"]:
        assert p["eager_ms"]["p50"] > 0 and p["compiled_ms"]["p99"] >= p["compiled_ms"]["p50"] > 0
        assert 0.0 <= p["details"]["iou"] <= 1.0 and p["details"]["frames"] > 0
        # ONNX Runtime runs the same network: its detections score the same as eager torch's.
        assert p["extra"]["compiled_accuracy"]["iou"] == pytest.approx(p["details"]["iou"], abs=0.02)
    assert doc["chosen"]["resolution"] in (16, 32) and plot.stat().st_size > 0
    r = runner.invoke(app, [*args[:4], "--resolutions", "16", "--iters", "2", "--budget-ms", "1e-6"])
    assert r.exit_code == 0 and "no resolution fits" in r.output


def test_curve_closed_loop_drives_the_policy_it_is_given(tmp_path, frames_file):
    folder = tiny_detector(tmp_path / "det")
    out = tmp_path / "c.json"
    args = [
        "perception-curve",
        str(folder),
        "--data",
        str(frames_file),
        "--resolutions",
        "16",
        "--iters",
        "2",
    ]
    args += ["--warmup", "0", "--episodes", "1", "--workers", "0", "--latency", "fixed:0"]
    r = runner.invoke(app, [*args, "--policy", "demo:conveyor-chain", "--json", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["closed_loop"] == {"policy": "demo:conveyor-chain", "latency": "fixed:0", "episodes": 1}
    (point,) = doc["points"]
    assert point["success_rate"] in (0.0, 1.0) and len(point["success_ci95"]) == 2


def test_curve_refuses_bad_input_before_any_work(tmp_path, frames_file):
    folder = tiny_detector(tmp_path / "det")
    for extra, words in (
        (["--resolutions", "30"], "steps of 4"),
        (["--resolutions", "32,x"], "'x' is not a whole number"),
        (["--metric", "map"], "--metric"),
        (["--int8", str(tmp_path / "p"), "--tolerance", "iou:2"], "(0, 1]"),
        (["--input", "x:1,3,32,32"], "--input and --images are for an ONNX"),
        (["--episodes", "1", "--policy", "demo:nope"], "--policy demo:nope: unknown target"),
    ):
        r = runner.invoke(app, ["perception-curve", str(folder), "--data", str(frames_file), *extra])
        assert r.exit_code == 2 and words in r.output, (extra, r.output)
    r = runner.invoke(app, ["perception-curve", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "is not a detector" in r.output


class MapNet(torch.nn.Module):
    """A tiny segmentation-like detector from outside hotloop: a probability map at the input's size."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv = torch.nn.Conv2d(3, 1, 3, padding=1)

    def forward(self, x):
        return torch.sigmoid(self.conv(x) * 4.0)


def export(path, dynamic):
    import warnings

    warnings.simplefilter("ignore")  # the legacy exporter's deprecation notes
    axes = {"x": {2: "h", 3: "w"}, "y": {2: "h", 3: "w"}} if dynamic else None
    torch.onnx.export(
        MapNet().eval(), (torch.zeros(1, 3, 32, 32),), str(path), input_names=["x"], output_names=["y"],
        dynamic_axes=axes, opset_version=17, dynamo=False,
    )  # fmt: skip
    return path


def test_curve_of_an_onnx_detector_is_agreement_with_its_native_output(tmp_path):
    from PIL import Image

    images = tmp_path / "img"
    images.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(images / f"{i}.png")
    model = export(tmp_path / "m.onnx", dynamic=True)
    out = tmp_path / "c.json"
    args = ["perception-curve", str(model), "--input", "x:1,3,32,32", "--images", str(images)]
    r = runner.invoke(
        app, [*args, "--resolutions", "16,32", "--iters", "3", "--warmup", "0", "--json", str(out)]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    native, low = {p["resolution"]: p for p in doc["points"]}[32], doc["points"][0]
    assert doc["output_kind"] == "map" and native["accuracy"] == 1.0  # the native run is the reference
    assert 0.0 < low["accuracy"] < 1.0 and low["eager_ms"] is None and low["compiled_ms"]["p50"] > 0
    # A fixed-shape model cannot take another size; an empty folder has nothing to score.
    fixed = export(tmp_path / "fixed.onnx", dynamic=False)
    r = runner.invoke(app, ["perception-curve", str(fixed), "--input", "x:1,3,32,32", "--images", str(images),
                            "--resolutions", "16,32"])  # fmt: skip
    assert r.exit_code == 2 and "--resolutions 16" in r.output
    empty = tmp_path / "empty"
    empty.mkdir()
    r = runner.invoke(app, ["perception-curve", str(model), "--input", "x:1,3,32,32", "--images", str(empty)])
    assert r.exit_code == 2 and "holds no images" in r.output
    r = runner.invoke(app, ["perception-curve", str(model), "--input", "x:3,32", "--images", str(images)])
    assert r.exit_code == 2 and "NAME:1,C,H,W" in r.output


def test_box_agreement_matches_boxes_in_native_pixels():
    ref = np.array([[[10.0, 10.0, 20.0, 20.0, 0.9], [30.0, 30.0, 40.0, 40.0, 0.8]]])
    half = ref.copy()
    half[..., :4] /= 2  # the same boxes found at half the resolution
    assert box_agreement(ref, half[:, ::-1], (2.0, 2.0)) == pytest.approx(1.0)
    shifted = half.copy()
    shifted[0, 0, [0, 2]] += 5.0  # one box off by its width at native scale
    assert box_agreement(ref, shifted, (2.0, 2.0)) == pytest.approx(0.5)
    assert box_agreement(ref, np.zeros((1, 0, 5)), (1.0, 1.0)) == 0.0


def test_int8_plan_falls_back_from_the_head_until_the_gate_holds(tmp_path, frames_file):
    from hotloop.perception.detector_data import load_frames
    from hotloop.perception.learned_detector import load_detector
    from hotloop.perception.quantize import parse_tolerance, quantize_detector
    from hotloop.sim.tasks.conveyor import BOX_HALF
    from hotloop.sim.tasks.gantry import BELT_TOP

    model = load_detector()  # the shipped demo:detector
    frames = load_frames(frames_file)
    gate = parse_tolerance("iou:1.0")  # bit-exact boxes: only float32 layers can promise that
    manifest = quantize_detector(model, 32, frames, frames, gate, tmp_path / "plan", BELT_TOP + BOX_HALF)
    convs = manifest["conv_layers"]
    attempts = manifest["attempts"]
    assert attempts[0]["fp32_layers"] == [] and attempts[0]["iou"] < 1.0  # all-int8 moves the boxes
    assert manifest["gate"]["passed"] and manifest["fp32_layers"][0] == convs[-1] == "/head/Conv"
    assert manifest["fp32_modules"][0] == "head"
    assert all(a["iou"] < 1.0 for a in attempts[:-1]) and attempts[-1]["iou"] == 1.0
    assert (tmp_path / "plan" / "model.onnx").is_file()
    with pytest.raises(ConfigError, match="centre-mm:X"):
        parse_tolerance("mm:3")


def test_curve_draws_the_int8_plan_beside_fp32(tmp_path, frames_file):
    out = tmp_path / "c.json"
    args = ["perception-curve", "demo:detector", "--data", str(frames_file), "--resolutions", "32"]
    args += ["--iters", "3", "--warmup", "0", "--int8", str(tmp_path / "plans"), "--tolerance", "iou:0.5"]
    r = runner.invoke(app, [*args, "--json", str(out)])
    assert r.exit_code == 0, r.output
    q = json.loads(out.read_text())["points"][0]["extra"]["int8"]
    assert q["gate"]["passed"] and q["gate"]["iou"] >= 0.5 and q["latency_ms"]["p50"] > 0
    assert q["speed_ratio_p50"] > 0 and 0.0 <= q["accuracy"] <= 1.0
    manifest = json.loads((tmp_path / "plans" / "32px" / "manifest.json").read_text())
    assert manifest["speed"]["interleaved"] and manifest["tolerance"] == "iou:0.5"
    # The plan runs in the chain's perception layer (ONNX Runtime at its own 32 px) like the float32 one.
    from hotloop.perception.detector_data import load_frames
    from hotloop.perception.pipeline import make_detector, parse_pipeline

    frames = load_frames(frames_file)
    i = int(np.flatnonzero(frames.visible & frames.on_belt)[0])
    plan = make_detector(
        parse_pipeline(f"detector:model={tmp_path / 'plans' / '32px'}"), frames.camera, 0.062
    )
    fp32 = make_detector(parse_pipeline("detector:model=learned,resolution=32"), frames.camera, 0.062)
    a, b = plan.detect(frames.images[i]).position, fp32.detect(frames.images[i]).position
    assert a is not None and b is not None and np.linalg.norm(a - b) < 0.01
    with pytest.raises(ConfigError, match="built for 32 px"):
        make_detector(
            parse_pipeline(f"detector:model={tmp_path / 'plans' / '32px'},resolution=48"),
            frames.camera,
            0.062,
        )
