"""`hotloop compile` on pi05:tiny end to end: the artifact round trip, every refusal on load, the
planner's rejections and exit codes, bad input (exit 2, nothing written), and ONNX-file targets."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import CheckpointError

runner = CliRunner()
FAST = ["--iters", "1", "--warmup", "0", "--quiet", "--threads", "1"]


def _compile(out: Path, *args: str, variants: str = "plain") -> object:
    return runner.invoke(app, ["compile", "pi05:tiny", "-o", str(out), *FAST, "--variants", variants, *args])


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("art")
    out, js = root / "art", root / "compile.json"
    res = _compile(
        out,
        "--budget-ms",
        "100000",
        "--backends",
        "eager,onnxruntime",
        "--precisions",
        "fp32",
        "--json",
        str(js),
        variants="fused",  # the folded/fused recipe round-trips (the runtime tests load a plain one)
    )
    assert res.exit_code == 0, res.output
    return out, json.loads(js.read_text())


def test_json_keys_and_candidate_table(art: tuple[Path, dict]) -> None:
    _, result = art
    for key in (
        "target",
        "budget_ms",
        "tolerance",
        "candidates",
        "plan",
        "reference_latency_ms",
        "plan_latency_ms",
        "speedup_p50",
        "speedup_p99",
        "action_cos_min",
        "budget_met",
    ):
        assert key in result
    assert set(result["plan"]) == {"vision", "prefix", "denoise"}
    statuses = {(c["sub_engine"], c["backend"], c["precision"]): c["status"] for c in result["candidates"]}
    assert statuses[("vision", "eager", "fp32")] == "accepted"
    assert statuses[("prefix", "onnxruntime", "fp32")] == "accepted"
    assert result["action_cos_min"] >= 0.995 and result["budget_met"]


def test_round_trip_engine_reproduces_sample_actions(art: tuple[Path, dict]) -> None:
    import hotloop
    from hotloop.compile.sources import policy_source
    from hotloop.compile.validate import compare_actions
    from hotloop.families.pi.sampling import sample_actions
    from hotloop.targets import TargetOptions

    out, _ = art
    manifest = json.loads((out / "manifest.json").read_text())
    # Every plan records its precision per sub-engine; only compressed plans carry a `compression` entry.
    assert {e["precision"] for e in manifest["precision_plan"].values()} == {"fp32"}
    assert manifest["compression"] is None
    # A plan that runs from its own files only is written lean: no source weights, only what runs.
    from hotloop.compile.backends import FILE_BACKENDS

    lean = manifest.get("layout") == "lean"
    assert lean == all(e["backend"] in FILE_BACKENDS for e in manifest["sub_engines"])
    assert manifest["source_weights_sha256"] and ("weights.safetensors" in manifest["files"]) != lean
    assert manifest["machine"]["class"]["arch"]
    engine = hotloop.Engine.load(out, threads=1)
    src = policy_source("pi05:tiny", TargetOptions())
    want = sample_actions(src.model, src.obs, noise=src.noise)
    got = engine.infer(src.obs, src.noise)
    assert compare_actions(want, got).cosine >= 0.99999
    assert torch.equal(engine.submit(src.obs, src.noise).result(), got)


@pytest.fixture
def copy(art: tuple[Path, dict], tmp_path: Path) -> Path:
    dest = tmp_path / "copy"
    shutil.copytree(art[0], dest)
    return dest


def _edit_manifest(folder: Path, **changes: object) -> None:
    m = json.loads((folder / "manifest.json").read_text())
    m.update(changes)
    (folder / "manifest.json").write_text(json.dumps(m))


def test_changed_file_is_refused_by_name(copy: Path) -> None:
    from hotloop.compile.artifact import read_manifest

    graph = next(p for p in copy.rglob("*.onnx"))
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{graph.name}: sha256 does not match"):
        read_manifest(copy)


def test_truncated_weights_are_refused_by_name(copy: Path) -> None:
    from hotloop.compile.artifact import read_manifest

    manifest = json.loads((copy / "manifest.json").read_text())
    name = manifest["weights"] or manifest["lookups"]["token_embedding"]  # a lean artifact's largest table
    weights = copy / name
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=f"{name}: sha256"):
        read_manifest(copy)


def test_other_hotloop_version_is_refused(copy: Path) -> None:
    from hotloop.compile.artifact import read_manifest

    _edit_manifest(copy, hotloop_version="0.0.1")
    with pytest.raises(CheckpointError, match="compiled by hotloop 0.0.1"):
        read_manifest(copy)


def test_missing_cpu_feature_is_refused_by_name_or_replanned(copy: Path) -> None:
    import hotloop
    from hotloop.compile.artifact import read_manifest

    m = json.loads((copy / "manifest.json").read_text())
    m["sub_engines"][1]["requires_cpu_features"] = ["amx_bf16"]
    (copy / "manifest.json").write_text(json.dumps(m))
    from hotloop.compile.cpu_features import cpu_flags

    if "amx_bf16" in cpu_flags():
        pytest.skip("this CPU has AMX")
    with pytest.raises(CheckpointError, match="needs CPU feature amx_bf16"):
        read_manifest(copy)
    if m.get("layout") == "lean":  # the plan ran from its own files only: no source weights to re-plan from
        with pytest.raises(CheckpointError, match="lean artifact holds only what runs"):
            hotloop.Engine.load(copy, replan=True, threads=1, warmup=0)
        return
    engine = hotloop.Engine.load(copy, replan=True, threads=1, warmup=0)
    assert engine.path.name == "copy-replanned"


def test_other_machine_class_is_refused(copy: Path) -> None:
    from hotloop.compile.artifact import read_manifest

    m = json.loads((copy / "manifest.json").read_text())
    m["machine"]["class"] = {"arch": "x86_64", "isa": ["amx_bf16", "avx512f"]}
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CheckpointError, match="machine class"):
        read_manifest(copy)


def test_deterministic_mode_repeats_itself(art: tuple[Path, dict]) -> None:
    import hotloop

    engine = hotloop.Engine.load(art[0], threads=1, warmup=0, deterministic=True)
    try:
        obs = engine.example_observation()
        first = engine.infer(obs).clone()
        assert torch.equal(engine.infer(obs), first)
    finally:
        torch.use_deterministic_algorithms(False)  # a process-wide torch switch: restore it for other tests


def test_input_validation_names_the_input(art: tuple[Path, dict]) -> None:
    import hotloop
    from hotloop.errors import ConfigError

    engine = hotloop.Engine.load(art[0], threads=1, warmup=0)
    obs = engine.example_observation()
    good = {f: getattr(obs, f) for f in ("images", "image_masks", "lang_tokens", "lang_masks", "state")}
    cases = {
        "images": (good["images"] * 3, "spans"),
        "lang_tokens": (good["lang_tokens"] + 10**6, "outside"),
        "state": (torch.full_like(good["state"], float("nan")), "NaN"),
        "image_masks": (good["image_masks"].float(), "dtype"),
        "lang_masks": (good["lang_masks"][:, :3], "shape"),
    }
    for name, (value, why) in cases.items():
        with pytest.raises(ConfigError, match=f"input '{name}'.*{why}|{why}.*'{name}'"):
            engine.infer({**good, name: value})
    with pytest.raises(ConfigError, match="unknown input"):
        engine.infer({**good, "camera": good["images"]})


def test_rejected_candidate_says_why_and_unmet_budget_exits_3(tmp_path: Path) -> None:
    out, js = tmp_path / "a", tmp_path / "c.json"
    # cos:1 cannot be met by bf16; a 1 microsecond budget by anything.
    res = _compile(
        out, "--budget-ms", "0.001", "--tolerance", "cos:1", "--backends", "eager", "--json", str(js)
    )
    assert res.exit_code == 3, res.output
    result = json.loads(js.read_text())
    bf16 = [c for c in result["candidates"] if c["precision"] == "bf16"]
    assert bf16 and all(c["status"] == "rejected" and "action cos" in c["reason"] for c in bf16)
    assert not result["budget_met"] and (out / "manifest.json").is_file()  # the best plan is still written


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--budget-ms", "0"], "--budget-ms"),
        (["--budget-ms", "10", "--tolerance", "cosine"], "--tolerance"),
        (["--budget-ms", "10", "--backends", "openvinoo"], "--backends"),
        (["--budget-ms", "10", "--precisions", "int3"], "--precisions"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, args: list[str], needle: str) -> None:
    out = tmp_path / "a"
    res = _compile(out, *args)
    assert res.exit_code == 2 and needle in res.output, res.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def _linear_onnx(path: Path) -> Path:
    from hotloop.compile.backends.base import OnnxGraph
    from hotloop.compile.export import export_onnx

    torch.manual_seed(0)
    graph = OnnxGraph("lin", path, (torch.randn(2, 8),), ("x",), ("y",))
    graph.module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    return export_onnx(graph, path)


def test_onnx_file_target(tmp_path: Path) -> None:
    import hotloop

    model = _linear_onnx(tmp_path / "m.onnx")
    out = tmp_path / "art"
    res = runner.invoke(
        app,
        [
            "compile",
            str(model),
            "--input",
            "x:2,8",
            "-o",
            str(out),
            "--budget-ms",
            "1000",
            "--backends",
            "onnxruntime,openvino",
            "--iters",
            "2",
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    engine = hotloop.Engine.load(out, warmup=1)
    x = torch.randn(2, 8)
    y = engine.infer({"x": x})["y"]
    assert y.shape == (2, 4) and torch.isfinite(y).all()


@pytest.mark.parametrize(
    "inputs, needle",
    [(["x:2,9"], "does not match the model's shape"), (["y:2,8"], "missing x"), (["x"], "malformed")],
)
def test_onnx_bad_input_exits_2(tmp_path: Path, inputs: list[str], needle: str) -> None:
    model = _linear_onnx(tmp_path / "m.onnx")
    out = tmp_path / "art"
    args = [a for spec in inputs for a in ("--input", spec)]
    res = runner.invoke(app, ["compile", str(model), *args, "-o", str(out), "--budget-ms", "10", "--quiet"])
    assert res.exit_code == 2 and needle in res.output, res.output
    assert not out.exists()


def test_unparsable_onnx_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    res = runner.invoke(
        app, ["compile", str(bad), "--input", "x:1", "-o", str(tmp_path / "a"), "--budget-ms", "10"]
    )
    assert res.exit_code == 2 and "not a valid ONNX model" in res.output, res.output
    assert not (tmp_path / "a").exists()


def _dynamic_fpn_onnx(path: Path) -> Path:
    """A small feature-pyramid net exported with dynamic batch, height and width (as detectors ship):
    its Resize takes its size from a shape computed at run time."""
    import torch.nn.functional as F

    class Fpn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
            self.head = torch.nn.Conv2d(16, 1, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = F.relu(self.c1(x))
            up = F.interpolate(F.relu(self.c2(a)), size=a.shape[-2:], mode="nearest")
            return torch.sigmoid(self.head(torch.cat([a, up], 1)))

    torch.manual_seed(0)
    dims = {0: "n", 2: "h", 3: "w"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Fpn().eval(), (torch.randn(1, 3, 64, 64),), str(path), input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": dims, "y": dims}, opset_version=17,
                          dynamo=False)  # fmt: skip
    return path


def test_onnx_dynamic_axes_take_the_stated_shape_on_openvino(tmp_path: Path) -> None:
    """OpenVINO could not compile the dynamic graph ("to_shape was called on a dynamic shape"); the shape
    --input states is applied to it. No --budget-ms: the fastest plan within tolerance. eager and inductor
    (PyTorch backends) are left out for a file, not listed as failed."""
    import hotloop

    model = _dynamic_fpn_onnx(tmp_path / "fpn.onnx")
    out, js = tmp_path / "art", tmp_path / "plan.json"
    res = runner.invoke(
        app,
        ["compile", str(model), "--input", "x:1,3,96,128", "-o", str(out), "--json", str(js), "--iters", "2",
         "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    result = json.loads(js.read_text())
    status = {(c["backend"], c["precision"]): c["status"] for c in result["candidates"]}
    assert status[("openvino", "fp32")] == "accepted", result["candidates"]
    assert not {b for b, _ in status} & {"eager", "inductor"}
    assert result["budget_ms"] is None and result["budget_met"] is None
    assert "no --budget-ms" in " ".join(res.output.split())
    y = hotloop.Engine.load(out, warmup=1).infer({"x": torch.rand(1, 3, 96, 128)})["y"]
    assert y.shape == (1, 1, 48, 64) and torch.isfinite(y).all()


def test_onnx_file_with_only_pytorch_backends_is_refused(tmp_path: Path) -> None:
    model = _linear_onnx(tmp_path / "m.onnx")
    res = runner.invoke(
        app,
        [
            "compile",
            str(model),
            "--input",
            "x:2,8",
            "-o",
            str(tmp_path / "a"),
            "--backends",
            "eager,inductor",
        ],
    )
    assert res.exit_code == 2 and "an ONNX file runs on onnxruntime, openvino or tensorrt" in res.output
    assert not (tmp_path / "a").exists()


def _calibration_folder(folder: Path) -> Path:
    """Smooth images (what a camera gives, unlike white noise) as PNG files, and one .npy stack."""
    from PIL import Image

    folder.mkdir()
    gen = torch.Generator().manual_seed(1)
    for k in range(6):
        low = torch.rand(1, 3, 6, 8, generator=gen)
        img = torch.nn.functional.interpolate(low, size=(96, 128), mode="bilinear", align_corners=False)
        pixels = (img[0].permute(1, 2, 0).numpy() * 255).astype("uint8")
        Image.fromarray(pixels).save(folder / f"frame{k}.png")
    import numpy as np

    np.save(folder / "more.npy", torch.rand(2, 1, 3, 96, 128, generator=gen).numpy())
    return folder


def test_onnx_static_int8_from_a_folder_of_images_and_arrays(tmp_path: Path) -> None:
    """--calibration on an ONNX file: static int8 candidates are calibrated on the folder's inputs and
    every candidate is judged on its held-out samples; the artifact names the data."""
    model = _dynamic_fpn_onnx(tmp_path / "fpn.onnx")
    calib = _calibration_folder(tmp_path / "calib")
    out, js = tmp_path / "art", tmp_path / "plan.json"
    res = runner.invoke(
        app,
        ["compile", str(model), "--input", "x:1,3,96,128", "-o", str(out), "--json", str(js), "--iters", "2",
         "--precisions", "fp32,int8", "--backends", "onnxruntime,openvino", "--calibration", str(calib),
         "--tolerance", "cos:0.9", "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    result = json.loads(js.read_text())
    int8 = {c["backend"]: c for c in result["candidates"] if c["precision"] == "int8"}
    assert set(int8) == {"onnxruntime", "openvino"}
    for cand in int8.values():  # prepared from the calibration data and judged, not refused
        assert cand["status"] in ("accepted", "rejected"), cand
        assert cand["outputs"] and 0.9 < cand["outputs"][0]["cosine"] < 1.0, cand
    assert result["checked_on"] == "2 held-out calibration samples"  # 8 samples: every fourth held out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["calibration"]["samples"] == 6 and len(manifest["calibration"]["sha256"]) == 64


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda d: None, "no .npz, .npy or image files"),
        (lambda d: __import__("numpy").save(d / "a.npy", __import__("numpy").zeros((1, 3, 8, 8))), "a.npy: shape"),
        (lambda d: (d / "b.png").write_bytes(b"not an image"), "not a readable image"),
        (lambda d: __import__("numpy").savez(d / "c.npz", y=__import__("numpy").zeros((1, 3, 96, 128))),
         "no array named x"),
    ],
)  # fmt: skip
def test_onnx_calibration_bad_folder_exits_2(tmp_path: Path, make: object, needle: str) -> None:
    model = _dynamic_fpn_onnx(tmp_path / "fpn.onnx")
    calib = tmp_path / "calib"
    calib.mkdir()
    make(calib)  # type: ignore[operator]
    out = tmp_path / "art"
    res = runner.invoke(
        app,
        ["compile", str(model), "--input", "x:1,3,96,128", "-o", str(out), "--precisions", "fp32,int8",
         "--calibration", str(calib), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 2 and needle in " ".join(res.output.split()), res.output
    assert not out.exists()
