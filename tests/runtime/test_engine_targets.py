"""Artifacts as targets: `hotloop bench ART --compare`, `hotloop profile ART`, `hotloop eval ART` on the
compiled demo policy, and CUDA Graph capture (skipped without a GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app

runner = CliRunner()
FAST = [
    "--iters",
    "1",
    "--warmup",
    "0",
    "--quiet",
    "--variants",
    "plain",
    "--threads",
    "1",
    "--precisions",
    "fp32",
]


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rt") / "art"
    res = runner.invoke(
        app,
        [
            "compile",
            "pi05:tiny",
            "-o",
            str(out),
            "--budget-ms",
            "1e5",
            "--backends",
            "eager,onnxruntime",
            *FAST,
        ],
    )
    assert res.exit_code == 0, res.output
    return out


def test_bench_artifact_against_its_reference(art: Path, tmp_path: Path) -> None:
    js = tmp_path / "b.json"
    res = runner.invoke(
        app,
        [
            "bench",
            str(art),
            "--compare",
            "pi05:tiny",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--quiet",
            "--json",
            str(js),
        ],
    )
    assert res.exit_code == 0, res.output
    result = json.loads(js.read_text())
    assert set(result["stages"]) >= {"vision", "prefix", "denoise", "total"}
    assert result["compare"]["target"] == "pi05:tiny"


def test_bench_artifact_refuses_shape_options(art: Path) -> None:
    res = runner.invoke(app, ["bench", str(art), "--steps", "3", "--iters", "1", "--quiet"])
    assert res.exit_code == 2, res.output
    assert "does not take --steps" in res.output


def test_profile_artifact_per_sub_engine(art: Path, tmp_path: Path) -> None:
    js = tmp_path / "p.json"
    res = runner.invoke(app, ["profile", str(art), "--iters", "1", "--top", "3", "--json", str(js)])
    assert res.exit_code == 0, res.output
    report = json.loads(js.read_text())
    subs = report["sub_engines"]
    assert {"vision", "prefix"} <= set(subs)
    for sub in subs.values():
        assert 0 < len(sub["ops"]) <= 3 and sub["total_ms"] > 0


def test_eval_compiled_demo_policy(tmp_path: Path) -> None:
    out, js = tmp_path / "demo", tmp_path / "e.json"
    res = runner.invoke(
        app, ["compile", "demo:conveyor", "-o", str(out), "--budget-ms", "1e5", "--backends", "eager", *FAST]
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        app,
        [
            "eval",
            str(out),
            "--episodes",
            "1",
            "--workers",
            "0",
            "--latency",
            "fixed:0",
            "--quiet",
            "--memory-cap-mb",
            "4096",
            "--json",
            str(js),
        ],
    )
    assert res.exit_code == 0, res.output
    result = json.loads(js.read_text())
    assert result["episodes"] == 1 and result["request"]["memory_cap_mb"] == 4096
    from hotloop.serve.policies import load_served_policy
    from hotloop.targets import TargetOptions

    served = load_served_policy(str(out), TargetOptions())  # an artifact can be served too
    assert served.action_spec["actions"].shape == (16, 4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA Graph capture needs a CUDA GPU")
def test_cuda_graph_capture_replays_the_same_outputs() -> None:
    from hotloop.compile.backends.eager import TorchRunner
    from hotloop.runtime.cuda_graph import capture

    lin = torch.nn.Linear(8, 8).cuda()

    class G:
        name, module = "g", lin
        example_inputs = (torch.randn(4, 8, device="cuda"),)
        input_names, output_names = ("x",), ("y",)

    r = TorchRunner(G(), "fp32", lin)  # type: ignore[arg-type]
    want = r(*G.example_inputs)[0].clone()
    assert capture(r) is not None
    assert torch.allclose(r(*G.example_inputs)[0], want)


def test_artifact_stores_its_policy_spec_and_evals_on_a_gym_task(art: Path, tmp_path: Path) -> None:
    """The stored spec is what the task adapter reads: the compiled pi05:tiny runs on PushT (another
    view size, state and action size than its own) through it."""
    from hotloop.families.pi.targets import resolve_config
    from hotloop.policy_spec import PolicySpec
    from hotloop.targets import TargetOptions

    manifest = json.loads((art / "manifest.json").read_text())
    spec = PolicySpec.from_dict(manifest["policy"]["spec"])
    size = resolve_config("pi05:tiny", TargetOptions()).vision.image_size
    assert spec.images[0].height == size and spec.action_meaning == "any" and spec.min_views == 1
    js = tmp_path / "e.json"
    args = ["eval", str(art), "--task", "gym:gym_pusht/PushT-v0", "--task-kwargs", '{"max_episode_steps": 5}']
    args += ["--episodes", "1", "--workers", "0", "--latency", "fixed:0", "--quiet", "--json", str(js)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    record = json.loads(js.read_text())
    assert record["episodes"] == 1 and record["errors"] == 0, record["per_episode"]


def test_artifact_with_a_changed_policy_spec_is_refused_by_name(art: Path, tmp_path: Path) -> None:
    import shutil

    from hotloop.errors import CheckpointError
    from hotloop.runtime.engine import Engine
    from hotloop.runtime.policy import engine_policy

    copy = tmp_path / "art"
    shutil.copytree(art, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["policy"]["spec"]["action_dim"] += 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="manifest.json: the stored policy spec"):
        engine_policy(Engine.load(copy, warmup=0))


def test_the_callers_threads_override_the_manifests(art: Path) -> None:
    # `hotloop bench ART --threads 2` (and eval's workers) used to be overridden by the thread count the
    # artifact was compiled with (1 here): the engine and the interleaved reference then ran on 1 thread.
    from hotloop.runtime.targets import build_bench
    from hotloop.targets import TargetOptions

    before = torch.get_num_threads()
    try:
        assert json.loads((art / "manifest.json").read_text())["threads"] == 1
        build_bench(str(art), TargetOptions(threads=2))
        assert torch.get_num_threads() == 2
        build_bench(str(art), TargetOptions())  # no choice made: the manifest's
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
