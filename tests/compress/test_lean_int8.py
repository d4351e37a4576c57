"""OpenVINO static int8 by hotloop's lean quantizer (`hotloop.compile.backends.lean_int8`), on pi05:tiny: the
graph runs int8 matmuls within the int8 tolerance of fp32, stores int8 weight rows and no fp32 copy of the
quantized linears, leaves protected layers float, loads back from its files with the same outputs; the
planner takes it only when NNCF's quantization would not fit the memory left."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from hotloop.compile.backends import get_backend
from hotloop.compile.backends.base import BackendError, PreparedFiles
from hotloop.compile.backends.lean_int8 import FLOAT_PRECISION, LEAN, QUANTIZER, quantized_linears
from hotloop.compile.calibration import CalibrationSpec, load_calibration, open_dataset
from hotloop.compile.calibration_inputs import capture_inputs
from hotloop.compile.sources import load_target
from hotloop.compile.validate import compare_actions, compare_outputs
from hotloop.families.pi.engines import PiEngineShape, PiPipeline, build_pi_subengines, constants_of

STAGES = ("prefix", "denoise_step")  # the stages with most of pi's linears; vision stays eager fp32


@pytest.fixture(scope="module")
def tiny(recorded: Path):  # type: ignore[no-untyped-def]
    from hotloop.families import get_family
    from hotloop.families.protocol import PolicySource

    model, adapter = load_target("pi05:tiny", open_dataset(recorded))
    calib = load_calibration(recorded, adapter, CalibrationSpec(count=10))
    shape = PiEngineShape.of(model.cfg)
    engines = build_pi_subengines(model, shape, torch.float32)
    source = PolicySource("pi05:tiny", get_family("pi"), model, shape, None, torch.zeros(1))
    captured = capture_inputs(source, engines, calib, observations=8)
    obs = calib.batch([len(calib) - 1])
    noise = torch.randn(
        1, model.cfg.chunk_size, model.cfg.max_action_dim, generator=torch.Generator().manual_seed(3)
    )
    ref = PiPipeline.eager(model.cfg, shape, engines).sample(obs, noise).clone()
    return model, shape, engines, captured, obs, noise, ref


def _constants(model):  # type: ignore[no-untyped-def]
    return [op for op in model.get_ops() if op.get_type_name() == "Constant"]


def _weighted_matmuls(model) -> list[str]:  # type: ignore[no-untyped-def]
    """Names of the linears' MatMuls whose weight is a float constant (through a Convert of stored fp16)."""
    import openvino as ov

    out = []
    for op in model.get_ops():
        if op.get_type_name() != "MatMul" or "/aten::linear/" not in op.get_friendly_name():
            continue
        w = op.input_value(1).get_node()
        if w.get_type_name() == "Convert":
            w = w.input_value(0).get_node()
        if w.get_type_name() == "Constant" and w.get_element_type() in (ov.Type.f32, ov.Type.f16):
            out.append(op.get_friendly_name())
    return out


def _lean(tiny, stage: str):  # type: ignore[no-untyped-def]
    _, _, engines, captured, *_ = tiny
    # "probe": as the planner prepares an OpenVINO candidate, compiled from its saved file (what ships).
    options = {"calibration": captured[stage], QUANTIZER: LEAN, "threads": 1, "probe": True}
    return get_backend("openvino").prepare(engines[stage], "int8", options)


def test_lean_int8_plan_keeps_the_actions_and_quantizes_every_linear(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import openvino as ov

    model, shape, engines, captured, obs, noise, ref = tiny
    runners = {n: get_backend("eager").prepare(e, "fp32", {}) for n, e in engines.items() if n not in STAGES}
    runners.update({stage: _lean(tiny, stage) for stage in STAGES})
    sigs = {n: e.signature for n, e in engines.items()}
    got = PiPipeline(model.cfg, shape, runners, constants_of(engines), sigs).sample(obs, noise)
    agreement = compare_actions(ref, got)
    assert agreement.cosine >= 0.995, agreement  # the int8 tolerance test_quantize holds NNCF to
    assert not torch.equal(ref, got)

    bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    backend = get_backend("openvino")
    for stage in STAGES:
        runner = runners[stage]
        assert "calibration" not in runner.options and runner.options[QUANTIZER] == LEAN
        assert (runner.options.get(FLOAT_PRECISION) == "bf16") == bf16
        assert bool(backend.required_features("int8", runner.options)) == bf16
        prepared = runner.save(tmp_path / stage)
        saved = ov.Core().read_model(str(tmp_path / stage / "model.xml"))
        get_backend("openvino").prepare(engines[stage], "fp32", {}).save(tmp_path / f"{stage}-fp32")
        plain = ov.Core().read_model(str(tmp_path / f"{stage}-fp32" / "model.xml"))
        linears = set(_weighted_matmuls(plain))
        quantized = {
            f"__module.{n}/aten::linear/MatMul" for n in quantized_linears(engines[stage].module, ())
        }
        int8_weights = [op for op in _constants(saved) if op.get_element_type() == ov.Type.i8]
        # Every linear the graph runs is int8 but the protected ones; nothing else holds int8 rows.
        assert len(int8_weights) == len(linears & quantized) > 0
        assert len([op for op in saved.get_ops() if op.get_type_name() == "FakeQuantize"]) == len(
            int8_weights
        )
        # No fp32 copy of a quantized linear's weight is stored beside its int8 rows.
        assert set(_weighted_matmuls(saved)) == linears - quantized
        # Loaded back from its files, as Engine.load does: the same outputs.
        files = PreparedFiles(prepared.files, {**prepared.options, "threads": 1})
        loaded = backend.load(engines[stage], "int8", tmp_path / stage, files)
        inputs = list(captured[stage][0])
        for a in compare_outputs(engines[stage].output_names, runner(*inputs), loaded(*inputs)):
            assert a.cosine > 0.99999, a


def test_protected_and_planned_layers_stay_float(tiny) -> None:  # type: ignore[no-untyped-def]
    _, _, engines, *_ = tiny
    module = engines["denoise_step"].module
    names = set(quantized_linears(module, ["blocks.1"]))
    assert names and not any(n.rsplit(".", 1)[-1] == "action_out_proj" for n in names)
    assert not any(n.startswith("blocks.1.") for n in names)
    assert any(n.startswith("blocks.0.") for n in names)


def test_the_lean_quantizer_says_what_it_cannot_do(tiny) -> None:  # type: ignore[no-untyped-def]
    _, _, engines, captured, *_ = tiny
    options = {"calibration": captured["prefix"], QUANTIZER: LEAN}
    with pytest.raises(BackendError, match="static int8 only, not int8-dynamic"):
        get_backend("openvino").prepare(engines["prefix"], "int8-dynamic", options)
    with pytest.raises(BackendError, match="--calibration DIR"):
        get_backend("openvino").prepare(engines["prefix"], "int8", {QUANTIZER: LEAN})


@pytest.mark.slow  # two int8 compiles of pi05:tiny (NNCF and the lean quantizer): ~45 s
def test_the_planner_takes_the_lean_quantizer_only_where_nncf_does_not_fit(
    recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With memory for the lean quantizer but not NNCF at the prefix (pi05:tiny's largest stage), the
    prefix is quantized lean; the artifact records it, loads and stays within tolerance."""
    from typer.testing import CliRunner

    import hotloop
    from hotloop.cli import app
    from hotloop.compile import memory_fit
    from hotloop.compile.memory_fit import (
        FIXED_OVERHEAD,
        INT8_GROWTH,
        LEAN_INT8_GROWTH,
        RESERVE,
        weight_bytes,
    )
    from hotloop.compile.sources import policy_source
    from hotloop.families.pi.sampling import sample_actions
    from hotloop.targets import TargetOptions

    src = policy_source("pi05:tiny", TargetOptions(num_steps=2))
    engines = build_pi_subengines(src.model, src.shape, torch.float32)
    sizes = {n: weight_bytes(e.module) for n, e in engines.items()}
    assert max(sizes, key=sizes.__getitem__) == "prefix"
    between = (INT8_GROWTH + LEAN_INT8_GROWTH) / 2 * sizes["prefix"]
    assert all(INT8_GROWTH * w < between for n, w in sizes.items() if n in ("vision", "denoise_step"))
    monkeypatch.setattr(memory_fit, "available_bytes", lambda: int(between) + FIXED_OVERHEAD + RESERVE)
    out, js = tmp_path / "art", tmp_path / "c.json"
    args = ["compile", "pi05:tiny", "-o", str(out), "--budget-ms", "1e5", "--backends", "openvino"]
    args += ["--precisions", "int8", "--variants", "plain", "--iters", "1", "--warmup", "0", "--threads", "1"]
    args += ["--calibration", str(recorded), "--calibration-frames", "8", "--steps", "2", "--json", str(js)]
    args += ["--tolerance", "cos:0.99"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "quantized in place by hotloop's lean quantizer" in res.output
    manifest = json.loads((out / "manifest.json").read_text())
    by_name = {e["name"]: e for e in manifest["sub_engines"]}
    assert by_name["prefix"]["options"][QUANTIZER] == LEAN
    assert by_name["vision"]["options"].get(QUANTIZER) is None  # NNCF fitted there
    engine = hotloop.Engine.load(out, threads=1, warmup=0)
    want = sample_actions(src.model, src.obs, noise=src.noise)
    assert compare_actions(want, engine.infer(src.obs, src.noise)).cosine >= 0.99
    # The timing cache keeps the lean prefix under a key of its own: with memory enough for NNCF, the
    # same compile finds every candidate timed before but the NNCF prefix (the lean timing is not NNCF's).
    monkeypatch.setattr(memory_fit, "available_bytes", lambda: 64 * 2**30)
    again = CliRunner().invoke(app, [a if a != str(out) else str(tmp_path / "art2") for a in args])
    assert again.exit_code == 0, again.output
    assert "lean quantizer" not in again.output
    held = re.search(r"timing cache: (\d+) of (\d+) candidates timed here before", again.output)
    assert held is not None, again.output
    assert int(held.group(1)) == int(held.group(2)) - 1, held.group(0)
