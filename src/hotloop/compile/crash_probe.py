"""Run native code that may crash the process in a fresh child process first, so that a crash refuses
one candidate instead of killing the planner (or a server loading a plan).

OpenVINO's CPU plugin kills the whole process on some graphs: 2026.4 raises SIGFPE compiling any gated
MLP (`down(gelu(gate(x)) * up(x))`, pi's FFN) in bf16 with INFERENCE_NUM_THREADS=1 on a CPU with AMX
(by all appearances an integer division by half the thread count, 0 with one thread), and SIGSEGV
compiling GroupNorm under its snippets (see `backends.openvino`). A Python `try` cannot catch either.

`run_child(argv)` starts `argv` as a new process and waits: exit 0 is a success; any other exit status is
"it raised" (the caller then makes its own call, which raises the real error with its message); a child
killed by a signal, or still running after `timeout_s` (it is killed), is `ProbeFailure`.

Why a new interpreter and not `os.fork()`: a fork of a process that has run OpenVINO copies its TBB
arena and its locks but none of its worker threads, and the child can wait forever on them. CI saw it
once: a graph that compiles in a second at 1 thread, probed at 2 threads in a process that had already
compiled it, hung for the whole 30-minute limit. A new interpreter that imports only openvino and numpy
costs about 0.2 s more than a fork (measured: `python -c "import openvino; openvino.Core()"` 0.18 s).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence

DEFAULT_TIMEOUT_S = 1800.0


class ProbeFailure(RuntimeError):
    """The probed call crashed the child (`signal_name`) or did not finish in time (`signal_name` None)."""

    def __init__(self, message: str, signal_name: str | None) -> None:
        super().__init__(message)
        self.signal_name = signal_name


def run_child(argv: Sequence[str], what: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
    """Run `argv` as a child process; returns its wall time in seconds. Raises `ProbeFailure` when the
    child died by a signal or ran past `timeout_s`; when it exited with any other non-zero status, returns
    normally (the caller's own call raises the error with its message)."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:  # subprocess.run has killed it and reaped it
        raise ProbeFailure(f"{what} did not finish in {timeout_s:.0f} s in a probe process", None) from None
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        raise ProbeFailure(f"{what} crashed a probe process ({name})", name)
    return time.perf_counter() - t0
