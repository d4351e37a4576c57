"""A native crash in a planner candidate refuses that candidate and the planner goes on.

`run_child` is checked on real crashes (a NULL read through ctypes: SIGSEGV; SIGFPE raised by the
process on itself), an exception, a success and a hang; the OpenVINO probe's child on a real graph. The
planner is checked on OpenVINO bf16 at one thread, which OpenVINO 2026.4 crashes (SIGFPE at compile) on
a CPU with AMX for every gated MLP."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hotloop.compile.crash_probe import ProbeFailure, run_child


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_crashing_call_is_a_probe_failure_naming_the_signal_and_the_caller_lives_on() -> None:
    segfault = "import ctypes; ctypes.string_at(0)"
    fpe = "import os, signal; os.kill(os.getpid(), signal.SIGFPE)"
    for code, name in ((segfault, "SIGSEGV"), (fpe, "SIGFPE")):
        with pytest.raises(ProbeFailure, match=f"graph x crashed a probe process \\({name}\\)") as info:
            run_child(_python(code), "graph x")
        assert info.value.signal_name == name
    assert run_child(_python("pass"), "fine") >= 0.0  # this process still runs, and so do its probes


def test_an_exception_is_left_to_the_callers_own_call_and_a_hang_is_cut_off() -> None:
    assert run_child(_python("raise ValueError('the caller says this')"), "raises") >= 0.0
    t0 = time.perf_counter()
    with pytest.raises(ProbeFailure, match="did not finish in 1 s") as info:
        run_child(_python("import time; time.sleep(30)"), "a hang", timeout_s=1.0)
    assert info.value.signal_name is None and time.perf_counter() - t0 < 10


def _relu_graph(folder: Path) -> Path:
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 8], np.float32)
    weight = ops.constant(np.eye(8, dtype=np.float32))
    model = ov.Model([ops.relu(ops.matmul(x, weight, False, False))], [x])
    ov.save_model(model, str(folder / "g.xml"), compress_to_fp16=False)
    return folder / "g.xml"


def test_the_openvino_probe_child_is_a_fresh_interpreter_that_exports_the_blob(tmp_path: Path) -> None:
    """The child compiles and runs the saved graph, exports the compiled blob the parent imports, and says
    by its exit status when OpenVINO raised. It imports neither torch nor hotloop: a fork of a process
    that ran OpenVINO can hang on the TBB state it copied (CI saw one hang for 30 minutes)."""
    import numpy as np

    from hotloop.compile.backends import openvino as backend

    xml = _relu_graph(tmp_path)
    np.savez(tmp_path / "in.npz", **{"0": np.ones((1, 8), np.float32)})
    child = Path(backend.__file__).with_name("openvino_probe_child.py")
    blobs = tmp_path / "blobs"
    spec = {"xml": str(xml), "config": {"CACHE_DIR": str(blobs)}, "inputs": str(tmp_path / "in.npz")}
    (tmp_path / "ok.json").write_text(json.dumps(spec))
    import subprocess

    def run(spec_file: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-P", "-X", "importtime", str(child), str(spec_file)]
        return subprocess.run(argv, check=False, capture_output=True, text=True)

    ok = run(tmp_path / "ok.json")
    assert ok.returncode == 0, ok.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in ok.stderr.splitlines() if "|" in line}
    assert "openvino" in imported and not {m.split(".")[0] for m in imported} & {"torch", "hotloop"}
    assert any(p.suffix == ".blob" for p in blobs.iterdir())
    (tmp_path / "bad.json").write_text(json.dumps({**spec, "xml": str(tmp_path / "missing.xml")}))
    assert run(tmp_path / "bad.json").returncode == 3


def test_the_planners_compile_imports_the_probes_blob_and_gives_the_same_outputs(tmp_path: Path) -> None:
    """A planner's candidate is compiled once in the probe's child and imported here, after this process
    has already run OpenVINO (the case a fork could hang on): same outputs as an unprobed compile."""
    import openvino as ov
    import torch

    from hotloop.compile.backends.base import OnnxGraph
    from hotloop.compile.backends.openvino import OpenVinoRunner

    model = ov.Core().read_model(str(_relu_graph(tmp_path)))
    x = torch.linspace(-1, 1, 8).reshape(1, 8)
    graph = OnnxGraph(name="g", path=tmp_path / "g.xml", example_inputs=(x,), input_names=(), output_names=())
    plain = OpenVinoRunner(graph, "fp32", model.clone(), {"threads": 1})
    for threads in (1, 2):
        probed = OpenVinoRunner(graph, "fp32", model.clone(), {"threads": threads, "probe": True})
        assert probed.probe_s is not None and probed.probe_blob_imported is True
        assert probed.blob is None
        assert torch.equal(probed(x)[0], plain(x)[0])
        assert torch.equal(probed(x)[0], x.clamp(min=0))


@pytest.mark.slow  # a whole compile whose probes run OpenVINO in child processes: ~25 s
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


@pytest.mark.slow  # a compile, then probing loads in child processes: ~20 s
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
    bf16_entries = {name for name, entry in plan.items() if entry["precision"] == "bf16"}
    if crashes and bf16_entries:
        assert res.exit_code == 2, res.output
        line = res.output.strip()
        # the first bf16 sub-engine the load meets (largest first) is the one named
        assert any(f"'{name}'" in line for name in bf16_entries), line
        assert "crashed a probe process (SIGFPE)" in line and "--threads" in line
        assert len(line.splitlines()) == 1
    else:
        assert res.exit_code == 0, res.output
