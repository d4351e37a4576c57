"""benchmarks/engine_stability.py runs on a tiny artifact with small counts and writes its JSON fields
(figures are not checked here: timings belong to the benchmark run, not to a test)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hotloop.cli import app

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_stability.py"


def _script() -> object:
    spec = importlib.util.spec_from_file_location("engine_stability", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx
    from onnx import TensorProto, helper

    root = tmp_path_factory.mktemp("stability")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(root / "relu.onnx"))
    out = root / "art"
    args = ["compile", str(root / "relu.onnx"), "--input", "x:4,8", "-o", str(out), "--budget-ms", "1e5"]
    args += ["--backends", "onnxruntime", "--iters", "1", "--warmup", "0", "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return out


def test_script_writes_latency_and_leak_fields(art: Path, tmp_path: Path) -> None:
    js, png = tmp_path / "s.json", tmp_path / "s.png"
    args = [str(art), "--iters", "30", "--leak-iters", "250", "--warmup", "2", "--quiet", "--json", str(js)]
    code = _script().main([*args, "--plot", str(png)])  # type: ignore[attr-defined]
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = json.loads(js.read_text())
    assert r["iters"] == 30 and r["leak_iters"] == 250 and len(r["samples_ms"]) == 30
    assert 0 < r["p50_ms"] <= r["p99_ms"] and r["p99_over_p50"] == pytest.approx(r["p99_ms"] / r["p50_ms"])
    assert r["rss_mb_after_100"] > 0 and r["rss_mb_after_n"] > 0
    want = (r["rss_mb_after_n"] - r["rss_mb_after_100"]) / r["rss_mb_after_100"] * 100
    assert r["rss_change_pct"] == pytest.approx(want)
    assert [n for n, _ in r["rss_curve_mb"]] == [100, 200, 250]


def test_script_refuses_too_few_leak_iterations(art: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _script().main([str(art), "--leak-iters", "50"])  # type: ignore[attr-defined]
    assert exc.value.code == 2 and "--leak-iters must be >= 100" in capsys.readouterr().err
