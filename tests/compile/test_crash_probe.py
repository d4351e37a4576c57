"""A native crash in a planner candidate refuses that candidate and the planner goes on.

`run_isolated` is checked on real crashes (a NULL read through ctypes: SIGSEGV; SIGFPE raised by the
process on itself), an exception, a success and a hang. The planner is checked on OpenVINO bf16 at one
thread, which OpenVINO 2026.4 crashes (SIGFPE at compile) on a CPU with AMX for every gated MLP."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hotloop.compile.crash_probe import ProbeFailure, run_isolated


def _segfault() -> None:
    ctypes.string_at(0)


def _fpe() -> None:
    os.kill(os.getpid(), signal.SIGFPE)


def test_a_crashing_call_is_a_probe_failure_naming_the_signal_and_the_caller_lives_on() -> None:
    for fn, name in ((_segfault, "SIGSEGV"), (_fpe, "SIGFPE")):
        with pytest.raises(ProbeFailure, match=f"graph x crashed a probe process \\({name}\\)") as info:
            run_isolated(fn, "graph x")
        assert info.value.signal_name == name
    assert run_isolated(lambda: None, "fine") >= 0.0  # this process still runs, and so do its probes


def test_an_exception_is_left_to_the_callers_own_call_and_a_hang_is_cut_off() -> None:
    def raises() -> None:
        raise ValueError("the caller's own call says this")

    assert run_isolated(raises, "raises") >= 0.0
    t0 = time.perf_counter()
    with pytest.raises(ProbeFailure, match="did not finish in 1 s") as info:
        run_isolated(lambda: time.sleep(30), "a hang", timeout_s=1.0)
    assert info.value.signal_name is None and time.perf_counter() - t0 < 10


def test_openvino_bf16_at_one_thread_is_refused_not_fatal(tmp_path: Path) -> None:
    """The compile process survives whatever OpenVINO does with bf16 at one thread, writes a plan, and
    names each crashed candidate in one line. On a CPU with AMX (OpenVINO 2026.4) the prefix's gated MLP
    crashes the plugin: that candidate must be the refused one."""
    import openvino as ov

    from hotloop.cli import app
    from hotloop.compile.cpu_features import cpu_flags

    out, js = tmp_path / "art", tmp_path / "c.json"
    args = ["compile", "pi05:tiny", "-o", str(out), "--budget-ms", "100000", "--backends", "openvino,eager"]
    args += ["--precisions", "bf16", "--variants", "plain", "--iters", "1", "--warmup", "0", "--quiet"]
    args += ["--threads", "1", "--json", str(js), "--force", "--max-load", "1000"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (0, 3), res.output  # 3: the budget, not a crash
    assert (out / "manifest.json").is_file()
    by_label = {(c["sub_engine"], c["backend"]): c for c in json.loads(js.read_text())["candidates"]}
    crashed = {k for k, c in by_label.items() if "crashed a probe process" in c["reason"]}
    for key in crashed:
        assert by_label[key]["status"] == "failed" and key[0] != "eager", by_label[key]
    if "amx_bf16" in cpu_flags() and ov.get_version().startswith("2026.4"):
        assert ("prefix", "openvino") in crashed, by_label[("prefix", "openvino")]
        assert "(SIGFPE) with INFERENCE_NUM_THREADS=1" in by_label[("prefix", "openvino")]["reason"]


def test_loading_a_plan_at_threads_that_crash_openvino_is_one_line_exit_2(tmp_path: Path) -> None:
    """A first load compiles each OpenVINO graph in a probe process (it exports the blob the engine then
    imports): a bf16 plan made at 2 threads and loaded at 1 on a CPU with AMX (OpenVINO 2026.4) is one
    line naming the graph, the signal and --threads, exit 2, not a dead process; elsewhere it loads."""
    import openvino as ov

    from hotloop.cli import app
    from hotloop.compile.cpu_features import cpu_flags

    out, js = tmp_path / "art", tmp_path / "c.json"
    bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    args = ["compile", "pi05:tiny", "-o", str(out), "--budget-ms", "100000", "--backends", "openvino"]
    args += [
        "--precisions",
        "bf16" if bf16 else "fp32",
        "--variants",
        "plain",
        "--iters",
        "1",
        "--warmup",
        "0",
    ]
    args += ["--threads", "2", "--steps", "2", "--json", str(js), "--force", "--max-load", "1000", "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (0, 3), res.output
    plan = json.loads((out / "manifest.json").read_text())["precision_plan"]
    res = CliRunner().invoke(
        app, ["bench", str(out), "--threads", "1", "--iters", "1", "--warmup", "0", "--quiet"]
    )
    crashes = "amx_bf16" in cpu_flags() and ov.get_version().startswith("2026.4")
    if crashes and plan["prefix"]["precision"] == "bf16":
        assert res.exit_code == 2, res.output
        line = res.output.strip()
        assert "'prefix'" in line and "crashed a probe process (SIGFPE)" in line and "--threads" in line
        assert len(line.splitlines()) == 1
    else:
        assert res.exit_code == 0, res.output
