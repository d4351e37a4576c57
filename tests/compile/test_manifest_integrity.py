"""Every file the loader opens was verified and lies inside the artifact; a malformed manifest is one
CheckpointError naming the field (never a traceback), and an artifact keeps the umask's permissions."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hotloop.compile.artifact import read_manifest
from hotloop.errors import CheckpointError


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from typer.testing import CliRunner

    from hotloop.cli import app

    out = tmp_path_factory.mktemp("m") / "art"
    res = CliRunner().invoke(
        app,
        ["compile", "toy:mlp", "-o", str(out), "--budget-ms", "1e5", "--backends", "onnxruntime",
         "--precisions", "fp32", "--iters", "1", "--warmup", "0", "--threads", "1"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return out


def _copy_with(src: Path, dst: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    change(manifest)
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def _onnx_file(manifest: dict[str, Any]) -> str:
    return next(f for f in manifest["files"] if f.endswith(".onnx"))


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("no files", lambda m: m.pop("files"), "field 'files' is missing"),
    ("files a list", lambda m: m.update(files=list(m["files"])), "field 'files' must be an object"),
    ("bad digest", lambda m: m["files"].update({k: "abc" for k in m["files"]}), "sha256 hex digest"),
    ("outside", lambda m: m["files"].update({"../evil.onnx": "0" * 64}), "relative path inside"),
    ("no weights", lambda m: m.pop("weights"), "field 'weights' is missing"),
    ("weights unlisted", lambda m: m.update(weights="other.safetensors"), "not listed"),
    ("weights absolute", lambda m: m.update(weights="/etc/passwd"), "relative path inside"),
    ("no kind", lambda m: m.pop("kind"), "field 'kind' is missing"),
    ("no config", lambda m: m.pop("config"), "field 'config' is missing"),
    ("sub_engines a dict", lambda m: m.update(sub_engines={}), "must be a non-empty list"),
    ("schema as text", lambda m: m.update(schema_version="2"), "must be the integer 2"),
    ("threads 0", lambda m: m.update(threads=0), "field 'threads'"),
    ("pin a string", lambda m: m.update(pin="0-1"), "field 'pin'"),
    ("pin empty", lambda m: m.update(pin=[]), "field 'pin'"),
    ("machine a list", lambda m: m.update(machine=[]), "field 'machine'"),
    (
        "features a string",
        lambda m: m["sub_engines"][0].update(requires_cpu_features="avx2"),
        "requires_cpu_features' must be a list of strings",
    ),
    (
        "entry file unlisted",
        lambda m: m["sub_engines"][0].update(files=["encoder/other.onnx"]),
        "do not list",
    ),
    ("shapes wrong type", lambda m: m["sub_engines"][0].update(input_shapes="1,32"), "list of shapes"),
]


@pytest.mark.parametrize("name,change,message", CASES, ids=[c[0] for c in CASES])
def test_malformed_manifests_are_refused_by_field(
    artifact: Path, tmp_path: Path, name: str, change: Callable[[dict[str, Any]], None], message: str
) -> None:
    bad = _copy_with(artifact, tmp_path / "bad", change)
    with pytest.raises(CheckpointError, match=message):
        read_manifest(bad)


def test_a_tampered_graph_is_refused_and_bench_says_one_line(artifact: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from hotloop.cli import app

    bad = tmp_path / "tampered"
    shutil.copytree(artifact, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    graph = bad / _onnx_file(manifest)
    graph.write_bytes(graph.read_bytes() + b"\0")
    with pytest.raises(CheckpointError, match="sha256 does not match"):
        read_manifest(bad)
    res = CliRunner().invoke(app, ["bench", str(bad), "--iters", "1", "--warmup", "0"])
    assert res.exit_code == 2 and "sha256 does not match" in res.output and "Traceback" not in res.output


def test_garbage_weights_with_a_matching_hash_are_one_line(artifact: Path, tmp_path: Path) -> None:
    from hotloop.compile.artifact import sha256_file
    from hotloop.runtime.engine import Engine

    bad = tmp_path / "garbage"
    shutil.copytree(artifact, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    (bad / manifest["weights"]).write_bytes(b"not safetensors at all")
    manifest["files"][manifest["weights"]] = sha256_file(bad / manifest["weights"])
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="not the weights this manifest's config describes"):
        Engine.load(bad)


def test_an_artifact_keeps_the_umask(artifact: Path) -> None:
    mask = os.umask(0)
    os.umask(mask)
    assert (artifact.stat().st_mode & 0o777) == 0o777 & ~mask
    for f in artifact.rglob("*"):
        assert (f.stat().st_mode & 0o777) == ((0o777 if f.is_dir() else 0o666) & ~mask), f


@pytest.mark.parametrize(
    "field,value",
    [("input_shapes", [[1, 999]]), ("output_names", ["other"]), ("input_dtypes", ["float64"])],
)
def test_recorded_io_that_the_config_does_not_build_is_refused_at_load(
    artifact: Path, tmp_path: Path, field: str, value: Any
) -> None:
    """Issue 24 defect 7: the I/O an entry records is checked against what its config builds."""
    from hotloop.runtime.engine import Engine

    def change(m: dict[str, Any]) -> None:
        m["sub_engines"][0][field] = value

    bad = _copy_with(artifact, tmp_path / "io", change)
    name = json.loads((bad / "manifest.json").read_text())["sub_engines"][0]["name"]
    with pytest.raises(CheckpointError, match=rf"sub-engine '{name}' records {field} .*recompile"):
        Engine.load(bad, warmup=0)
    Engine.load(artifact, warmup=0)  # the untouched artifact still loads


@pytest.fixture(scope="module")
def onnx_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from typer.testing import CliRunner

    from hotloop.cli import app
    from hotloop.compile.backends.base import OnnxGraph
    from hotloop.compile.export import export_onnx

    folder = tmp_path_factory.mktemp("onnx")
    torch.manual_seed(0)
    graph = OnnxGraph("lin", folder / "m.onnx", (torch.randn(2, 8),), ("x",), ("y",))
    graph.module = torch.nn.Sequential(torch.nn.Linear(8, 4))
    model = export_onnx(graph, folder / "m.onnx")
    out = folder / "art"
    res = CliRunner().invoke(
        app,
        ["compile", str(model), "--input", "x:2,8", "-o", str(out), "--backends", "onnxruntime",
         "--precisions", "fp32", "--iters", "1", "--warmup", "0", "--threads", "1"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return out


def _both(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An entry edited together with the config's stated inputs (a consistent-looking manifest)."""

    def change(m: dict[str, Any]) -> None:
        m["sub_engines"][0][field] = value
        if field == "input_shapes":
            m["config"]["inputs"] = {"x": value[0]}

    return change


ONNX_CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("shape against the graph", _both("input_shapes", [[2, 9]]), r"input_shapes \[2, 9\] for 'x', the graph takes \[.*8\]"),
    ("shape against the config", lambda m: m["sub_engines"][0].update(input_shapes=[[3, 8]]), "config states"),
    ("input name", lambda m: m.update(config={}) or m["sub_engines"][0].update(input_names=["q"]), "the graph takes"),
    ("input dtype", _both("input_dtypes", ["float64"]), "input_dtypes float64 for 'x', the graph takes float32"),
    ("output name", _both("output_names", ["z"]), r"output_names \['z'\], the graph gives \['y'\]"),
    ("output shape", _both("output_shapes", [[2, 5]]), r"records output_shapes \[\[2, 5\]\]"),
]  # fmt: skip


@pytest.mark.parametrize("name,change,message", ONNX_CASES, ids=[c[0] for c in ONNX_CASES])
def test_an_onnx_artifact_records_the_io_of_its_own_graph(
    onnx_artifact: Path, tmp_path: Path, name: str, change: Callable[[dict[str, Any]], None], message: str
) -> None:
    """Issue 24 defect 7 for ONNX-file artifacts: no config builds their sub-engine, so the recorded I/O
    is checked against the graph file and the manifest's stated inputs, one CheckpointError by field."""
    from hotloop.runtime.engine import Engine

    bad = _copy_with(onnx_artifact, tmp_path / "io", change)
    with pytest.raises(CheckpointError, match=message):
        Engine.load(bad, warmup=0)
    assert Engine.load(onnx_artifact, warmup=0).infer({"x": [[0.0] * 8] * 2})["y"].shape == (2, 4)
