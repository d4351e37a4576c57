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


def test_the_first_press_raises_and_later_ones_are_only_noted(run_in_child):
    err = run_in_child(__file__, "first_press_raises_and_later_ones_are_only_noted")
    assert err.count("interrupt noted") == 2


def test_a_nested_block_shares_the_outer_count(run_in_child):
    err = run_in_child(__file__, "nested_block_shares_the_outer_count")
    assert err.count("interrupt noted") == 1


def test_stop_at_next_boundary_never_raises(run_in_child):
    err = run_in_child(__file__, "stop_at_next_boundary_never_raises")
    assert "stopping after the episode in progress" in err
