"""SIGTERM (what `timeout`, `kill` and job schedulers send) stops `hotloop eval` and `hotloop sweep` as
Ctrl-C does: the finished episodes are written, exit code 130, and no worker process is left running;
a parent killed outright (SIGKILL) takes its workers with it.

Each run is a real `python -m hotloop` process with one worker playing the scripted expert on `reach`
(a MuJoCo task) for far more episodes than it will finish; the signal goes out at the progress line
for 10 % done off a terminal, so episodes have finished and a worker is mid-episode at full CPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
EPISODES = 4000  # 400 (the 10 % line) take a second or two; the rest would take most of a minute


def _start(args: list[str], new_session: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-m", "hotloop", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=new_session,
    )


def _at_tenth(child: subprocess.Popen[str]) -> tuple[list[psutil.Process], list[str]]:
    """Read stderr up to the 10 % progress line; the child's worker processes at that moment."""
    assert child.stderr is not None
    lines = []
    for line in child.stderr:
        lines.append(line.rstrip("\n"))
        if "(10%)" in line:
            return psutil.Process(child.pid).children(recursive=True), lines
    raise AssertionError(f"no 10 % progress line: {lines}")


def _gone(processes: list[psutil.Process], timeout: float = 10.0) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    return [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def _eval_args(out: Path) -> list[str]:
    return ["eval", "expert:scripted", "--task", "reach", "--latency", "fixed:0", "--episodes", str(EPISODES),
            "--workers", "1", "--json", str(out)]  # fmt: skip


@pytest.mark.parametrize("to_group", [False, True], ids=["kill-parent", "timeout-style-group"])
def test_sigterm_stops_eval_like_ctrl_c_keeping_the_finished_episodes(tmp_path, to_group):
    out = tmp_path / "eval.json"
    child = _start(_eval_args(out), new_session=to_group)
    workers, lines = _at_tenth(child)
    assert workers, "the eval should run its episodes in a worker process"
    if to_group:  # `timeout` signals the whole process group: the workers get it too
        os.killpg(child.pid, signal.SIGTERM)
    else:
        child.send_signal(signal.SIGTERM)
    assert child.stderr is not None
    lines += [x.rstrip("\n") for x in child.stderr]
    assert child.wait(timeout=60) == 130, lines
    assert "interrupted: wrote the episodes that finished" in lines
    data = json.loads(out.read_text())
    assert data["interrupted"] is True
    assert EPISODES // 10 <= len(data["seeds"]) < EPISODES
    assert data["errors"] == 0, "a worker stopped by the signal is not a crashed episode"
    assert data["successes"] == data["completed"] == len(data["seeds"])
    assert _gone(workers) == [], "no worker may outlive the stopped eval"


def test_a_worker_ends_when_its_parent_is_killed_outright():
    # The worker spins in a minute-long inference (fakes:busy): only its own watch on the parent ends it.
    script = (
        "from hotloop.closedloop.pool import run_episodes\n"
        "from hotloop.closedloop.workers import EpisodeJob\n"
        "job = EpisodeJob(target='demo:conveyor', task='reach', difficulty=None, strategy='sync',\n"
        "                 latency='fixed:0', policy_factory='fakes:busy')\n"
        "run_episodes(job, [0, 1], workers=1)\n"
    )
    here = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, SRC, os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.DEVNULL)
    workers = _busy_children(parent.pid)
    parent.send_signal(signal.SIGKILL)  # nothing in the parent runs: the worker must notice by itself
    parent.wait(timeout=30)
    left = _gone(workers, timeout=5)
    for p in left:
        p.kill()  # only the ones this test started
    assert left == []


def _busy_children(pid: int, timeout: float = 120.0) -> list[psutil.Process]:
    """The children of `pid` once one of them has spent a second of CPU (the worker, inside `infer`)."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        children = psutil.Process(pid).children(recursive=True)
        if any(c.cpu_times().user > 1.0 for c in children):
            return children
        time.sleep(0.2)
    raise AssertionError("the worker never got busy")


def test_sigterm_stops_a_sweep_with_every_finished_episode_stored(tmp_path):
    spec = tmp_path / "grid.json"
    spec.write_text(json.dumps({"target": "expert:scripted", "task": "reach", "strategy": "sync",
                                "latency": "fixed:0", "episodes": EPISODES, "seed": 0}))  # fmt: skip
    out = tmp_path / "grid"
    child = _start(["sweep", str(spec), "--out", str(out), "--workers", "1"])
    workers, lines = _at_tenth(child)
    child.send_signal(signal.SIGTERM)
    assert child.stderr is not None
    lines += [x.rstrip("\n") for x in child.stderr]
    assert child.wait(timeout=60) == 130, lines
    assert "interrupted: every finished episode is stored; add --resume to run the rest" in lines
    rows = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert EPISODES // 10 <= len(rows) < EPISODES
    assert {r["outcome"] for r in rows} == {"success"}
    assert _gone(workers) == []
