from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.compress.recipe import STEPS, parse_recipe
from hotloop.errors import ConfigError

runner = CliRunner()
FAST = ["--calibration-frames", "2", "--eval-observations", "2", "--bench-iters", "2", "--backends", "eager",
        "--threads", "1", "--quiet"]  # fmt: skip


def test_unknown_step_exits_2_listing_the_known_steps(tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["compress", "pi05:tiny", "--recipe", "prune,quantise", "-o", str(tmp_path / "a")]
    )
    assert res.exit_code == 2
    assert "unknown step 'quantise'" in res.output and "did you mean 'quantize'" in res.output
    for name in STEPS:
        assert name in res.output
    assert not (tmp_path / "a").exists()


def test_bad_step_arguments_are_refused() -> None:
    with pytest.raises(ConfigError, match="steps:4"):
        parse_recipe("steps:fast")
    with pytest.raises(ConfigError, match="takes no argument"):
        parse_recipe("quantize:int8")
    assert [s.label for s in parse_recipe("prune:0.25, distill,steps:4")] == [
        "prune:0.25",
        "distill",
        "steps:4",
    ]


def test_recipe_writes_an_artifact_the_engine_loads(tmp_path: Path) -> None:
    from hotloop.runtime.engine import Engine

    out = tmp_path / "art"
    res = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "prune:0.5,sparse24,steps:5", "--tolerance", "cos:0.5", "-o", str(out),
         "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png"), *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    comp = manifest["compression"]
    assert comp["applied"] == ["prune:0.5", "sparse24", "steps:5"] and comp["num_steps"] == 5
    assert comp["parameters"] < comp["teacher_parameters"]
    assert comp["sparsity"]["pattern"] == "2:4"
    assert [h["step"] for h in comp["history"]] == ["reference", "prune:0.5", "sparse24", "steps:5"]
    assert {"vision", "prefix"} <= set(manifest["precision_plan"]) and len(manifest["precision_plan"]) == 3
    engine = Engine.load(out, warmup=1)
    assert engine.shape.num_steps == 5 and engine.cfg.expert.mlp_dim == 32
    assert engine.infer(engine.example_observation()).shape[-1] == engine.cfg.max_action_dim
    assert (tmp_path / "r.png").stat().st_size > 0


def test_a_step_that_breaks_the_tolerance_exits_3_keeping_the_best(tmp_path: Path) -> None:
    out = tmp_path / "art"
    res = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "steps:1", "--tolerance", "cos:0.999", "-o", str(out), *FAST],
    )
    assert res.exit_code == 3, res.output
    assert "steps:1 broke the tolerance" in res.output
    comp = json.loads((out / "manifest.json").read_text())["compression"]
    assert comp["applied"] == [] and comp["num_steps"] == 10  # the reference is what passed
    assert comp["stopped"].startswith("step steps:1")


def test_bad_values_fail_before_any_work(tmp_path: Path) -> None:
    for flags, message in (
        (["--tolerance", "cosine"], "--tolerance"),
        (["--eval-latency", "soon"], "soon"),
        (["--backends", "eager,tpu"], "tpu"),
        (["--data", str(tmp_path / "none")], "--data"),
        (["--distill-batch", "0"], "--distill-batch must be >= 1"),
        (["--distill-episodes", "-1"], "--distill-episodes must be >= 0"),
        (["--distill-target", "labels"], "--distill-target 'labels' is unknown"),
        (["--buckets", "32,x"], "cannot read --buckets '32,x'"),
    ):
        res = runner.invoke(
            app, ["compress", "pi05:tiny", "--recipe", "steps:4", "-o", str(tmp_path / "a"), *flags]
        )
        assert res.exit_code == 2, (flags, res.output)
        assert message in res.output, (flags, res.output)
    assert not (tmp_path / "a").exists()


def test_step_distill_bad_counts_exit_2_before_any_work(tmp_path: Path, compress_refuses) -> None:
    """N >= the teacher's steps (10, or an earlier steps:M), N <= 0, a missing --data: one `error:` line
    naming the flag, exit 2, neither the artifact nor its work folder written."""
    for recipe, extra, message in (
        ("step-distill:10", [], "--recipe step-distill:10: the student must take fewer steps than the teacher's 10"),
        ("step-distill:12", [], "fewer steps than the teacher's 10"),
        ("steps:3,step-distill:3", [], "--recipe step-distill:3: the student must take fewer steps than the teacher's 3"),
        ("step-distill:0", [], "--recipe step-distill:0: give a positive step count"),
        ("step-distill:-2", [], "--recipe step-distill:-2: give a positive step count"),
        ("step-distill", [], "--recipe step-distill: give a positive step count"),
        ("step-distill:4", ["--data", str(tmp_path / "none")], "--data"),
    ):  # fmt: skip
        compress_refuses("pi05:tiny", recipe, message, *extra, *FAST)


def test_qat_then_quantize_on_recorded_episodes(recorded: Path, tmp_path: Path) -> None:
    """`qat:N` fine-tunes with fake int8 on the recording (its eval loss is reported and finite), then
    `quantize` plans int8 for the fine-tuned weights; the artifact records both and loads."""
    from hotloop.runtime.engine import Engine

    out = tmp_path / "art"
    res = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "qat:3,quantize", "--data", str(recorded), "--distill-batch", "2",
         "--calibration-frames", "4", "--eval-observations", "2", "--bench-iters", "2", "--backends", "eager",
         "--threads", "1", "--quiet", "--tolerance", "cos:0.5", "-o", str(out), "--json", str(tmp_path / "r.json")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert [r["step"] for r in rows] == ["reference", "qat:3", "quantize"]
    qat = rows[1]["details"]
    assert qat["steps_done"] == 3 and qat["resumed_from"] == 0 and qat["mode"] == "int8"
    assert all(math.isfinite(v) for v in (qat["eval_loss_before"], qat["eval_loss_after"], *qat["losses"]))
    assert rows[1]["action"]["cosine"] < 1.0  # the fine-tuned weights are not the teacher's
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["compression"]["applied"] == ["qat:3", "quantize"]
    # quantize calibrated static int8 on the same recording
    assert manifest["compression"]["quantization"]["calibration"]["frames"] == 4
    Engine.load(out, warmup=1)


def test_qat_without_data_and_a_bad_mixed_plan_exit_2_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "a"
    bad_plan = tmp_path / "plan.json"
    bad_plan.write_text('{"no": "plan"}')
    for recipe, extra, message in (
        ("qat,quantize", [], "--recipe qat trains on recorded episodes: give --data DIR"),
        ("qat:0", [], "--recipe qat:0: give a positive step count"),
        ("quantize", ["--mixed-plan", str(bad_plan)], f"--mixed-plan {bad_plan} is not a `hotloop sensitivity"),
    ):  # fmt: skip
        res = runner.invoke(app, ["compress", "pi05:tiny", "--recipe", recipe, "-o", str(out), *extra, *FAST])
        assert res.exit_code == 2, (recipe, res.output)
        assert message in res.output, (recipe, res.output)
        assert not out.exists() and not (tmp_path / ".a.work").exists(), recipe


@pytest.mark.parametrize(("flag", "expected"), [(None, "teacher actions"), ("data", "recorded actions")])
def test_distill_pulls_toward_the_teachers_chunks_unless_told_data(
    recorded: Path, tmp_path: Path, flag: str | None, expected: str
) -> None:
    """The tolerance judges agreement with the teacher, so recovery distils toward the teacher's own
    chunks by default; the recorded actions are used only with --distill-target data."""
    out = tmp_path / "art"
    extra = ["--distill-target", flag] if flag else []
    res = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "prune:0.5,distill", "--data", str(recorded), "--distill-steps", "2",
         "--distill-batch", "2", "--calibration-frames", "4", "--eval-observations", "2", "--bench-iters", "2",
         "--backends", "eager", "--threads", "1", "--quiet", "--tolerance", "cos:0.01", "-o", str(out),
         "--json", str(tmp_path / "r.json"), *extra],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert rows[2]["step"] == "distill" and rows[2]["details"]["targets"] == expected


def test_the_compile_step_writes_prompt_buckets_for_a_quantized_plan(recorded: Path, tmp_path: Path) -> None:
    """`--buckets` reaches the recipe's compile step: static int8 prefix and denoise engines are prepared
    (and calibrated) once more for the short prompt, and the judged artifact runs them. ONNX Runtime: its
    static int8 is a few times cheaper to prepare than OpenVINO's (whose bucket calibration is
    test_quantize's). Two flow-matching steps first: the quantizer's cost grows with the unrolled loop's
    nodes (faster than linearly), and nothing here depends on the count."""
    out = tmp_path / "art"
    res = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "quantize,compile", "--data", str(recorded), "--buckets", "8",
         "--calibration-frames", "4", "--eval-observations", "2", "--bench-iters", "2", "--backends",
         "onnxruntime", "--threads", "1", "--quiet", "--tolerance", "cos:0.9", "-o", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["prompt_buckets"] == [8, 12]
    names = {e["name"]: e for e in manifest["sub_engines"]}
    for key in ("precision", "backend"):
        assert names["prefix@8"][key] == names["prefix"][key], (key, names)


@pytest.mark.slow  # about 30 CPU-s: a whole compress recipe over five OpenVINO precisions
def test_quantize_compile_plans_straight_on_the_backend(recorded: Path, tmp_path: Path) -> None:
    """`quantize,compile --backends openvino`: one planning pass on OpenVINO's own graphs (static int8,
    int8 weights, int4 weights, bf16, fp32 per stage), never eager torch; a precision that misses the
    tolerance is rejected and its stage falls back; the compile row reuses the plan; the reference row
    is the teacher in memory (no artifact of it written); the result is a lean artifact. One thread: on a
    CPU with AMX, OpenVINO bf16 crashes the process there, which the planner survives. The teacher's own
    weights and steps: the planner takes the recipe's reference actions instead of sampling them again."""
    out, js = tmp_path / "art", tmp_path / "r.json"
    res = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "quantize,compile", "--data", str(recorded),
         "--calibration-frames", "4", "--eval-observations", "2", "--bench-iters", "2", "--backends", "openvino",
         "--threads", "1", "--quiet", "--tolerance", "cos:0.995", "-o", str(out), "--json", str(js)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    report = json.loads(js.read_text())
    rows = report["rows"]
    assert [r["step"] for r in rows] == ["reference", "quantize", "compile"]
    assert rows[0]["latency_source"].startswith("the fp32 teacher in memory") and rows[0]["candidates"] == []
    quantize, compile_ = rows[1], rows[2]
    assert compile_["details"] == {"planned_with": "quantize"} and report["kept_step"] == "compile"
    assert compile_["precision_plan"] == quantize["precision_plan"]
    assert {p["backend"] for p in quantize["precision_plan"].values()} == {"openvino"}
    searched = quantize["candidates"]
    assert {c["candidate"].split(":")[2] for c in searched} == {"openvino"}  # no eager candidate at all
    precisions = {c["candidate"].split(":")[3].split("[")[0] for c in searched}
    assert precisions == {"int8", "int8-dynamic", "int4-weight", "bf16", "fp32"}
    # Static int8 is tried before int8-dynamic in every stage: at full size an accepted int8-dynamic runner
    # left no memory for the (faster) static one.
    for stage in {c["candidate"].split(":")[0] for c in searched}:
        order = [
            c["candidate"].split(":")[3].split("[")[0]
            for c in searched
            if c["candidate"].startswith(stage + ":")
        ]
        if "int8" in order and "int8-dynamic" in order:
            assert order.index("int8") < order.index("int8-dynamic"), order
    # The per-stage gate: every candidate outside cos 0.995 is rejected by name, none of them is planned
    # (on pi05:tiny the step engine's int4 weights, at 0.993: the stage falls back to another precision).
    gated = [c for c in searched if c["action_cos"] is not None and c["action_cos"] < 0.995]
    assert gated and all(c["status"] == "rejected" and "0.995" in c["reason"] for c in gated), gated
    crashed = [c for c in searched if "crashed a probe process" in c["reason"]]
    assert all(c["status"] == "failed" and ":bf16" in c["candidate"] for c in crashed), crashed
    assert quantize["action"]["cosine"] >= 0.995
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["layout"] == "lean" and manifest["compression"]["applied"] == ["quantize", "compile"]
    capture = manifest["memory"]["planning"]["calibration"]
    assert len(capture) == 1 and 0 < capture[0]["held_mb"] <= capture[0]["estimated_mb"]
