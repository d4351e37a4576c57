"""The engine's resident-memory cap while running, not only at load: several engines in one process with a
cap each, a breach naming the artifact and `--memory-cap-mb`, and the flag on `hotloop bench` / `eval`.

The model: a 64x64 input tiled `reps` times and summed. Load and warm-up run it with the example inputs
(zeros: an empty tile); a call with reps (64, 64) makes ONNX Runtime allocate a 64 MiB working tensor and
keep it in its arena: real growth, inside the engine's own call.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import MemoryCapError
from hotloop.process_memory import release_free_heap
from hotloop.runtime.engine import Engine
from hotloop.runtime.memory import MIB

runner = CliRunner()
WORK_MIB = 64


def _tile_onnx(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Tile", ["x", "reps"], ["big"]),
            helper.make_node("ReduceSum", ["big"], ["y"], keepdims=1),
        ],
        "tile",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64]),
            helper.make_tensor_value_info("reps", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("memcap")
    model = _tile_onnx(root / "tile.onnx")
    out = root / "art"
    res = runner.invoke(
        app,
        [
            "compile",
            str(model),
            "--input",
            "x:64,64",
            "--input",
            "reps:2",
            "-o",
            str(out),
            "--budget-ms",
            "1e5",
            "--backends",
            "onnxruntime",
            "--precisions",
            "fp32",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    return out


BIG = {"x": torch.ones(64, 64), "reps": torch.tensor([64, 64])}


@contextmanager
def no_collection() -> Iterator[None]:
    """Collect garbage first and keep the collector off inside: a collection that runs during the engine's
    call frees what earlier tests in this worker left behind, and the resident set then shrinks by as much
    as the call grew it."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def tightened_engine(art: Path) -> Engine:
    """A fresh engine whose cap sits a quarter of the working tensor above what it holds after load."""
    engine = Engine.load(art, memory_cap_mb=10_000)
    assert engine.memory.footprint < WORK_MIB * MIB  # the warm-up's empty tile allocated nothing big
    engine.memory.cap_mb = engine.memory.used / MIB + WORK_MIB / 4
    return engine


def first_breach(art: Path, x: dict[str, torch.Tensor], attempts: int = 3) -> tuple[Engine, MemoryCapError]:
    """Run the big call on fresh, tightened engines until one reports the breach. The resident set is
    process-wide: anything else in this pytest worker that returns pages to the system during the call
    (the kernel reclaiming file-backed pages under load, a collection) offsets the call's growth. One
    CI run saw no breach once; three misses in a row are a real failure of the account."""
    for _ in range(attempts):
        gc.collect()
        release_free_heap()  # before the engine's own account starts, so the call's growth is fresh pages
        engine = tightened_engine(art)
        try:
            with no_collection():
                engine.infer(x)
        except MemoryCapError as err:
            return engine, err
    pytest.fail(
        f"{attempts} fresh engines each grew by a {WORK_MIB} MiB working tensor and none breached its cap"
    )


def test_growth_while_running_breaches_the_cap_and_names_the_artifact(art: Path) -> None:
    engine, err = first_breach(art, BIG)
    message = str(err)
    assert str(art) in message and "--memory-cap-mb" in message and "grown while running" in message
    assert engine.memory.growth >= WORK_MIB / 2 * MIB
    with pytest.raises(MemoryCapError):  # and every later call while it stays over
        engine.infer(BIG)


def test_each_engine_is_charged_only_its_own_growth(art: Path) -> None:
    # A breached engine has its working tensor charged to it; lift its cap to just above that.
    warm, _ = first_breach(art, BIG)
    assert warm.memory.growth >= WORK_MIB / 2 * MIB
    warm.memory.cap_mb = warm.memory.used / MIB + WORK_MIB / 4
    before = warm.memory.used
    # Memory taken outside the engine's calls (the caller's ballast, a second engine's first run) is not
    # charged to it, though the process's resident set grows by far more than its slack.
    ballast = np.ones(2 * WORK_MIB * MIB // 8)
    first_breach(art, BIG)  # the second engine's own growth is charged to it
    for _ in range(3):
        y = warm.infer(BIG)["y"]
        assert float(y.reshape(-1)[0]) == pytest.approx(4096 * 4096, rel=1e-3)
    assert warm.memory.used - before < WORK_MIB / 4 * MIB
    del ballast


def test_bench_passes_the_cap_to_the_engine(art: Path, tmp_path: Path) -> None:
    js = tmp_path / "b.json"
    args = ["bench", str(art), "--iters", "2", "--quiet", "--memory-cap-mb", "4096", "--json", str(js)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    memory = json.loads(js.read_text())["info"]["memory"]
    assert memory["cap_mb"] == 4096 and memory["footprint_mb"] < memory["cap_mb"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["bench", "toy:mlp", "--memory-cap-mb", "100"], "does not take --memory-cap-mb"),
        (["bench", "toy:mlp", "--memory-cap-mb", "0"], "--memory-cap-mb must be"),
        (["eval", "demo:conveyor", "--memory-cap-mb", "100"], "--memory-cap-mb caps a compiled artifact"),
    ],
)
def test_memory_cap_bad_input_exits_2(args: list[str], needle: str) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and needle in res.output, res.output
