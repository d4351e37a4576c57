"""Every quantized backend precision on pi05:tiny: all three stages quantized, final actions within a
stated tolerance of fp32; protected and planned fp32 layers really stay fp32; the artifact loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from hotloop.compile.backends import get_backend
from hotloop.compile.calibration import CalibrationSpec, load_calibration, open_dataset
from hotloop.compile.calibration_inputs import capture_inputs
from hotloop.compile.sources import load_target
from hotloop.compile.validate import compare_actions
from hotloop.families.pi.engines import PiEngineShape, PiPipeline, build_pi_subengines, constants_of

# Final-action cosine against fp32 on a held calibration frame, all stages quantized. Measured on
# pi05:tiny: >= 0.999 for every int8 mode, ~0.99 for int4 groups of 32.
TOLERANCE = {"int8": 0.995, "int8-dynamic": 0.995, "int8-weight": 0.995, "int4-weight": 0.97}
MODES = [
    ("onnxruntime", "int8"),
    ("onnxruntime", "int8-dynamic"),
    ("openvino", "int8"),
    ("openvino", "int8-dynamic"),
    ("openvino", "int4-weight"),
    ("eager", "int8-dynamic"),
    ("eager", "int8-weight"),
]
STAGES = ("vision", "prefix", "denoise_step")
# NNCF + OpenVINO conversion costs tens of seconds per graph on a shared 2-core machine: the OpenVINO
# modes quantize the expert (the stage whose error the integrator accumulates), the rest stay eager fp32.
OPENVINO_STAGES = ("denoise_step",)


@pytest.fixture(scope="module")
def tiny(recorded: Path):  # type: ignore[no-untyped-def]
    model, adapter = load_target("pi05:tiny", open_dataset(recorded))
    calib = load_calibration(recorded, adapter, CalibrationSpec(count=12))
    cfg = model.cfg
    shape = PiEngineShape.of(cfg)
    engines = build_pi_subengines(model, shape, torch.float32)
    from hotloop.families import get_family
    from hotloop.families.protocol import PolicySource

    source = PolicySource("pi05:tiny", get_family("pi"), model, shape, None, torch.zeros(1))
    captured = capture_inputs(source, engines, calib, observations=8)
    obs = calib.batch([len(calib) - 1])
    noise = torch.randn(1, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(3))
    ref = PiPipeline.eager(cfg, shape, engines).sample(obs, noise).clone()
    return cfg, shape, engines, captured, obs, noise, ref


def _pipeline(tiny, backend: str, precision: str, fp32_layers: list[str] | None = None):  # type: ignore[no-untyped-def]
    cfg, shape, engines, captured, *_ = tiny
    runners = {}
    for stage in STAGES:
        options = {"calibration": captured[stage]}
        if fp32_layers is not None:
            options["fp32_layers"] = fp32_layers
        if backend == "openvino" and stage not in OPENVINO_STAGES:
            runners[stage] = get_backend("eager").prepare(engines[stage], "fp32", {})
            continue
        runners[stage] = get_backend(backend).prepare(engines[stage], precision, options)
    sigs = {n: e.signature for n, e in engines.items()}
    return PiPipeline(cfg, shape, runners, constants_of(engines), sigs), runners


@pytest.mark.parametrize(("backend", "precision"), MODES)
def test_mode_stays_within_tolerance(tiny, backend: str, precision: str) -> None:  # type: ignore[no-untyped-def]
    *_, obs, noise, ref = tiny
    pipe, runners = _pipeline(tiny, backend, precision)
    got = pipe.sample(obs, noise)
    agreement = compare_actions(ref, got)
    assert agreement.cosine >= TOLERANCE[precision], agreement
    assert not torch.equal(ref, got)  # it did quantize something
    for runner in runners.values():
        assert "calibration" not in getattr(runner, "options", {})  # runtime data never saved


def test_protected_and_planned_layers_stay_fp32_in_onnx(tiny) -> None:  # type: ignore[no-untyped-def]
    import onnx

    _, runners = _pipeline(tiny, "onnxruntime", "int8-dynamic", fp32_layers=["blocks.1.down_proj"])
    graph = onnx.load(str(runners["denoise_step"].model_path)).graph
    by_name = {n.name: n.op_type for n in graph.node}
    assert by_name["/action_out_proj/MatMul"] == "MatMul"  # protected: fp32
    assert by_name["/blocks.1/down_proj/MatMul"] == "MatMul"  # planned fp32
    assert any(n.op_type == "MatMulInteger" and "blocks.0/down_proj" in n.name for n in graph.node)


def test_static_int8_without_calibration_says_how(tiny) -> None:  # type: ignore[no-untyped-def]
    from hotloop.compile.backends.base import BackendError

    _, _, engines, *_ = tiny
    with pytest.raises(BackendError, match="--calibration DIR"):
        get_backend("openvino").prepare(engines["vision"], "int8", {})


@pytest.mark.slow
def test_compressed_artifact_loads_in_engine(recorded: Path, tmp_path: Path) -> None:
    from hotloop.cli import app
    from hotloop.runtime.engine import Engine

    plan = tmp_path / "sens.json"
    plan.write_text(
        json.dumps({"mixed_precision": {"fp32_layers": {"denoise_step": ["blocks.1.down_proj"]}}})
    )
    out = tmp_path / "art"
    args = ["compile", "pi05:tiny", "-o", str(out), "--budget-ms", "100000", "--backends", "onnxruntime"]
    args += ["--precisions", "int8", "--variants", "plain", "--iters", "1", "--warmup", "0", "--quiet"]
    args += ["--threads", "1", "--calibration", str(recorded), "--calibration-frames", "8"]
    # Two flow-matching steps: ONNX Runtime's static quantizer takes time faster than linear in the
    # unrolled loop's nodes, and nothing here depends on the count.
    args += ["--mixed-plan", str(plan), "--tolerance", "cos:0.99", "--steps", "2"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["compression"]["calibration"]["frames"] == 8
    assert len(manifest["compression"]["calibration"]["sha256"]) == 64
    pp = manifest["precision_plan"]
    assert {e["precision"] for e in pp.values()} == {"int8"}
    # The planner picks the per-step engine or the unrolled loop by measurement; the step engine, when
    # chosen, must carry the plan's fp32 layer (indexing it unconditionally failed whenever the loop won).
    assert "denoise_step" in pp or "denoise_loop" in pp
    if "denoise_step" in pp:
        assert pp["denoise_step"]["fp32_layers"] == ["blocks.1.down_proj"]
    engine = Engine.load(out)
    actions = engine.infer(engine.example_observation(), torch.zeros(1, 10, 32))
    assert actions.shape == (1, 10, 32) and bool(torch.isfinite(actions).all())
    assert set(engine.describe()["plan"].values()) == {"onnxruntime int8"}


def test_int8_without_calibration_is_refused(tmp_path: Path) -> None:
    from hotloop.cli import app

    res = CliRunner().invoke(
        app, ["compile", "pi05:tiny", "-o", str(tmp_path / "a"), "--budget-ms", "10", "--precisions", "int8"]
    )
    assert res.exit_code == 2 and "--calibration DIR" in res.output
    assert not (tmp_path / "a").exists()


@pytest.mark.slow  # NNCF calibration at three prompt buckets: ~40 s
def test_a_static_int8_plan_gets_its_prompt_buckets_calibrated_at_their_shapes(
    recorded: Path, tmp_path: Path
) -> None:
    """Static int8 prefix and denoise engines are calibrated on the full prompt's activations; a bucket
    is calibrated again at its own shapes (it used to be skipped), passes the plan's tolerance, and the
    engine runs a short prompt in it. Two flow-matching steps: OpenVINO unrolls the loop engine (and NNCF
    quantizes it) once per step, and nothing here depends on the count."""
    from hotloop.cli import app
    from hotloop.runtime.engine import Engine

    out, js = tmp_path / "art", tmp_path / "c.json"
    args = ["compile", "pi05:tiny", "-o", str(out), "--budget-ms", "100000", "--backends", "openvino"]
    args += ["--precisions", "int8", "--variants", "plain", "--iters", "1", "--warmup", "0", "--quiet"]
    args += ["--threads", "1", "--calibration", str(recorded), "--calibration-frames", "8"]
    args += ["--tolerance", "cos:0.9", "--buckets", "8", "--steps", "2", "--json", str(js)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    result = json.loads(js.read_text())
    assert result["prompt_buckets"] == [8, 12]
    assert [b["bucket"] for b in result["buckets"]] == [8] and result["buckets"][0]["action_cos"] >= 0.9
    manifest = json.loads((out / "manifest.json").read_text())
    by_name = {e["name"]: e for e in manifest["sub_engines"]}
    assert by_name["prefix@8"]["precision"] == "int8" and by_name["prefix@8"]["backend"] == "openvino"
    # All OpenVINO: a lean artifact, its token embedding stored as int8 rows (the prefix's precision).
    assert manifest["layout"] == "lean" and "weights.safetensors" not in manifest["files"]
    engine = Engine.load(out, threads=1, warmup=0)
    assert (
        engine.model is None and engine.pipeline.pipelines[8].constants["token_embedding"].dtype == torch.int8
    )
    actions = engine.infer(engine.example_observation(prompt_tokens=3), torch.zeros(1, 10, 32))
    assert engine.pipeline.last_bucket == 8 and bool(torch.isfinite(actions).all())
