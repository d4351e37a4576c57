"""The bench comparison (hotloop.measure.baseline): thresholds, what differs, old results, identities."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from hotloop.errors import ConfigError
from hotloop.measure.baseline import (
    bench_differences,
    check_bench_result,
    compare_bench,
    parse_threshold,
    policy_of_target,
    result_policy,
)
from hotloop.measure.differences import CONTEXT, MACHINE, VARIABLE


def result(target: str = "pi05:tiny", scale: float = 1.0, seed: int = 0, **changes: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    stages = {"vision": scale * rng.lognormal(0, 0.1, 100), "denoise": scale * rng.lognormal(2, 0.1, 100)}
    total = stages["vision"] + stages["denoise"]
    data: dict[str, Any] = {
        "target": target,
        "latency_ms": {},
        "stages": {"vision": {}, "denoise": {}, "total": {}},
        "samples_ms": total.tolist(),
        "stage_samples_ms": {k: v.tolist() for k, v in stages.items()},
        "config": {"warmup": 20, "iterations": 100, "threads": None, "pin": None, "gc_enabled": False},
        "info": {"dtype": "float32", "num_steps": 10, "work": {"denoise": {"flops": 1.0}}},
        "env": {
            "hostname": "vm",
            "cpu_model": "AMD EPYC",
            "cpu_count": 2,
            "cpu_flags": ["avx2", "fma"],
            "threads": 2,
            "affinity": [0, 1],
            "load_avg": [0.3, 0.5, 0.6],
            "versions": {"torch": "2.13.0", "numpy": "2.4"},
            "git_commit": "abc",
        },
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            data[section][field] = value
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(
    ("text", "value"), [(None, 0.05), ("5%", 0.05), ("12.5%", 0.125), ("0.1", 0.1), ("0%", 0.0)]
)
def test_threshold(text: str | None, value: float) -> None:
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["abc", "5", "-1%", "2000%"])
def test_bad_threshold(text: str) -> None:
    with pytest.raises(ConfigError, match="--threshold"):
        parse_threshold(text)


def test_differences_are_sorted_into_variables_machine_and_context() -> None:
    base = result()
    now = result(
        env__threads=1,
        env__cpu_flags=["avx2", "fma", "avx512f"],
        env__load_avg=[1.9, 1.0, 0.7],
        env__versions={"torch": "2.14.0", "numpy": "2.4"},
        info__num_steps=5,
        info__work={"denoise": {"flops": 0.5}},  # follows from num_steps: not a second variable
        config__iterations=50,
    )
    d = bench_differences(base, now)
    assert {x.key for x in d.of(VARIABLE)} == {"threads", "versions.torch", "num_steps"}
    assert [x.describe() for x in d.of(MACHINE)] == ["cpu_flags +avx512f"]
    assert {x.key for x in d.of(CONTEXT)} == {"iterations", "load_avg"}
    lines = d.lines()
    assert lines[0].startswith("[yellow]3 variables changed: ")
    assert "another machine: cpu_flags +avx512f" in lines[1]
    assert bench_differences(base, result(seed=1)).lines() == [
        "changed: nothing in the settings or the installation (a rerun)"
    ]
    # A result written before the fingerprint had flags: unknown, not "another machine".
    assert not bench_differences(result(env__cpu_flags=None), base).of(MACHINE)


def test_compare_bench_names_the_slower_stage_only() -> None:
    base, now = result(), result(seed=1)
    now["stage_samples_ms"]["denoise"] = [1.3 * v for v in now["stage_samples_ms"]["denoise"]]
    now["samples_ms"] = [
        a + b
        for a, b in zip(now["stage_samples_ms"]["vision"], now["stage_samples_ms"]["denoise"], strict=True)
    ]
    cmp = compare_bench(base, now, 0.05, "a.json")
    verdicts = {r.stage: r.change.verdict for r in cmp.rows}
    assert verdicts == {"vision": "no detectable change", "denoise": "slower", "total": "slower"}
    assert [r.stage for r in cmp.slower] == ["denoise", "total"]


def test_a_baseline_without_stage_samples_compares_the_total() -> None:
    old = result()
    del old["stage_samples_ms"]  # written before bench kept them
    cmp = compare_bench(old, result(seed=1), 0.05, "old.json")
    assert [r.stage for r in cmp.rows] == ["total"] and cmp.skipped == ("vision", "denoise")


def test_non_bench_results_are_refused() -> None:
    with pytest.raises(ConfigError, match="is a `hotloop eval` result"):
        check_bench_result({"runs": []}, "x.json")
    with pytest.raises(ConfigError, match="is a `hotloop demo` report"):
        check_bench_result({"rungs": []}, "x.json")
    with pytest.raises(ConfigError, match="it has no 'samples_ms'"):
        check_bench_result({"target": "t", "stages": {}, "latency_ms": {}}, "x.json")
    with pytest.raises(ConfigError, match="'samples_ms' must hold two or more"):
        check_bench_result({"target": "t", "stages": {}, "latency_ms": {}, "samples_ms": [1.0]}, "x.json")


def test_an_artifact_counts_as_its_source_target(tmp_path) -> None:
    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text(json.dumps({"target": "pi05:tiny"}))
    assert policy_of_target(str(art)) == "pi05:tiny"
    assert policy_of_target("toy:mlp") == "toy:mlp"
    assert (
        result_policy(result(target=str(art), info={"artifact": str(art), "target": "pi05:tiny"}))
        == "pi05:tiny"
    )
    assert result_policy(result()) == "pi05:tiny"


def test_a_verdict_with_nothing_changed_blames_the_machine_state() -> None:
    from hotloop.measure.baseline import comparison_lines

    base, now = result(), result(seed=1, scale=1.5)
    lines = comparison_lines(compare_bench(base, now, 0.05, "a.json"))
    assert any(ln.startswith("[yellow]nothing changed, yet vision, denoise, total moved") for ln in lines)
    busy = result(seed=1, env__load_avg=[3.5, 1.0, 1.0])
    lines = comparison_lines(compare_bench(base, busy, 0.05, "a.json"))
    assert any("busy when this run ended (load average 3.50 on 2 CPUs)" in ln for ln in lines)
    assert not any("nothing changed, yet" in ln for ln in lines)
