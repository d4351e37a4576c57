"""The one rule for a folder a command writes (`hotloop.output_dir`, docs/cli-rules.md): new or empty, one
the command wrote before (its marker), or --overwrite; never an input; checked before any work. Each
refusal is one line, exit 2, and leaves the folder as it was."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import ConfigError
from hotloop.output_dir import MARKER, claim_output_dir

runner = CliRunner()


def _error_line(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _strangers_folder(tmp_path: Path, name: str = "theirs") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text('{"mine": true}')
    (folder / "results.json").write_text("[1]")
    return folder


def test_new_empty_marked_or_overwrite_and_nothing_else(tmp_path: Path) -> None:
    assert not claim_output_dir(tmp_path / "new" / "deeper", "-o", "train-demo").existed
    (tmp_path / "empty").mkdir()
    claim_output_dir(tmp_path / "empty", "-o", "train-demo")
    theirs = _strangers_folder(tmp_path)
    with pytest.raises(ConfigError, match=r"-o .*theirs already holds files `hotloop train-demo` did not write "
                       r"\(config.json, results.json\).*--overwrite"):  # fmt: skip
        claim_output_dir(theirs, "-o", "train-demo")
    assert claim_output_dir(theirs, "-o", "train-demo", overwrite=True).existed
    ours = claim_output_dir(tmp_path / "ours", "-o", "train-demo")
    ours.create()
    (ours.path / "config.json").write_text("{}")
    claim_output_dir(ours.path, "-o", "train-demo")  # its own earlier output: written again
    with pytest.raises(ConfigError, match="`hotloop record` did not write"):  # another command's
        claim_output_dir(ours.path, "-o", "record")
    assert json.loads((ours.path / MARKER).read_text())["command"] == "train-demo"


def test_never_an_input_not_even_with_overwrite(tmp_path: Path) -> None:
    data = _strangers_folder(tmp_path, "ds")
    for out, word in ((data, "is the input"), (data / "ckpt", "lies inside the input"), (tmp_path, "holds")):
        with pytest.raises(ConfigError, match=word):
            claim_output_dir(out, "-o", "train-demo", overwrite=True, inputs={"--dataset": data})
    claim_output_dir(tmp_path / "out", "-o", "train-demo", inputs={"--dataset": data, "TARGET": "demo:x"})


def test_a_failed_block_leaves_no_folder_behind(tmp_path: Path) -> None:
    claimed = claim_output_dir(tmp_path / "run", "-o", "record")
    with pytest.raises(ConfigError), claimed.writing():
        raise ConfigError("refused later")
    assert not (tmp_path / "run").exists()


def test_train_demo_refuses_the_dataset_and_a_strangers_folder_before_any_work(tmp_path: Path) -> None:
    data = _strangers_folder(tmp_path, "ds")
    before = _snapshot(data)
    for family in ("act", "diffusion", "smolvla", "pi"):
        line = _error_line(["train-demo", "--family", family, "--dataset", str(data), "-o", str(data)])
        assert "is the input --dataset" in line
        line = _error_line(["train-demo", "--family", family, "--dataset", str(data), "-o", str(data / "x")])
        assert "lies inside the input --dataset" in line
    theirs = _strangers_folder(tmp_path)
    line = _error_line(["train-demo", "--family", "act", "--dataset", str(data), "-o", str(theirs)])
    assert "did not write (config.json, results.json)" in line and "--overwrite" in line
    assert _snapshot(data) == before and json.loads((theirs / "config.json").read_text()) == {"mine": True}


def test_compile_and_compress_check_the_folder_first(tmp_path: Path) -> None:
    theirs = _strangers_folder(tmp_path)
    base = ["--budget-ms", "1e5", "--backends", "eager", "--precisions", "fp32", "--iters", "1"]
    line = _error_line(["compile", "toy:mlp", "-o", str(theirs), *base])
    assert "`hotloop compile` did not write" in line and "--overwrite" in line
    line = _error_line(["compress", "pi05:tiny", "--recipe", "quantize", "-o", str(theirs)])
    assert "`hotloop compress` did not write" in line
    line = _error_line(["compile", "toy:mlp", "-o", "/proc/hotloop-test-art", *base])  # unwritable, up front
    assert "cannot write in /proc" in line
    assert json.loads((theirs / "config.json").read_text()) == {"mine": True}


def test_compile_writes_into_a_folder_it_wrote_and_with_overwrite(tmp_path: Path, compile_tiny) -> None:
    art = tmp_path / "art"
    assert compile_tiny(art, "eager").exit_code == 0
    assert compile_tiny(art, "eager").exit_code == 0  # its own artifact: replaced
    theirs = _strangers_folder(tmp_path)
    res = compile_tiny(theirs, "eager", "fp32", "--overwrite")
    assert res.exit_code == 0, res.output
    assert (theirs / "manifest.json").is_file() and not (theirs / "results.json").exists()  # replaced whole


def test_sweep_refuses_a_strangers_folder_and_bad_cells_before_the_store(tmp_path: Path) -> None:
    theirs = _strangers_folder(tmp_path)
    before = _snapshot(theirs)
    spec = tmp_path / "s.yaml"
    spec.write_text("target: expert:scripted\ntask: reach\nlatency: fixed:0\nepisodes: 1\n")
    line = _error_line(["sweep", str(spec), "--out", str(theirs), "--workers", "0", "--quiet"])
    assert "`hotloop sweep` did not write" in line and "--overwrite" in line
    assert _snapshot(theirs) == before
    line = _error_line(["sweep", str(spec), "--out", str(tmp_path), "--workers", "0", "--quiet"])
    assert "holds the input SPEC" in line
    bad = tmp_path / "bad.yaml"
    bad.write_text("target: expert:scripted\ntask: reach\ntask_kwargs: {nonsense: 3}\nepisodes: 1\n")
    line = _error_line(["sweep", str(bad), "--out", str(tmp_path / "s1"), "--workers", "0", "--quiet"])
    assert "cell (expert:scripted reach" in line and "takes no --task-kwargs" in line
    assert not (tmp_path / "s1").exists()  # nothing made: the same command can be fixed and rerun
    broken = tmp_path / "ck"
    broken.mkdir()
    (broken / "config.json").write_text('{"type": "act"}')
    (broken / "model.safetensors").write_bytes(b"\0" * 64)
    spec_ck = tmp_path / "ck.yaml"
    spec_ck.write_text(f"target: {broken}\ntask: conveyor-pick\nepisodes: 1\n")
    line = _error_line(["sweep", str(spec_ck), "--out", str(tmp_path / "s2"), "--workers", "0", "--quiet"])
    assert f"cell ({broken}" in line and "config.json" in line
    assert not (tmp_path / "s2").exists()


def test_record_demo_and_perception_folders_follow_the_rule(tmp_path: Path) -> None:
    theirs = _strangers_folder(tmp_path)
    line = _error_line(["record", "--task", "reach", "--episodes", "1", "-o", str(theirs), "--quiet"])
    assert "`hotloop record` did not write" in line
    line = _error_line(["demo", "--out", str(theirs), "--rung", "harness", "--quiet"])
    assert "`hotloop demo` did not write" in line
    line = _error_line(["perception-curve", "demo:detector", "--int8", str(theirs), "--resolutions", "32"])
    assert "`hotloop perception-curve` did not write" in line
    line = _error_line(["bench", "toy:mlp", "--iters", "2", "--history", str(theirs)])
    assert "`hotloop history` did not write" in line and "--overwrite" not in line
    assert json.loads((theirs / "config.json").read_text()) == {"mine": True}


def test_record_into_a_new_folder_is_marked_and_an_output_file_is_never_an_input(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    res = runner.invoke(app, ["record", "--task", "reach", "--episodes", "1", "-o", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / MARKER).read_text())["command"] == "record"
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text("{}")
    (ck / "model.safetensors").write_bytes(b"")
    line = _error_line(["verify", str(ck), "--json", str(ck / "config.json")])
    assert "--json" in line and "lies inside the input CKPT" in line
    assert (ck / "config.json").read_text() == "{}"


def test_safetensors_follow_the_umask(tmp_path: Path) -> None:
    import torch

    from hotloop.io import save_tensors

    old = os.umask(0o022)
    try:
        path = save_tensors({"w": torch.zeros(2)}, tmp_path / "model.safetensors")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # safetensors alone writes 0600


def test_the_timing_cache_never_writes_through_a_link(tmp_path: Path) -> None:
    from hotloop.compile.planner import Candidate
    from hotloop.compile.timing_cache import TimingCache
    from hotloop.measure.stats import LatencyStats

    outside = tmp_path / "precious.json"
    outside.write_text("keep me")
    root = tmp_path / "cache"
    cache = TimingCache.open(1, None, 0.5, lambda s: None, root=root)
    cache.path.parent.mkdir(parents=True)
    cache.path.symlink_to(outside)
    warnings: list[str] = []
    cache = TimingCache.open(1, None, 0.5, warnings.append, root=root)
    assert warnings and "link" in warnings[0]  # not read through either
    cand = Candidate("v", "v", "openvino", "fp32", status="accepted")
    cand.latency, cand.timed_calls, cand.load_avg = LatencyStats.from_samples([3.0]), 1, 0.0
    cache.record("k", cand)
    assert outside.read_text() == "keep me"
    assert not cache.path.is_symlink() and "entries" in json.loads(cache.path.read_text())
    # The timings folder itself a link out of the cache: not written at all, one warning.
    root2, away = tmp_path / "cache2", tmp_path / "away"
    away.mkdir()
    root2.mkdir()
    (root2 / "timings").symlink_to(away)
    warnings.clear()
    cache = TimingCache.open(1, None, 0.5, warnings.append, root=root2)
    cache.record("k", cand)
    assert list(away.iterdir()) == [] and any("link out of the cache" in w for w in warnings)
