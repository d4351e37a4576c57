"""Real Ctrl-C presses (SIGINT to this process) against `hotloop.interrupts`.

Each scenario runs in a fresh interpreter (the `run_in_child` fixture, tests/conftest.py), which holds
only `hotloop.interrupts`: what is tested is the scenario, not the state earlier tests left behind.
"""

import os
import signal
import time

import pytest

from hotloop.interrupts import first_interrupt_only, stop_at_next_boundary


def _press() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, handled in this (the main) thread


def first_press_raises_and_later_ones_are_only_noted() -> None:
    saved = []
    with first_interrupt_only():
        with pytest.raises(KeyboardInterrupt):
            _press()
            time.sleep(0.1)  # give the handler a moment to run
        _press()  # during the "save": must not raise
        _press()
        saved.append("finished work")
    assert saved == ["finished work"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def nested_block_shares_the_outer_count() -> None:
    with first_interrupt_only():
        with first_interrupt_only(), pytest.raises(KeyboardInterrupt):
            _press()
            time.sleep(0.1)
        _press()  # the outer block's save after the inner one stopped: noted, not raised
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def stop_at_next_boundary_never_raises() -> None:
    with stop_at_next_boundary("episode") as stop:
        assert not stop()
        _press()
        _press()
        assert stop()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def sigterm_is_a_first_press_and_shares_the_count() -> None:
    saved = []
    with first_interrupt_only():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)  # `timeout`, `kill`, a job scheduler
            time.sleep(0.1)
        _press()  # a Ctrl-C after it is a later press: noted
        os.kill(os.getpid(), signal.SIGTERM)
        saved.append("finished work")
    assert saved == ["finished work"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def sigterm_stops_at_the_next_boundary() -> None:
    with stop_at_next_boundary("episode") as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        assert stop()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_sigterm_is_handled_as_a_first_press(run_in_child):
    err = run_in_child(__file__, "sigterm_is_a_first_press_and_shares_the_count")
    assert err.count("interrupt noted") == 2


def test_sigterm_stops_at_the_next_boundary(run_in_child):
    err = run_in_child(__file__, "sigterm_stops_at_the_next_boundary")
    assert "stopping after the episode in progress" in err


def test_the_first_press_raises_and_later_ones_are_only_noted(run_in_child):
    err = run_in_child(__file__, "first_press_raises_and_later_ones_are_only_noted")
    assert err.count("interrupt noted") == 2


def test_a_nested_block_shares_the_outer_count(run_in_child):
    err = run_in_child(__file__, "nested_block_shares_the_outer_count")
    assert err.count("interrupt noted") == 1


def test_stop_at_next_boundary_never_raises(run_in_child):
    err = run_in_child(__file__, "stop_at_next_boundary_never_raises")
    assert "stopping after the episode in progress" in err


# ---- Ctrl-C while `hotloop` starts (issue 24, defect 6) -------------------------------------------------


def _interrupt_cli_when_imported(module: str, *args: str) -> tuple[int, list[str]]:
    """Start `python -X importtime -m hotloop ARGS`, press Ctrl-C as soon as the child has imported
    `module` (its import-time line, written the moment that import ends, is the cue: the press lands in
    the middle of the start-up, not at a guessed time), and return the exit code and the stderr lines
    that are not import timings."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "hotloop", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stderr is not None
    lines = []
    pressed = False
    for line in child.stderr:
        lines.append(line.rstrip("\n"))
        if not pressed and line.startswith("import time:") and line.split("|")[-1].strip() == module:
            child.send_signal(signal.SIGINT)
            pressed = True
    code = child.wait(timeout=120)
    assert pressed, f"{module} was never imported"
    return code, [x for x in lines if not x.startswith("import time:")]


@pytest.mark.parametrize(
    "module",
    [
        "typer.main",  # while the command line itself is imported
        "mujoco._enums",  # inside the command, while `import mujoco` is under way
    ],
)
def test_ctrl_c_while_starting_exits_130_with_one_line(module: str) -> None:
    code, err = _interrupt_cli_when_imported(
        module, "eval", "expert:scripted", "--episodes", "1", "--workers", "0", "--quiet"
    )
    assert code == 130 and err == ["interrupted"], (code, err)


def test_an_interrupted_bench_writes_the_samples_it_took(tmp_path) -> None:
    """Issue 24, defect 9: Ctrl-C during the timed iterations writes what was measured to --json (marked
    interrupted, with its count) and exits 130; the press comes at the progress line for 10 % timed."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "bench.json"
    iters = 10_000  # the press lands at 1,000: a tenth of a second on a quiet machine, 90 % still to go
    child = subprocess.Popen(
        [sys.executable, "-m", "hotloop", "bench", "toy:mlp", "--warmup", "0", "--iters", str(iters),
         "--threads", "1", "--json", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert child.stderr is not None
    lines = []
    for line in child.stderr:
        lines.append(line.rstrip("\n"))
        if "(10%)" in line:
            child.send_signal(signal.SIGINT)
    assert child.wait(timeout=120) == 130, lines
    data = json.loads(out.read_text())
    done = data["completed_iterations"]
    assert data["interrupted"] is True and data["iterations"] == iters
    assert iters // 10 <= done < iters and len(data["samples_ms"]) == done
    assert data["latency_ms"]["p50"] == pytest.approx(sorted(data["samples_ms"])[done // 2], rel=0.5)
    assert all(len(v) == done for v in data["stage_samples_ms"].values())
    assert lines[-1] == f"interrupted after {done} of {iters} timed iterations; wrote them to {out}"
