import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from hotloop.cli import app

runner = CliRunner()


def test_bench_writes_schema_and_plot(tmp_path):
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    res = runner.invoke(
        app,
        [
            "bench",
            "toy:mlp",
            "--warmup",
            "2",
            "--iters",
            "5",
            "--quiet",
            "--json",
            str(out),
            "--plot",
            str(png),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["target"] == "toy:mlp" and data["iterations"] == 5
    assert set(data["stages"]) == {"encoder", "head", "total"}
    assert png.stat().st_size > 1000
    assert "control rate" in res.output


def test_bench_compare(tmp_path):
    out = tmp_path / "c.json"
    res = runner.invoke(
        app,
        [
            "bench",
            "toy:mlp",
            "--warmup",
            "1",
            "--iters",
            "4",
            "--quiet",
            "--compare",
            "toy:mlp",
            "--horizon",
            "4",
            "--json",
            str(out),
            "--threads",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    compare = data["compare"]
    assert compare["target"] == "toy:mlp"
    # The ratio is the compared target's median over this one's, both measured here (4 samples each).
    assert compare["ratio_p50"] == pytest.approx(compare["latency_ms"]["p50"] / data["latency_ms"]["p50"])
    assert compare["ratio_p99"] == pytest.approx(compare["latency_ms"]["p99"] / data["latency_ms"]["p99"])
    assert len(data["samples_ms"]) == 4
    assert 0 < compare["latency_ms"]["p50"] <= compare["latency_ms"]["max"]
    assert data["info"]["horizon"] == 4  # the shared options reached both targets


def test_unknown_target_exits_2_with_known_list():
    res = runner.invoke(app, ["bench", "toy:mlx"])
    assert res.exit_code == 2
    assert "unknown target 'toy:mlx'" in res.output and "toy:mlp" in res.output and "pi05:small" in res.output


def test_bad_values_are_one_line_errors(tmp_path):
    out = tmp_path / "never.json"
    for args, needle in (
        (["--iters", "0"], "--iters 200"),
        (["--warmup", "-1"], "warmup must be >= 0 (got -1)"),
        (["--pin", "zero"], "cannot read CPU list 'zero'"),
        (["--pin", "4096"], "4096"),
        (["--device", "tpu"], "device 'tpu'"),
        (["--buckets", "32,x"], "cannot read --buckets '32,x'"),
        (["--buckets", "32"], "does not take --buckets"),
        (["--prompt-tokens", "3"], "does not take --prompt-tokens"),
    ):
        res = runner.invoke(app, ["bench", "toy:mlp", "--quiet", "--json", str(out), *args])
        assert res.exit_code == 2, (args, res.output)
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.output
    assert not out.exists()


def test_targets_lists_registry():
    res = runner.invoke(app, ["targets"])
    assert res.exit_code == 0
    assert "toy:mlp" in res.output and "demo:conveyor" in res.output


def test_doctor_reports_every_backend(tmp_path):
    out = tmp_path / "doctor.json"
    res = runner.invoke(app, ["doctor", "--json", str(out), "--roofline-cache", str(tmp_path / "peaks")])
    assert res.exit_code == 0, res.output
    checks = {c["name"]: c for c in json.loads(out.read_text())}
    assert set(checks) >= {
        "eager",
        "inductor",
        "onnxruntime",
        "openvino",
        "cuda",
        "tensorrt",
        "mujoco",
        "threads",
        "matmul peaks",
    }
    assert "float32" in checks["matmul peaks"]["detail"] and list((tmp_path / "peaks").glob("peaks-*.json"))
    assert checks["eager"]["ok"] and checks["onnxruntime"]["ok"] and checks["openvino"]["ok"]
    # Whatever the machine, a backend that is not usable says why.
    for check in checks.values():
        assert check["detail"]


def test_demo_harness_rung_writes_report(tmp_path):
    res = runner.invoke(app, ["demo", "--out", str(tmp_path), "--rung", "harness", "--quiet"])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["title"] for r in report["rungs"]] == ["Latency harness: toy:mlp"]
    assert report["rungs"][0]["error"] is None
    assert (tmp_path / "report.html").read_text().count("<img") == 1
    assert (tmp_path / report["rungs"][0]["plots"][0]).exists()


def test_demo_unknown_rung():
    res = runner.invoke(app, ["demo", "--rung", "nope"])
    assert res.exit_code == 2 and "unknown demo rung(s) nope" in res.output


def test_entry_point_exit_code():
    proc = subprocess.run(
        [sys.executable, "-m", "hotloop", "bench", "nope:x"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: unknown target 'nope:x'")
