"""A compiled artifact with prompt-length buckets: one entry and file set per bucket's prefix / denoise
engine, the engine runs each observation in the smallest bucket that holds its prompt, and the actions
equal the unbucketed run; `hotloop bench ART --prompt-tokens N` exercises it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app

runner = CliRunner()
FAST = ["--iters", "1", "--warmup", "0", "--quiet", "--threads", "1", "--variants", "plain"]
# Two flow-matching steps: bucketing is about the prompt, and the loop engine is exported once per step.
STEPS = 2


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("bucketed")
    out, js = root / "art", root / "compile.json"
    res = runner.invoke(
        app,
        [
            "compile",
            "pi05:tiny",
            "-o",
            str(out),
            *FAST,
            "--budget-ms",
            "100000",
            "--backends",
            "eager,onnxruntime",
            "--precisions",
            "fp32",
            "--buckets",
            "4,8",
            "--steps",
            str(STEPS),
            "--json",
            str(js),
        ],
    )
    assert res.exit_code == 0, res.output
    return out, json.loads(js.read_text())


def test_each_bucket_is_its_own_manifest_entry_with_files(art: tuple[Path, dict]) -> None:
    out, result = art
    assert result["prompt_buckets"] == [4, 8, 12]
    assert [b["bucket"] for b in result["buckets"]] == [4, 8]
    assert all(b["action_cos"] >= 0.995 for b in result["buckets"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["prompt_buckets"] == [4, 8, 12]
    by_name = {e["name"]: e for e in manifest["sub_engines"]}
    denoise = result["plan"]["denoise"]["sub_engine"]
    for bucket in (4, 8):
        prefix = by_name[f"prefix@{bucket}"]
        assert prefix["bucket"] == bucket and prefix["stage"] == "prefix"
        assert prefix["backend"] == result["plan"]["prefix"]["backend"]
        assert by_name[f"{denoise}@{bucket}"]["stage"] == "denoise"
        # the prefix's KV outputs shrink with the bucket (vision tokens + bucket slots)
        assert prefix["output_shapes"][0] != by_name["prefix"]["output_shapes"][0]
        if prefix["backend"] != "eager":
            assert prefix["files"] and all(f in manifest["files"] for f in prefix["files"])


@pytest.fixture(scope="module")
def loaded(art: tuple[Path, dict]) -> tuple[Any, torch.nn.Module]:
    """The artifact's engine and the fp32 reference model, loaded once: the cases below only run them
    (each asserts the bucket its own call ran in)."""
    import hotloop
    from hotloop.compile.sources import policy_source
    from hotloop.targets import TargetOptions

    out, _ = art
    engine = hotloop.Engine.load(out, threads=1, warmup=0)
    assert engine.shape.num_steps == STEPS
    return engine, policy_source("pi05:tiny", TargetOptions(seed=0, num_steps=STEPS)).model


@pytest.mark.parametrize("real_tokens,bucket", [(1, 4), (4, 4), (6, 8), (11, 12)])
def test_bucketed_engine_actions_equal_the_unbucketed_run(
    loaded: tuple[Any, torch.nn.Module], real_tokens: int, bucket: int
) -> None:
    from hotloop.families.pi.sampling import sample_actions

    engine, model = loaded
    assert list(engine.pipelines) == [4, 8, 12]
    obs = engine.example_observation(prompt_tokens=real_tokens)
    assert int(obs.lang_masks.sum()) == real_tokens
    noise = torch.randn(
        1, engine.cfg.chunk_size, engine.cfg.max_action_dim, generator=torch.Generator().manual_seed(3)
    )
    got = engine.infer(obs, noise).clone()
    assert engine.pipeline.last_bucket == bucket
    full = engine.pipelines[12].sample(obs, noise).clone()  # the same artifact without bucketing
    torch.testing.assert_close(got, full, rtol=0, atol=1e-5)
    with torch.no_grad():
        reference = sample_actions(model, obs, noise=noise)
    torch.testing.assert_close(got, reference, rtol=0, atol=1e-4)


def test_bench_artifact_with_prompt_tokens_runs_the_small_bucket(
    art: tuple[Path, dict], tmp_path: Path
) -> None:
    out, _ = art
    js = tmp_path / "bench.json"
    args = ["bench", str(out), "--iters", "2", "--warmup", "0", "--prompt-tokens", "3", "--json", str(js)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    info = json.loads(js.read_text())["info"]
    assert info["prompt_tokens"] == 3 and info["prompt_bucket"] == 4 and info["prompt_buckets"] == [4, 8, 12]
    res = runner.invoke(app, ["bench", str(out), "--prompt-tokens", "13"])
    assert res.exit_code == 2 and "--prompt-tokens" in res.output


@pytest.mark.parametrize("value", ["0,4", "4,x"])
def test_bad_buckets_exit_2_and_write_nothing(tmp_path: Path, value: str) -> None:
    out = tmp_path / "art"
    res = runner.invoke(
        app, ["compile", "pi05:tiny", "-o", str(out), *FAST, "--budget-ms", "100", "--buckets", value]
    )
    assert res.exit_code == 2 and "--buckets" in res.output
    assert not out.exists()
