import json
import os

import pytest

from hotloop.errors import ConfigError
from hotloop.measure.bench import BenchConfig, parse_cpu_list, run_bench
from hotloop.measure.report import plot_latency, write_json
from hotloop.targets import BenchCase, TargetOptions, default_targets

LATENCY_KEYS = {"p50", "p90", "p95", "p99", "max", "mean", "std"}


def _case(name="fake", calls=None):
    calls = calls if calls is not None else []

    def run(timer):
        calls.append(name)
        with timer.stage("first"):
            sum(range(200))
        with timer.stage("second"), timer.stage("inner"):
            sum(range(100))

    return BenchCase(name=name, run=run)


def test_warmup_and_iterations_are_counted():
    calls = []
    result = run_bench(_case(calls=calls), BenchConfig(warmup=3, iterations=7, progress=False))
    assert len(calls) == 10
    assert result.iterations == 7 and len(result.samples_ms) == 7
    assert list(result.stages) == ["first", "second", "second/inner", "total"]  # parent first


def test_schema(tmp_path):
    result = run_bench(_case(), BenchConfig(warmup=1, iterations=5, progress=False))
    path = write_json(result, tmp_path / "out.json")
    data = json.loads(path.read_text())
    assert {
        "target",
        "iterations",
        "warmup",
        "latency_ms",
        "stages",
        "jitter_warning",
        "env",
        "compare",
    } <= set(data)
    assert data["target"] == "fake" and data["iterations"] == 5 and data["warmup"] == 1
    assert set(data["latency_ms"]) == LATENCY_KEYS
    for stats in data["stages"].values():
        assert set(stats) == LATENCY_KEYS
    assert data["compare"] is None
    assert isinstance(data["jitter_warning"], bool)
    for key in (
        "cpu_model",
        "cpu_count",
        "threads",
        "affinity",
        "governor",
        "cpu_freq_mhz",
        "temperature_c",
        "load_avg",
        "versions",
        "git_commit",
    ):
        assert key in data["env"]
    assert {"torch", "onnxruntime", "openvino", "hotloop"} <= set(data["env"]["versions"])
    assert data["stages"]["total"] == data["latency_ms"]


def test_compare_runs_interleaved_and_reports_ratios():
    calls = []
    result = run_bench(
        _case("a", calls), BenchConfig(warmup=2, iterations=6, progress=False), compare=_case("b", calls)
    )
    # Warm-up alternates a,b; timed iterations alternate which goes first.
    assert calls[:4] == ["a", "b", "a", "b"]
    assert calls[4:8] == ["a", "b", "b", "a"]
    assert result.compare is not None
    d = result.to_dict()["compare"]
    assert d["target"] == "b" and set(d["latency_ms"]) == LATENCY_KEYS
    assert d["ratio_p50"] == pytest.approx(d["latency_ms"]["p50"] / result.latency.p50)
    assert d["ratio_p99"] == pytest.approx(d["latency_ms"]["p99"] / result.latency.p99)


def test_settle_pauses_before_each_interleaved_call_outside_the_timing(monkeypatch):
    import hotloop.measure.bench as bench

    events = []
    monkeypatch.setattr(bench, "_settle", lambda s: events.append(("sleep", s)))
    calls = []
    _case_a, _case_b = _case("a", calls), _case("b", calls)

    def tag(case):
        def run(timer):
            events.append(("call", case.name))
            case.run(timer)

        return BenchCase(case.name, run)

    result = run_bench(
        tag(_case_a), BenchConfig(warmup=1, iterations=3, settle_ms=50, progress=False), compare=tag(_case_b)
    )
    timed = events[2:]  # after the warm-up pair, which is not paused
    assert events[:2] == [("call", "a"), ("call", "b")]
    assert len(timed) == 12  # 3 iterations x 2 targets, each call preceded by its pause
    assert all(timed[i] == ("sleep", 0.05) and timed[i + 1][0] == "call" for i in range(0, 12, 2))
    assert result.latency.max < 50  # the pause is not in the timed figure
    events.clear()
    run_bench(tag(_case_a), BenchConfig(warmup=0, iterations=2, settle_ms=50, progress=False))
    assert events == [("call", "a"), ("call", "a")]  # nothing to settle from without --compare


def test_gc_is_held_off_only_while_timing():
    import gc

    seen = []

    def run(timer):
        seen.append(gc.isenabled())

    assert gc.isenabled()
    run_bench(BenchCase("gc", run), BenchConfig(warmup=1, iterations=2, progress=False))
    assert seen == [True, False, False]
    assert gc.isenabled()
    seen.clear()
    run_bench(BenchCase("gc", run), BenchConfig(warmup=0, iterations=2, gc_enabled=True, progress=False))
    assert seen == [True, True]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"iterations": 0}, "--iters must be >= 1 \\(got 0\\)"),
        ({"warmup": -1}, "--warmup must be >= 0 \\(got -1\\)"),
        ({"threads": 0}, "--threads must be from 1 to 1024 \\(got 0\\)"),
        ({"threads": 100_000}, "--threads must be from 1 to 1024 \\(got 100000\\)"),
        ({"pin": (9999,)}, "9999"),
        ({"settle_ms": -1}, "--settle-ms must be from 0 to 10000 \\(got -1\\)"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        BenchConfig(**kwargs)


def test_cpu_list_parsing():
    assert parse_cpu_list("0-3,6", cpu_count=8) == (0, 1, 2, 3, 6)
    assert parse_cpu_list("1", cpu_count=2) == (1,)
    for bad in ("", "a", "3-1", "-1", "0-x"):
        with pytest.raises(ConfigError, match="cannot read CPU list"):
            parse_cpu_list(bad, cpu_count=8)


def test_cpu_list_names_only_existing_cpus_and_never_expands_a_huge_range():
    count = os.cpu_count() or 1
    for bad in (f"0-{count}", str(count), "0-1000000000000"):
        with pytest.raises(
            ConfigError, match=rf"--pin '{bad}': CPU \d+ does not exist; this machine has CPUs 0-"
        ):
            parse_cpu_list(bad)


def test_pinned_bench_records_affinity():
    cpu = min(os.sched_getaffinity(0))
    from hotloop.measure.bench import machine_settings

    before = os.sched_getaffinity(0)
    config = BenchConfig(warmup=0, iterations=2, pin=(cpu,), threads=1, progress=False)
    with machine_settings(config):
        result = run_bench(_case(), config)
    assert result.env["affinity"] == [cpu] and result.env["threads"] == 1
    assert os.sched_getaffinity(0) == before


def test_toy_target_runs_and_plots(tmp_path):
    registry = default_targets()
    case = registry.get("toy:mlp").build_bench("toy:mlp", TargetOptions(horizon=8, action_dim=3))
    assert case.run(__import__("hotloop.measure.stages", fromlist=["x"]).null_timer()).shape == (1, 8, 3)
    result = run_bench(case, BenchConfig(warmup=1, iterations=4, progress=False))
    assert list(result.stages) == ["encoder", "head", "total"]
    png = plot_latency(result, tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_toy_target_rejects_options_it_cannot_honour():
    with pytest.raises(ConfigError, match="does not take --views"):
        default_targets().get("toy:mlp").build_bench("toy:mlp", TargetOptions(views=2))
