"""Busy processes beside a target (`bench --contend`), the machine-load check before the planner times
(`compile --max-load / --force`), and `--reserve-cores` placement recorded in and applied from an artifact."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import ConfigError
from hotloop.measure import contention
from hotloop.measure.bench import BenchConfig, run_bench
from hotloop.measure.contention import Contenders, CpuLoad, _cpu_times, measure_load
from hotloop.measure.placement import Placement, apply_reserve, reserve_placement
from hotloop.targets import BenchCase

runner = CliRunner()


def _state(pid: int) -> str:
    # /proc/PID/stat: "pid (comm) S ..." -- the state letter follows the closing parenthesis.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, want: set[str], timeout: float = 5.0) -> str:
    end = time.monotonic() + timeout
    while (state := _state(pid)) not in want and time.monotonic() < end:
        time.sleep(0.02)
    return state


def test_contenders_spin_when_resumed_stop_when_paused_and_die_on_exit() -> None:
    with Contenders(2) as others:
        pids = others.pids
        assert len(pids) == 2
        assert all(_wait_state(p, {"T", "t"}) in {"T", "t"} for p in pids)  # paused on start
        others.resume()
        assert all(_wait_state(p, {"R"}) == "R" for p in pids)  # each one keeps a core busy
        others.pause()
        assert all(_wait_state(p, {"T", "t"}) in {"T", "t"} for p in pids)
    assert not any(Path(f"/proc/{p}").exists() and _state(p) != "Z" for p in pids)


def test_busy_share_counts_only_usable_cpus(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # cpu0: 30 busy of 100; cpu1: 90 busy of 100 (iowait counts as idle); the summary line is ignored.
    stat.write_text(
        "cpu  999 0 0 0 0 0 0 0\ncpu0 20 0 10 60 10 0 0 0 0 0\ncpu1 80 0 5 8 2 0 0 5 0 0\nintr 1 2 3\n"
    )
    assert _cpu_times({0, 1}, stat) == (30 + 90, 200)
    assert _cpu_times({1}, stat) == (90, 100)
    assert _cpu_times({0}, tmp_path / "missing") is None


def test_measure_load_sees_a_busy_process() -> None:
    quiet = measure_load(0.3)
    assert quiet.busy_cpus is not None and 0 <= quiet.busy_cpus <= quiet.cpus
    with Contenders(1) as others:
        others.resume()
        busy = measure_load(0.5)
    assert busy.busy_cpus is not None and busy.busy_cpus >= 0.8  # one core's worth, at least


def test_bench_contend_times_both_conditions_in_alternating_blocks() -> None:
    calls: list[int] = []

    def run(timer: object) -> None:
        calls.append(1)
        sum(range(2000))

    config = BenchConfig(warmup=1, iterations=6, progress=False, contend=1, contend_blocks=3, roofline=False)
    result = run_bench(BenchCase(name="spin", run=run), config)
    assert len(calls) == 1 + 2 * 6  # warm-up, then every iteration quiet and contended
    c = result.contention
    assert c is not None and c.processes == 1 and c.blocks == 3
    assert len(result.samples_ms) == 6 and len(c.samples_ms) == 6
    assert c.inflation_p50 == pytest.approx(c.latency.p50 / result.latency.p50)
    assert result.to_dict()["contention"]["inflation_p99"] == pytest.approx(c.inflation_p99)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"contend": -1}, "--contend must be from 0 to 256"),
        ({"contend": 1, "contend_blocks": 8, "iterations": 4}, "--contend needs --iters >= 8"),
    ],
)
def test_bench_contend_bad_values(kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        BenchConfig(progress=False, **kwargs)


def test_bench_cli_contend_json_and_refusals(tmp_path: Path) -> None:
    js = tmp_path / "b.json"
    res = runner.invoke(
        app,
        ["bench", "toy:mlp", "--iters", "8", "--warmup", "1", "--contend", "1", "--quiet", "--json", str(js)],
    )
    assert res.exit_code == 0, res.output
    assert "beside 1 busy process" in " ".join(res.output.split())
    data = json.loads(js.read_text())
    assert data["config"]["contend"] == 1 and len(data["contention"]["samples_ms"]) == 8
    res = runner.invoke(app, ["bench", "toy:mlp", "--contend", "1", "--compare", "toy:mlp", "--quiet"])
    assert res.exit_code == 2 and "--contend" in res.output and "--compare" in res.output


def test_reserve_cores_placement() -> None:
    assert reserve_placement(1, {0, 1, 2, 3}) == Placement(threads=3, pin=None)  # unpinned: measured better
    assert reserve_placement(0, {4, 5}).threads == 2
    with pytest.raises(ConfigError, match="--reserve-cores must be from 0 to 1"):
        reserve_placement(2, {0, 1})
    with pytest.raises(ConfigError, match="drop --threads / --pin"):
        apply_reserve(1, 2, None)
    assert apply_reserve(None, 3, (0,)) == (3, (0,))


def _fake_load(busy: float):
    return lambda window_s=1.0, stat=None: CpuLoad(busy, 2.0, 2, window_s)


COMPILE = ["compile", "pi05:tiny", "--backends", "eager", "--precisions", "fp32", "--variants", "plain",
           "--iters", "1", "--warmup", "0", "--quiet"]  # fmt: skip


def test_compile_refuses_a_busy_machine_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(contention, "measure_load", _fake_load(1.5))
    out = tmp_path / "art"
    res = runner.invoke(app, [*COMPILE, "-o", str(out), "--max-load", "0.5"])
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "1.50 CPUs busy now" in text and "--max-load 0.5" in text and "--force" in text
    assert not out.exists()
    res = runner.invoke(app, [*COMPILE, "-o", str(out), "--max-load", "nan"])
    assert res.exit_code == 2 and "--max-load must be >= 0" in res.output
    res = runner.invoke(app, ["compile", "pi05:tinyy", "-o", str(out), "--max-load", "0.5"])
    assert res.exit_code == 2 and "pi05:tinyy" in res.output and "busy" not in res.output  # the typo first


def test_compile_force_records_the_load_and_reserve_cores_is_applied_on_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hotloop

    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        pytest.skip("--reserve-cores 1 needs two usable CPUs")
    monkeypatch.setattr(contention, "measure_load", _fake_load(1.5))
    out, js = tmp_path / "art", tmp_path / "plan.json"
    threads_before = torch.get_num_threads()
    try:
        res = runner.invoke(
            app,
            [
                *COMPILE,
                "-o",
                str(out),
                "--json",
                str(js),
                "--max-load",
                "0.5",
                "--force",
                "--reserve-cores",
                "1",
            ],
        )
        assert res.exit_code == 0, res.output
        result = json.loads(js.read_text())
        assert result["machine_load"]["start"]["busy_cpus"] == 1.5
        timed = [c for c in result["candidates"] if c["latency_ms"] is not None]
        assert timed and all(isinstance(c["load_avg"], float) for c in timed)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["pin"] is None and manifest["threads"] == len(usable) - 1
        assert sorted(os.sched_getaffinity(0)) == usable  # the planner did not pin itself either
        # A plan that states CPUs (an integrator's manifest) is pinned there on load.
        (out / "manifest.json").write_text(json.dumps({**manifest, "pin": usable[-1:]}))
        hotloop.Engine.load(out, warmup=0)
        assert sorted(os.sched_getaffinity(0)) == usable[-1:]
        assert torch.get_num_threads() == len(usable) - 1
    finally:
        os.sched_setaffinity(0, usable)
        torch.set_num_threads(threads_before)
