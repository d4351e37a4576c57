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
    # The comparison's raw samples are saved too (a replay or re-analysis needs them).
    assert len(compare["samples_ms"]) == 4 and compare["latency_ms"]["max"] == max(compare["samples_ms"])


def test_unknown_target_exits_2_with_known_list():
    res = runner.invoke(app, ["bench", "toy:mlx"])
    assert res.exit_code == 2
    assert "unknown target 'toy:mlx'" in res.output and "toy:mlp" in res.output and "pi05:small" in res.output


def test_bad_values_are_one_line_errors(tmp_path):
    out = tmp_path / "never.json"
    for args, needle in (
        (["--iters", "0"], "--iters must be >= 1 (got 0)"),
        (["--warmup", "-1"], "--warmup must be >= 0 (got -1)"),
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
    assert f"wrote {out}" in res.stdout  # says where the checks went
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


def test_demo_output_folder_is_checked_before_any_rung(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    res = runner.invoke(app, ["demo", "--out", str(blocker), "--rung", "harness", "--quiet"])
    assert res.exit_code == 2 and "--out" in res.output and "is a file" in res.output, res.output
    assert "done in" not in res.output and blocker.read_text() == "x"


def test_entry_point_exit_code():
    proc = subprocess.run(
        [sys.executable, "-m", "hotloop", "bench", "nope:x"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: unknown target 'nope:x'")


def test_version():
    import hotloop

    proc = subprocess.run([sys.executable, "-m", "hotloop", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == f"hotloop {hotloop.__version__}"


def test_malformed_numbers_are_one_line_naming_flag_and_value(capsys):
    import pytest

    from hotloop.cli import main

    for argv, needle in (
        (["eval", "demo:conveyor", "--episodes", "abc"], "'--episodes' got 'abc'"),
        (["bench", "toy:mlp", "--iters", "1.5"], "'--iters' got '1.5'"),
        (["record", "--task", "reach", "--seed", "x"], "'--seed' got 'x'"),
        (["bench", "toy:mlp", "--bogus"], "No such option: --bogus"),
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert e.value.code == 2 and len(lines) == 1, err
        assert lines[0].startswith("error: ") and needle in lines[0] and "--help" in lines[0], err


def test_main_returns_the_command_exit_code(capsys):
    import pytest

    from hotloop.cli import main

    with pytest.raises(SystemExit) as e:
        main(["targets"])
    assert e.value.code == 0 and "toy:mlp" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["bench", "nope:x"])
    assert e.value.code == 2


def test_bench_output_paths_are_checked_before_timing(tmp_path):
    for args, needle in (
        (["--json", str(tmp_path)], "--json"),
        (["--plot", "/proc/hotloop.png"], "--plot /proc/hotloop.png: cannot write in /proc"),
    ):
        res = runner.invoke(app, ["bench", "toy:mlp", "--iters", "100000", "--quiet", *args])
        assert res.exit_code == 2 and needle in res.output and "control rate" not in res.output, res.output


def test_bench_progress_off_a_terminal_is_plain_lines():
    res = runner.invoke(app, ["bench", "toy:mlp", "--warmup", "2", "--iters", "8"])
    assert res.exit_code == 0, res.output
    assert "\r" not in res.output
    assert "bench toy:mlp: 10/10 it (100%)" in res.stderr and "control rate" in res.stdout
