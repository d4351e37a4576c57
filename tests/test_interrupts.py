import os
import signal
import time

import pytest

from hotloop.interrupts import first_interrupt_only, stop_at_next_boundary


def _press() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, handled in this (the main) thread


def test_the_first_press_raises_and_later_ones_are_only_noted(capsys):
    saved = []
    with first_interrupt_only():
        with pytest.raises(KeyboardInterrupt):
            _press()
            time.sleep(0.1)  # give the handler a moment to run
        _press()  # during the "save": must not raise
        _press()
        saved.append("finished work")
    assert saved == ["finished work"]
    assert capsys.readouterr().err.count("interrupt noted") == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_nested_block_shares_the_outer_count():
    with first_interrupt_only():
        with first_interrupt_only(), pytest.raises(KeyboardInterrupt):
            _press()
            time.sleep(0.1)
        _press()  # the outer block's save after the inner one stopped: noted, not raised
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_stop_at_next_boundary_never_raises(capsys):
    with stop_at_next_boundary("episode") as stop:
        assert not stop()
        _press()
        _press()
        assert stop()
    assert "stopping after the episode in progress" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
