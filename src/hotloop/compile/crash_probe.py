"""Run native code that may crash the process in a forked child first, so that a crash refuses one
candidate instead of killing the planner.

OpenVINO's CPU plugin kills the whole process on some graphs: 2026.4 raises SIGFPE compiling any gated
MLP (`down(gelu(gate(x)) * up(x))`, pi's FFN) in bf16 with INFERENCE_NUM_THREADS=1 on a CPU with AMX
(by all appearances an integer division by half the thread count, 0 with one thread), and SIGSEGV
compiling GroupNorm under its snippets (see `backends.openvino`). A Python `try` cannot catch either.

`run_isolated(fn)` forks; the child runs `fn` and leaves with `os._exit` (0: it returned, 3: it raised,
the parent then runs `fn` itself to raise the real error). A child killed by a signal, or still running
after `timeout_s`, is `ProbeFailure`. The fork shares the parent's memory copy-on-write (a full-size
model is not copied), needs no pickling, and re-imports nothing: the probe costs what `fn` costs once
more (OpenVINO hands the child's compiled blob to the parent's compile: `backends.openvino._probe`). OpenVINO runs in a child forked after the parent used it
(checked on 2026.4: the crash above reproduced in the child, the parent kept running).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

DEFAULT_TIMEOUT_S = 1800.0
RAISED = 3  # the child's exit status when `fn` raised


class ProbeFailure(RuntimeError):
    """The probed call crashed the child (`signal_name`) or did not finish in time (`signal_name` None)."""

    def __init__(self, message: str, signal_name: str | None) -> None:
        super().__init__(message)
        self.signal_name = signal_name


def run_isolated(fn: Callable[[], object], what: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
    """Run `fn` in a forked child; returns the child's wall time in seconds. Raises `ProbeFailure` when
    the child died by a signal or ran past `timeout_s` (it is killed); when `fn` raised in the child,
    returns normally (the caller's own call raises the error with its message)."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        import faulthandler

        faulthandler.disable()  # its crash is reported by the parent, in one line, not as a dump
        status = 0
        try:
            fn()
        except BaseException:  # noqa: BLE001 - reported by status; the parent raises it for real
            status = RAISED
        os._exit(status)
    deadline = t0 + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.perf_counter() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise ProbeFailure(f"{what} did not finish in {timeout_s:.0f} s in a probe process", None)
        time.sleep(0.02)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        raise ProbeFailure(f"{what} crashed a probe process ({name})", name)
    return time.perf_counter() - t0
