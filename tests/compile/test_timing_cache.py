"""The per-machine cache of candidate timings (`hotloop.compile.timing_cache`): written by a compile,
read by the next one to order and skip, ignored with --no-cache, on another fingerprint, or when
corrupt (one warning line); an entry timed at a high load is not trusted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.compile import timing_cache
from hotloop.compile.planner import Candidate
from hotloop.compile.search import cached_slower, search_order
from hotloop.compile.timing_cache import CachedTiming, TimingCache, cache_root
from hotloop.measure.stats import LatencyStats

runner = CliRunner()
SLOW = "encoder:plain:onnxruntime:fp32"  # made slow in the cache below (not the eager fp32 reference)


def _compile(out: Path, *extra: str) -> tuple[Any, dict[str, Any]]:
    js = out.with_suffix(".json")
    res = runner.invoke(
        app,
        ["compile", "toy:mlp", "-o", str(out), "--json", str(js), "--backends", "eager,onnxruntime",
         "--precisions", "fp32", "--iters", "2", "--warmup", "0", "--threads", "1", *extra],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return res, json.loads(js.read_text())


def _cache_file() -> Path:
    (found,) = (cache_root() / "timings").glob("*.json")
    return found


def _edit(path: Path, label: str, **values: Any) -> None:
    body = json.loads(path.read_text())
    found = [e for e in body["entries"].values() if e["label"] == label]
    assert len(found) == 1, (label, body["entries"])
    found[0].update(values)
    path.write_text(json.dumps(body))


def test_a_second_compile_skips_what_the_cache_says_cannot_win(tmp_path: Path) -> None:
    _, first = _compile(tmp_path / "a")
    path = _cache_file()
    timed = [c for c in first["candidates"] if c["latency_ms"] is not None]
    assert first["timing_cache"]["recorded"] == len(timed) == 4
    assert len(json.loads(path.read_text())["entries"]) == 4
    assert all(c["cached_latency_ms"] is None for c in first["candidates"])

    # The cache says the ONNX Runtime encoder takes a second: the next run does not prepare it. Every
    # other entry says 1 us, which no fresh timing here gives: a reported figure from the cache would show.
    for c in timed:
        label = f"{c['sub_engine']}:{c['variant']}:{c['backend']}:{c['precision']}"
        _edit(path, label, p50=1000.0 if label == SLOW else 0.001, p99=1000.0 if label == SLOW else 0.001)
    _, second = _compile(tmp_path / "b")
    status = {(c["sub_engine"], c["backend"]): c for c in second["candidates"]}
    slow = status["encoder", "onnxruntime"]
    assert slow["status"] == "skipped" and slow["reason"].startswith("cached timing")
    assert slow["latency_ms"] is None and slow["action"] is None  # neither prepared nor timed
    assert second["timing_cache"]["skipped"] == [SLOW]
    for c in second["candidates"]:  # the others: checked and timed afresh, not copied from the cache
        if c is not slow:
            assert c["status"] == "accepted" and c["action"] is not None
            assert c["cached_latency_ms"]["p50"] == 0.001 and c["latency_ms"]["p50"] > 0.001
    assert second["plan"]["encoder"]["backend"] == "eager" and second["plan_latency_ms"]["p50"] > 0.001

    # --no-cache: nothing read (nothing skipped) and nothing written.
    before = path.read_text()
    _, fresh = _compile(tmp_path / "c", "--no-cache")
    assert fresh["timing_cache"] is None
    assert all(c["status"] != "skipped" for c in fresh["candidates"])
    assert path.read_text() == before

    # --search full: every candidate, fully timed; the cache is written, never read.
    _, full = _compile(tmp_path / "d", "--search", "full")
    assert all(c["status"] != "skipped" and c["cached_latency_ms"] is None for c in full["candidates"])
    assert full["timing_cache"]["recorded"] == 4 and path.read_text() != before


def test_another_fingerprint_ignores_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compile(tmp_path / "a")
    _edit(_cache_file(), SLOW, p50=1000.0, p99=1000.0)
    real = timing_cache.timing_fingerprint
    monkeypatch.setattr(
        timing_cache, "timing_fingerprint", lambda *a: {**real(*a), "versions": {"torch": "other"}}
    )
    _, other = _compile(tmp_path / "b")
    assert other["timing_cache"]["entries_for_this_target"] == 0 and not other["timing_cache"]["skipped"]
    assert len(list((cache_root() / "timings").glob("*.json"))) == 2  # one file per fingerprint


def test_a_corrupt_cache_is_one_warning_and_rewritten(tmp_path: Path) -> None:
    _compile(tmp_path / "a")
    path = _cache_file()
    path.write_text('{"schema": 1, "entries": {"x": ')
    res, result = _compile(tmp_path / "b")
    warnings = [line for line in res.output.splitlines() if line.startswith("warning: timing cache")]
    assert len(warnings) == 1 and "unreadable" in warnings[0] and "Traceback" not in res.output
    assert result["timing_cache"]["entries_for_this_target"] == 0
    assert len(json.loads(path.read_text())["entries"]) == 4  # rewritten with this run's timings


def test_an_entry_timed_at_a_high_load_is_not_trusted(tmp_path: Path) -> None:
    _compile(tmp_path / "a")
    body = json.loads(_cache_file().read_text())
    for entry in body["entries"].values():  # quiet, but for the one timed beside 50 CPUs of other work
        busy = entry["label"] == SLOW
        entry.update(load_avg=50.0, p50=1000.0, p99=1000.0) if busy else entry.update(load_avg=0.0)
    _cache_file().write_text(json.dumps(body))
    _, result = _compile(tmp_path / "b", "--max-load", "1", "--force")
    slow = next(c for c in result["candidates"] if f"{c['sub_engine']}:plain:{c['backend']}:fp32" == SLOW)
    assert slow["status"] == "accepted" and slow["cached_latency_ms"] is None
    assert result["timing_cache"]["not_trusted_high_load"] == [{"candidate": SLOW, "load_avg": 50.0}]


def _cand(stage: str, backend: str, p99: float | None = None, status: str = "pending") -> Candidate:
    c = Candidate(stage, stage, backend, "fp32")
    c.status = status
    if p99 is not None:
        c.cached = CachedTiming(c.label, p99, p99, 20, True, 0.0, "2026-01-01T00:00:00Z")
    return c


def test_order_and_skip_rules() -> None:
    fast, slow, unknown = _cand("v", "onnxruntime", 2.0), _cand("v", "openvino", 9.0), _cand("v", "tensorrt")
    assert search_order([unknown, slow, fast], ["v"], None) == [fast, slow, unknown]
    assert cached_slower(slow, [fast, slow]) is None  # nothing accepted in this run yet
    fast.status = "accepted"
    assert "cached timing" in (cached_slower(slow, [fast, slow]) or "")
    assert cached_slower(_cand("v", "openvino", 2.4), [fast]) is None  # within 1.25x
    assert cached_slower(_cand("v", "eager", 9.0), [fast]) is None  # never the reference
    assert cached_slower(unknown, [fast]) is None


def test_a_busy_timing_never_replaces_a_quiet_one(tmp_path: Path) -> None:
    warnings: list[str] = []
    cache = TimingCache.open(1, None, 0.5, warnings.append, root=tmp_path)
    cand = Candidate("v", "v", "openvino", "fp32", status="accepted")
    cand.latency, cand.timed_calls, cand.load_avg = LatencyStats.from_samples([3.0]), 1, 1.2
    cache.record("k", cand)
    cand.latency, cand.load_avg = LatencyStats.from_samples([30.0]), 6.0  # five other CPUs busy
    cache.record("k", cand)
    again = TimingCache.open(1, None, 0.5, warnings.append, root=tmp_path)
    found = again.lookup("k")
    assert found is not None and found.p50 == 3.0 and not warnings


def test_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HOTLOOP_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "hotloop"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # the XDG spec: a relative path is ignored
    assert cache_root() == Path.home() / ".cache" / "hotloop"
    monkeypatch.setenv("HOTLOOP_CACHE_DIR", str(tmp_path / "own"))
    assert cache_root() == tmp_path / "own"


def test_an_onnx_target_uses_the_cache_too(tmp_path: Path) -> None:
    import torch

    from hotloop.compile.backends.base import OnnxGraph
    from hotloop.compile.export import export_onnx

    torch.manual_seed(0)
    graph = OnnxGraph("lin", tmp_path / "m.onnx", (torch.randn(2, 8),), ("x",), ("y",))
    graph.module = torch.nn.Sequential(torch.nn.Linear(8, 4))
    model = export_onnx(graph, tmp_path / "m.onnx")

    def compile_onnx(out: Path) -> dict[str, Any]:
        js = out.with_suffix(".json")
        res = runner.invoke(
            app,
            ["compile", str(model), "--input", "x:2,8", "-o", str(out), "--json", str(js), "--backends",
             "onnxruntime,openvino", "--precisions", "fp32", "--iters", "2", "--warmup", "0", "--threads", "1"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        return dict(json.loads(js.read_text()))

    assert compile_onnx(tmp_path / "a")["timing_cache"]["recorded"] == 2
    _edit(_cache_file(), "m:plain:onnxruntime:fp32", p50=0.001, p99=0.001)
    _edit(_cache_file(), "m:plain:openvino:fp32", p50=1000.0, p99=1000.0)
    second = compile_onnx(tmp_path / "b")
    assert second["timing_cache"]["skipped"] == ["m:plain:openvino:fp32"]
    assert second["plan"]["m"]["backend"] == "onnxruntime" and second["plan_latency_ms"]["p50"] > 0.001


def test_a_changed_weight_or_input_shape_is_another_graph() -> None:
    import torch

    from hotloop.compile.timing_cache import graph_digests
    from hotloop.families.protocol import SubEngine

    lin = torch.nn.Linear(4, 2)

    def digest(batch: int = 1) -> str:
        return graph_digests({"e": SubEngine("e", lin, (torch.zeros(batch, 4),), ("x",), ("y",))})["e"]

    first = digest()
    assert digest() == first and digest(batch=3) != first
    with torch.no_grad():
        lin.weight[0, 0] += 1.0
    assert digest() != first


def test_the_roofline_peaks_live_in_the_same_cache_folder(tmp_path, monkeypatch):
    from hotloop.measure.roofline import default_cache_dir

    monkeypatch.setenv("HOTLOOP_CACHE_DIR", str(tmp_path / "own"))
    assert default_cache_dir() == tmp_path / "own" / "roofline"
    monkeypatch.delenv("HOTLOOP_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "hotloop" / "roofline"
