"""Real Ctrl-C presses (SIGINT to this process) against `hotloop.interrupts`.

Each scenario runs in a fresh interpreter: a SIGINT sent to the test process lands wherever its main
thread is, and after hundreds of tests that can be inside a C extension's callback (the suite's interpreter
crashed there once). A child holds only `hotloop.interrupts`, so a crash fails the one test, and the
scenario is what is tested, not the state earlier tests left behind.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


def _run_in_child(scenario: str) -> str:
    """Run `scenario` (a function of this module) in a fresh interpreter; return its stderr."""
    here = Path(__file__).parent
    child = subprocess.run(
        [sys.executable, "-c", f"import test_interrupts as t; t.{scenario}(); print('scenario ok')"],
        cwd=here,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0 and "scenario ok" in child.stdout, (
        child.stdout[-2000:] + child.stderr[-3000:]
    )
    return child.stderr


def test_the_first_press_raises_and_later_ones_are_only_noted():
    err = _run_in_child("first_press_raises_and_later_ones_are_only_noted")
    assert err.count("interrupt noted") == 2


def test_a_nested_block_shares_the_outer_count():
    err = _run_in_child("nested_block_shares_the_outer_count")
    assert err.count("interrupt noted") == 1


def test_stop_at_next_boundary_never_raises():
    err = _run_in_child("stop_at_next_boundary_never_raises")
    assert "stopping after the episode in progress" in err
