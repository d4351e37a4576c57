"""The planner's memory check: a candidate whose estimated growth exceeds what is available is marked
unavailable with the figures, never prepared, and the plan goes on with what fits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hotloop.compile import memory_fit
from hotloop.compile.memory_fit import estimated_need, refusal, weight_bytes


def test_weight_bytes_counts_shared_storage_once() -> None:
    lin = torch.nn.Linear(10, 10)
    both = torch.nn.ModuleList([lin, lin])
    assert weight_bytes(both) == weight_bytes(lin) == (100 + 10) * 4
    half = torch.nn.Linear(10, 10).to(torch.bfloat16)
    assert weight_bytes(half) == (100 + 10) * 2


def test_the_unrolled_loop_is_charged_once_per_step_on_openvino_only() -> None:
    module = torch.nn.Linear(1024, 1024)
    w = weight_bytes(module)
    step = estimated_need("openvino", "bf16", module)
    loop = estimated_need("openvino", "bf16", module, loop_steps=10)
    assert loop.bytes - memory_fit.FIXED_OVERHEAD == pytest.approx(
        10 * (step.bytes - memory_fit.FIXED_OVERHEAD), rel=1e-6
    )
    assert "10 unrolled steps" in loop.why
    eager = estimated_need("eager", "bf16", module, loop_steps=10, new_copy_bytes=w // 2)
    assert eager.bytes == w // 2 + memory_fit.FIXED_OVERHEAD and "model copy" in eager.why
    assert refusal(step, step.bytes + memory_fit.RESERVE) is None
    reason = refusal(loop, loop.bytes - 1)
    assert reason is not None and "GiB available" in reason and "--backends" in reason


def test_planner_skips_what_cannot_fit_and_plans_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compile_tiny
) -> None:
    # Room for what shares the model's weights (eager fp32) and nothing that copies or compiles them.
    monkeypatch.setattr(
        memory_fit, "available_bytes", lambda: memory_fit.FIXED_OVERHEAD + memory_fit.RESERVE + 1
    )
    out, js = tmp_path / "art", tmp_path / "c.json"
    res = compile_tiny(out, "eager,openvino", "fp32,bf16", "--quiet", "--json", str(js))
    assert res.exit_code == 0, res.output
    result = json.loads(js.read_text())
    by_status: dict[str, list[dict]] = {}
    for c in result["candidates"]:
        by_status.setdefault(c["status"], []).append(c)
    assert {(c["backend"], c["precision"]) for c in by_status["accepted"]} == {("eager", "fp32")}
    skipped = by_status["unavailable"]
    assert {(c["backend"], c["precision"]) for c in skipped} == {
        ("eager", "bf16"),
        ("openvino", "fp32"),
        ("openvino", "bf16"),
    }
    # openvino bf16 is also unavailable, for its own reason, on a CPU without native bf16.
    assert all(
        "GiB available: not tried" in c["reason"] or "has no native bf16" in c["reason"] for c in skipped
    )
    assert sum("GiB available: not tried" in c["reason"] for c in skipped) >= 2
    assert all(v["backend"] == "eager" for v in result["plan"].values())


@pytest.mark.slow  # a whole OpenVINO compile under a squeezed memory budget: ~25 s
def test_a_stage_that_leaves_no_room_is_released_and_the_artifact_keeps_every_weight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compile_tiny
) -> None:
    """Room runs out once the vision stage is compiled: the planner saves the weights, releases the fp32
    vision weights (its reference becomes the compiled vision engine), finishes the plan without timing
    the reference, and the artifact still reproduces the reference's actions."""
    import hotloop
    from hotloop.compile.artifact import sha256_state_dict
    from hotloop.compile.sources import policy_source
    from hotloop.compile.validate import compare_actions
    from hotloop.families.pi.sampling import sample_actions
    from hotloop.targets import TargetOptions

    state = {"calls": 0, "released": False}
    real_release = memory_fit.release_module_weights

    def release(module, keep):
        state["released"] = True
        return real_release(module, keep)

    def available() -> int:
        state["calls"] += 1
        low = state["calls"] >= 3 and not state["released"]  # from the first prefix candidate on
        return 0 if low else 1 << 50

    monkeypatch.setattr(memory_fit, "available_bytes", available)
    monkeypatch.setattr(memory_fit, "release_module_weights", release)
    out, js = tmp_path / "art", tmp_path / "c.json"
    # two flow-matching steps: OpenVINO unrolls the loop engine once per step; the release does not care
    res = compile_tiny(out, "openvino", "fp32", "--json", str(js), "--steps", "2")
    assert res.exit_code == 0, res.output
    assert "released the fp32 vision weights" in res.output and "reference not timed" in res.output
    # An OpenVINO plan is written lean: the weights' hash is kept, the weights are not saved first.
    assert "saving the fp32 weights" not in res.output
    result = json.loads(js.read_text())
    assert result["released_for_memory"] == ["vision"]
    assert result["reference_latency_ms"] is None and result["speedup_p50"] is None
    assert all(c["status"] == "accepted" for c in result["candidates"])
    src = policy_source("pi05:tiny", TargetOptions(num_steps=2))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source_weights_sha256"] == sha256_state_dict(src.model.state_dict())
    engine = hotloop.Engine.load(out, threads=1)
    want = sample_actions(src.model, src.obs, noise=src.noise)
    assert compare_actions(want, engine.infer(src.obs, src.noise)).cosine >= 0.99999


def test_a_stage_with_nothing_that_fits_is_one_error_line_naming_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compile_tiny
) -> None:
    monkeypatch.setattr(memory_fit, "available_bytes", lambda: 0)
    out = tmp_path / "art"
    res = compile_tiny(out, "openvino", "fp32", "--quiet")
    assert res.exit_code == 2, res.output
    assert "no candidate for stage vision was accepted" in res.output and "unavailable" in res.output
    assert "Traceback" not in res.output and not out.exists()


def test_under_pressure_a_finished_stage_keeps_its_fastest_and_most_accurate_runners() -> None:
    """Before any fp32 weights are released, a finished stage drops the runners the whole-plan check can do
    without: of its five precisions' runners, the fastest and the most accurate stay."""
    from hotloop.compile.plan import _keep_two_runners
    from hotloop.compile.planner import Candidate
    from hotloop.compile.validate import ActionAgreement
    from hotloop.measure.stats import LatencyStats

    figures = {"int4-weight": (10.0, 0.990), "int8": (12.0, 0.999), "int8-dynamic": (15.0, 0.998),
               "bf16": (20.0, 0.9999), "fp32": (40.0, 1.0)}  # fmt: skip
    cands = []
    for precision, (ms, cos) in figures.items():
        c = Candidate("vision", "vision", "openvino", precision, status="accepted")
        c.latency, c.action = LatencyStats.from_samples([ms]), ActionAgreement(cos, 0.0, 0.0)
        c.runner = torch.nn.Identity()  # what the planner holds: any object that keeps memory alive
        cands.append(c)
    other = Candidate("prefix", "prefix", "openvino", "int8", status="accepted", runner=torch.nn.Identity())
    assert _keep_two_runners([*cands, other], "vision")
    assert {c.precision for c in cands if c.runner is not None} == {"int4-weight", "fp32"}
    assert other.runner is not None  # another stage is not touched
    assert not _keep_two_runners([*cands, other], "vision")  # nothing more to drop


def test_plan_memory_gb_caps_what_planning_may_hold(tmp_path: Path, compile_tiny) -> None:
    """`--plan-memory-gb` bounds the headroom by the limit less this process's resident set: under a
    limit nothing fits beside the process, every candidate is refused naming the flag (exit 2, nothing
    written); a bad value is one line before any work, for compile and compress alike."""
    from typer.testing import CliRunner

    from hotloop.cli import app
    from hotloop.compile.memory_fit import GIB, available_bytes, headroom
    from hotloop.process_memory import resident_bytes

    limit = resident_bytes() / GIB + 2
    assert abs(headroom(limit) - 2 * GIB) < 0.25 * GIB or headroom(limit) == available_bytes()
    assert headroom(None) == pytest.approx(available_bytes(), rel=0.1)
    out = tmp_path / "art"
    res = compile_tiny(
        out, "openvino", "fp32", "--quiet", "--plan-memory-gb", f"{resident_bytes() / GIB + 0.5:.2f}"
    )
    assert res.exit_code == 2, res.output
    assert (
        "no candidate for stage vision was accepted" in res.output and "under --plan-memory-gb" in res.output
    )
    assert not out.exists()
    for command in (
        ["compile", "pi05:tiny", "--budget-ms", "10"],
        ["compress", "pi05:tiny", "--recipe", "quantize"],
    ):
        res = CliRunner().invoke(app, [*command, "-o", str(out), "--plan-memory-gb", "0"])
        assert res.exit_code == 2 and "--plan-memory-gb must be > 0 (got 0.0)" in res.output, res.output
        assert not out.exists()
