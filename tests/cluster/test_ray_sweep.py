"""Sweeps on a real Ray cluster: a head and a second node process started here (ray.cluster_utils),
each with one CPU, so every sweep below runs on both nodes at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the cluster extra is not installed (pip install 'hotloop[cluster]')")

from hotloop.closedloop.cells import Cell  # noqa: E402
from hotloop.closedloop.eval_run import EvalRequest  # noqa: E402
from hotloop.closedloop.execution import ExecOptions  # noqa: E402
from hotloop.closedloop.executors import episodes_of, execute  # noqa: E402
from hotloop.closedloop.spec import expand  # noqa: E402
from hotloop.closedloop.store import ROWS_FILE, read_rows  # noqa: E402

SMALL = {
    "target": "expert:scripted",
    "task": "reach",
    "strategy": ["sync", "async"],
    "latency": ["fixed:0", "fixed:200"],
    "episodes": 3,
}
# How long a sweep's driver may take to store its first 6 rows: a guard against a hang, not a timing. It
# imports hotloop, joins the cluster and starts its actors first, which took over 120 s on a 2-core
# machine at a load of 6.
DRIVER_START_S = 300
GRID = {  # 4 x 3 x 3 cells, one episode each
    "target": "expert:scripted",
    "task": "reach",
    "strategy": ["sync", "chunk", "async", "rtc"],
    "latency": ["fixed:0", "fixed:100", "fixed:200"],
    "fallback": ["hold", "continue", "stop"],
    "episodes": 1,
}


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    small = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
    # The nodes' workers import the test fakes (tests/sim/fakes.py) by name, as local workers do.
    fakes = str(Path(__file__).resolve().parents[1] / "sim")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (fakes, os.environ.get("PYTHONPATH")) if p))
        c = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
        c.add_node(**small, resources={"second_node": 1})  # a node process of its own, joining the head
        c.wait_for_nodes()
    yield f"ray:{c.address}"
    c.shutdown()


def _records(rows):
    """(cell, seed) -> record, without the one measured wall-clock figure (inference time on this CPU)."""
    out = {}
    for r in rows:
        record = dict(r["record"])
        record.pop("infer_wall_ms")
        out[(r["cell"], r["seed"])] = record
    return out


@pytest.mark.slow  # a worker killed and its episodes retried on a second node: ~60 s
def test_ray_gives_the_local_episodes_on_two_nodes_after_a_worker_is_killed(cluster):
    cells = expand(SMALL, "test")
    local: list[dict] = []
    execute(
        cells,
        episodes_of(cells, set(), ExecOptions(workers=0, progress=False)),
        local.append,
        ExecOptions(workers=0, progress=False),
    )

    rows: list[dict] = []
    killed: list[int] = []

    def on_row(row):
        rows.append(row)
        if not killed and row["pid"] is not None:  # kill the actor that played the first episode
            os.kill(row["pid"], signal.SIGKILL)
            killed.append(row["pid"])

    options = ExecOptions(cluster=cluster, progress=False)
    result = execute(cells, episodes_of(cells, set(), options), on_row, options)
    assert killed and not result.interrupted
    keys = [(r["cell"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)) == 12  # every episode once: the killed actor's in-flight ones retried
    errors = [(r["seed"], r["record"].get("error")) for r in rows if r["outcome"] == "error"]
    assert not errors, f"episodes that came back as errors after the kill (seed, why): {errors}"
    assert _records(rows) == _records(local)  # seed for seed, bit for bit
    assert len(result.summary["per_node"]) == 2  # both node processes ran episodes
    assert sum(result.summary["per_node"].values()) == 12
    assert any(r["pid"] not in killed for r in rows)


@pytest.mark.slow  # two worker deaths and their retries: ~45 s
def test_an_episode_that_kills_its_worker_twice_is_an_error_row_and_the_sweep_goes_on(cluster):
    # fakes:crashing kills its process (os._exit) at the first inference of seed 4, not of seed 3: Ray
    # restarts the actor and retries the episode once, it dies again, and that is the bound.
    request = EvalRequest(
        target="demo:conveyor",
        task="reach",
        latency="fixed:0",
        episodes=2,
        seed=3,
        policy_factory="fakes:crashing",
    )
    cells = [Cell.of(request)]
    rows: list[dict] = []
    # Two workers, one episode each: on one worker seed 3 would be in flight behind seed 4's crash, and a
    # reply not yet sent when os._exit runs is lost with the process (seen under load: both seeds errors).
    options = ExecOptions(cluster=cluster, progress=False, max_workers=2)
    result = execute(cells, episodes_of(cells, set(), options), rows.append, options)
    assert not result.interrupted and sorted(r["seed"] for r in rows) == [3, 4]
    by_seed = {r["seed"]: r for r in rows}
    assert by_seed[3]["outcome"] != "error"
    assert by_seed[4]["outcome"] == "error" and "seed 4" in by_seed[4]["record"]["error"]
    assert not by_seed[4]["record"]["failed"]  # a crash is not a policy failure


def test_a_node_without_the_artifacts_cpu_feature_refuses_it_by_name(cluster, tmp_path):
    art = tmp_path / "art"
    art.mkdir()
    manifest = {"sub_engines": [{"name": "denoise", "requires_cpu_features": ["hotloop_no_such_feature"]}]}
    (art / "manifest.json").write_text(json.dumps(manifest))
    cells = [Cell.of(EvalRequest(target=str(art), task="reach", latency="fixed:0", episodes=2))]
    rows: list[dict] = []
    options = ExecOptions(cluster=cluster, progress=False, max_workers=1)
    result = execute(cells, episodes_of(cells, set(), options), rows.append, options)
    assert rows == []  # not run, not an eager fallback, not an error row a resume would skip
    (why,) = result.refused.values()
    assert "hotloop_no_such_feature" in why and str(art) in why and "node " in why


def _hotloop(*args, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "hotloop", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _wait_for_six_rows(driver, out):
    """Until the running sweep driver has stored 6 rows (it must not exit first, nor hang past the guard)."""
    deadline = time.monotonic() + DRIVER_START_S
    while len(read_rows(out / ROWS_FILE)) < 6:
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline, (
            f"{len(read_rows(out / ROWS_FILE))} rows of 6 after {DRIVER_START_S} s"
        )
        time.sleep(0.05)


@pytest.mark.slow  # a driver process killed and started again: ~35 s
def test_a_killed_driver_resumes_only_what_is_missing_and_the_report_rebuilds(cluster, tmp_path):
    spec = tmp_path / "grid.json"
    spec.write_text(json.dumps(GRID))
    out = tmp_path / "out"
    driver = _hotloop("sweep", str(spec), "--out", str(out), "--cluster", cluster, "--quiet")
    _wait_for_six_rows(driver, out)
    driver.send_signal(signal.SIGKILL)
    driver.communicate()
    before = read_rows(out / ROWS_FILE)
    assert 6 <= len(before) < 36

    from typer.testing import CliRunner

    from hotloop.cli import app

    resumed = CliRunner().invoke(
        app,
        [
            "sweep",
            str(spec),
            "--out",
            str(out),
            "--cluster",
            cluster,
            "--resume",
            "--max-workers",
            "1",
            "--quiet",
        ],
    )
    assert resumed.exit_code == 0, resumed.output
    assert f"36 episodes, {len(before)} already stored, {36 - len(before)} to run" in resumed.output
    lines = (out / ROWS_FILE).read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    keys = [(r["cell"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)) == 36  # each episode once, none run twice
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert runs[-1]["episodes"] == 36 - len(before) and runs[-1]["executor"] == "ray"

    results = json.loads((out / "results.json").read_text())
    (out / "results.json").unlink()
    report = CliRunner().invoke(app, ["report", str(out)])
    assert report.exit_code == 0, report.output
    rebuilt = json.loads((out / "results.json").read_text())

    def strip(results):
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in results["runs"]]

    assert strip(rebuilt) == strip(results) and rebuilt["missing"] == 0
    assert sum(r["episodes"] for r in rebuilt["runs"]) == 36
    assert (out / "report.html").is_file() and len(list((out / "plots").glob("*.png"))) == 3


def test_eval_on_the_cluster_writes_what_the_local_pool_writes(cluster, tmp_path):
    from typer.testing import CliRunner

    from hotloop.cli import app

    args = [
        "eval",
        "expert:scripted",
        "--task",
        "reach",
        "--strategy",
        "sync,async",
        "--sweep-latency",
        "0,200",
        "--episodes",
        "1",
        "--quiet",
    ]
    on_ray = CliRunner().invoke(
        app, [*args, "--cluster", cluster, "--max-workers", "1", "--json", str(tmp_path / "a.json")]
    )
    assert on_ray.exit_code == 0, on_ray.output
    local = CliRunner().invoke(app, [*args, "--workers", "0", "--json", str(tmp_path / "b.json")])
    assert local.exit_code == 0, local.output

    def episodes(path):
        runs = json.loads(path.read_text())["runs"]
        return [
            [{k: v for k, v in e.items() if k != "infer_wall_ms"} for e in r["per_episode"]] for r in runs
        ]

    assert episodes(tmp_path / "a.json") == episodes(tmp_path / "b.json")


def test_bad_cluster_input_is_one_line_and_exit_2_with_nothing_lost(cluster, tmp_path):
    from typer.testing import CliRunner

    from hotloop.cli import app

    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({**SMALL, "episodes": 1}))
    runner = CliRunner()
    unreachable = runner.invoke(
        app, ["sweep", str(spec), "--out", str(tmp_path / "o"), "--cluster", "ray:127.0.0.1:1"]
    )
    assert unreachable.exit_code == 2 and "127.0.0.1:1" in unreachable.output
    assert len(unreachable.output.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # checked before the store is made: a retry needs no --resume
    bad = runner.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "o2"), "--cluster", "spark://x"])
    assert bad.exit_code == 2 and "spark://x" in bad.output
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({**SMALL, "latency": ["fixed:0", "fast"]}))
    value = runner.invoke(app, ["sweep", str(typo), "--out", str(tmp_path / "o4"), "--cluster", cluster])
    assert value.exit_code == 2 and "'fast'" in value.output and "latency=fast" in value.output
    assert len(value.output.strip().splitlines()) == 1 and not (tmp_path / "o4").exists()
    memory = runner.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "o3"), "--ray-memory-mb", "100"])
    assert memory.exit_code == 2 and "--ray-memory-mb" in memory.output and "--cluster" in memory.output


@pytest.mark.slow  # a driver process signalled mid-sweep: ~20 s
def test_sigterm_stops_the_driver_like_ctrl_c_with_the_finished_episodes_stored(cluster, tmp_path):
    """`timeout` / a job scheduler's SIGTERM: the actors are killed, the store keeps every finished episode,
    the report is rebuilt from it, exit 130 (before, the driver died at once with none of that)."""
    spec = tmp_path / "grid.json"
    spec.write_text(json.dumps({**GRID, "episodes": 3}))  # 108 episodes: far from done at the signal
    out = tmp_path / "out"
    driver = _hotloop("sweep", str(spec), "--out", str(out), "--cluster", cluster, "--quiet")
    _wait_for_six_rows(driver, out)
    driver.send_signal(signal.SIGTERM)
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 130, err
    assert "interrupted: every finished episode is stored; add --resume to run the rest" in err
    rows = read_rows(out / ROWS_FILE)
    assert 6 <= len(rows) < 108
    results = json.loads((out / "results.json").read_text())
    assert results["missing"] == 108 - len(rows)
