"""`import mujoco` without losing a Ctrl-C pressed while it runs.

MuJoCo's extension modules initialise for ~50 ms; a KeyboardInterrupt raised inside that initialisation
is swallowed on some builds (the import succeeds, the command runs on and exits 0) and turned into
"ImportError: initialization failed" on others. So while the import runs, a press is only recorded,
and raised as a KeyboardInterrupt once the import is done: the command then stops with its usual one
line and exit 130. Every hotloop module that imports MuJoCo calls `import_mujoco()` first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType


def import_mujoco() -> None:
    """Import MuJoCo once (with MUJOCO_GL=egl unless the user chose), keeping a Ctrl-C pressed meanwhile.
    Nothing happens when it is imported already or not installed (the code that needs it says so)."""
    # MuJoCo picks its GL backend at import; headless machines need EGL. A user's explicit choice wins.
    os.environ.setdefault("MUJOCO_GL", "egl")
    if "mujoco" in sys.modules:
        return
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        with contextlib.suppress(ImportError):
            import mujoco  # noqa: F401
        return
    pressed: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        pressed.append(signum)

    previous = signal.signal(signal.SIGINT, record)
    try:
        import mujoco  # noqa: F401
    except ImportError:
        if not pressed:
            return  # not installed or broken: the module that needs it raises its own error
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signal.SIGINT, None)  # the process's own handler (the CLI's start-up one, say)
        raise KeyboardInterrupt
