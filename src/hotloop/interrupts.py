"""Ctrl-C (and SIGTERM) that cannot lose finished work.

The first Ctrl-C stops the work as usual (KeyboardInterrupt); what follows it (stopping workers,
writing the episodes that finished) must not be cut short by an impatient second or third press, which
used to lose every finished episode. Inside `first_interrupt_only()` later presses are counted and
reported on stderr, not raised. Nested uses share the outer count, so an inner block that has handled
the first press does not make the next one raise again in the outer block's save.

Work made of short units (recording expert episodes) uses `stop_at_next_boundary()` instead: Ctrl-C
never raises there, the loop stops after the unit in progress and writes the rest.

SIGTERM (what `timeout`, `kill` and job schedulers send) is handled as Ctrl-C inside both blocks: the
same KeyboardInterrupt, the same save, the same exit code 130. Without it the process died at once,
its finished episodes unsaved and its worker processes left running.

While the command line starts (its imports take a second on a busy machine) nothing is at stake:
`exit_while_starting()` makes Ctrl-C there exit 130 with one line instead of a traceback from inside
an import.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

# The signals that mean "stop, keeping what finished": Ctrl-C and a polite kill (`timeout`, a scheduler).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _FirstOnly:
    """A SIGINT / SIGTERM handler: raise on the first signal, note the later ones."""

    def __init__(self) -> None:
        self.presses = 0

    def __call__(self, signum: int, frame: FrameType | None) -> Any:
        self.presses += 1
        if self.presses == 1:
            raise KeyboardInterrupt
        print("interrupt noted: saving the finished work first", file=sys.stderr, flush=True)


@contextmanager
def first_interrupt_only() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; elsewhere nothing changes
        return
    if isinstance(signal.getsignal(signal.SIGINT), _FirstOnly):
        yield  # an outer block already counts the presses
        return
    handler = _FirstOnly()  # one count for both signals: a Ctrl-C after a SIGTERM is a later press
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def stop_at_next_boundary(what: str) -> Iterator[Callable[[], bool]]:
    """Ctrl-C (or SIGTERM) asks the work to stop at its next boundary (the end of the `what` in progress) instead of
    raising: the loop polls the returned function and writes what finished. For work made of short
    units (an expert episode takes seconds) that keeps everything but the unit in progress."""
    presses = [0]

    def handler(signum: int, frame: FrameType | None) -> None:
        presses[0] += 1
        print(
            f"interrupt: stopping after the {what} in progress, then writing the finished ones",
            file=sys.stderr,
            flush=True,
        )

    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield lambda: presses[0] > 0
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


INTERRUPTED = "interrupted"  # the one line a Ctrl-C with nothing to save prints (exit code 130)


def _exit_130(signum: int, frame: FrameType | None) -> Any:
    print(INTERRUPTED, file=sys.stderr, flush=True)
    raise SystemExit(130)  # not a KeyboardInterrupt: it leaves the import machinery without a traceback


def exit_while_starting() -> Callable[[], None]:
    """Ctrl-C exits 130 with one line until the returned function puts the previous handler back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGINT, _exit_130)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)

    return restore


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a Ctrl-C is somewhere in `exc`'s chain: a C extension's module initialisation (MuJoCo's,
    through pybind11) turns a KeyboardInterrupt raised inside it into "ImportError: initialization
    failed", which is the user's Ctrl-C, not a broken install."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
