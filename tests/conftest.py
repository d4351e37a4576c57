import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

# MuJoCo reads its GL backend at import: headless EGL on machines without a display.
os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture
def run_in_child() -> Callable[..., str]:
    """Run `function()` of a test module in a fresh interpreter and return its stderr.

    For scenarios that send SIGINT to their own process: after hundreds of tests the signal can land
    inside a C extension's callback (the suite's interpreter crashed there), so such a scenario runs in a
    child that holds only what it imports, and a crash fails its one test instead of the whole suite.
    """

    def run(test_file: str, function: str, timeout: float = 120.0) -> str:
        here = Path(test_file).parent
        module = Path(test_file).stem
        child = subprocess.run(
            [sys.executable, "-c", f"import {module} as t; t.{function}(); print('scenario ok')"],
            cwd=here,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert child.returncode == 0 and "scenario ok" in child.stdout, (
            child.stdout[-2000:] + child.stderr[-3000:]
        )
        return child.stderr

    return run
