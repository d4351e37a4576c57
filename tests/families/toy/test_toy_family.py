"""A second family through the protocol: the toy MLP compiled, quantized by the compress recipe, evaluated
in closed loop and served, with nothing in compile/, compress/, runtime/, the closed loop or serve/ that
knows it (`hotloop.families.toy`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.families import get_family
from hotloop.targets import TargetOptions, find_target

runner = CliRunner()
FAST = ["--iters", "1", "--warmup", "0", "--threads", "1"]


def _eager_actions(state: np.ndarray) -> np.ndarray:
    policy = find_target("toy:mlp").build_policy("toy:mlp", TargetOptions())
    return policy.infer({"state": state})["actions"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("toy") / "art"
    res = runner.invoke(
        app,
        ["compile", "toy:mlp", "-o", str(out), "--budget-ms", "1e5", "--backends", "eager,onnxruntime",
         "--precisions", "fp32", *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return out


def test_the_protocol_describes_the_toy_family() -> None:
    family = get_family("toy")
    assert [s.name for s in family.stages] == ["encoder", "head"]
    source = find_target("toy:mlp").build_source("toy:mlp", TargetOptions())
    engines = family.build_subengines(source.model, source.shape, torch.float32)
    pipe = family.eager_pipeline(source.cfg, source.shape, engines)
    want = family.sample_actions(source.model, source.obs, source.noise)
    torch.testing.assert_close(pipe.sample(source.obs, source.noise), want, rtol=0, atol=0)


def test_compiled_toy_artifact_loads_and_matches_the_eager_policy(compiled: Path) -> None:
    from hotloop.runtime.engine import Engine

    manifest = json.loads((compiled / "manifest.json").read_text())
    assert manifest["kind"] == "toy" and {e["name"] for e in manifest["sub_engines"]} == {"encoder", "head"}
    policy = find_target(str(compiled)).build_policy(str(compiled), TargetOptions())
    state = np.linspace(-1, 1, 32, dtype=np.float32)
    np.testing.assert_allclose(policy.infer({"state": state})["actions"], _eager_actions(state), atol=1e-5)
    engine = Engine.load(compiled, warmup=0)
    with pytest.raises(Exception, match="input 'state' has shape"):
        engine.infer({"state": torch.zeros(1, 31)})


def test_bench_of_the_toy_artifact_has_its_stages(compiled: Path, tmp_path: Path) -> None:
    js = tmp_path / "b.json"
    res = runner.invoke(app, ["bench", str(compiled), "--iters", "3", "--warmup", "1", "--json", str(js)])
    assert res.exit_code == 0, res.output
    report = json.loads(js.read_text())
    assert set(report["stages"]) >= {"encoder", "head"}


def test_compress_quantizes_the_toy_mlp(tmp_path: Path) -> None:
    out, js = tmp_path / "q", tmp_path / "q.json"
    res = runner.invoke(
        app,
        ["compress", "toy:mlp", "--recipe", "quantize", "-o", str(out), "--tolerance", "cos:0.99",
         "--backends", "eager", "--bench-iters", "2", "--eval-observations", "2", "--calibration-frames", "2",
         "--json", str(js), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    report = json.loads(js.read_text())
    quantized = report["rows"][-1]
    assert quantized["step"] == "quantize" and quantized["action"]["cosine"] >= 0.99
    manifest = json.loads((out / "manifest.json").read_text())
    tried = {c["precision"] for c in json.loads(json.dumps(manifest["precision_plan"])).values()}
    assert tried <= {"int8-dynamic", "bf16", "fp32"}


def test_compress_refuses_steps_the_toy_family_cannot_run(tmp_path: Path) -> None:
    res = runner.invoke(app, ["compress", "toy:mlp", "--recipe", "prune:0.5", "-o", str(tmp_path / "p")])
    assert res.exit_code == 2
    assert "toy policy, which has no pruning" in res.output and "quantize" in res.output
    assert not (tmp_path / "p").exists()


def test_the_compiled_toy_policy_runs_in_closed_loop(compiled: Path) -> None:
    from hotloop.closedloop.pool import run_episodes
    from hotloop.closedloop.workers import EpisodeJob

    job = EpisodeJob(target=str(compiled), task="reach", difficulty=None, strategy="chunk", latency="fixed:0")
    records, interrupted = run_episodes(job, [0], workers=0)
    (record,) = records
    assert not interrupted and record["error"] is None and record["inferences"] >= 1


def test_the_compiled_toy_policy_serves_over_the_wire(compiled: Path) -> None:
    from hotloop.client import PolicyClient, ServerError
    from hotloop.serve.policies import load_served_policy
    from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread

    served = load_served_policy(str(compiled), TargetOptions())
    assert served.observation_spec["state"].shape == (32,)
    state = np.linspace(-1, 1, 32, dtype=np.float32)
    with (
        ServerThread(PolicyServer(served, ServeConfig(port=0))) as server,
        PolicyClient(port=server.port) as client,
    ):
        got = client.infer({"state": state})["actions"]
        with pytest.raises(ServerError, match="'state' has shape"):
            client.infer({"state": state[:5]})
    np.testing.assert_allclose(got, _eager_actions(state), atol=1e-5)
