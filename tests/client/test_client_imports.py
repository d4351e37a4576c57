"""The robot-side client stays dependency-light: importing it loads no torch and none of the server."""

import subprocess
import sys


def test_client_imports_without_torch_or_server():
    code = (
        "import sys, hotloop.client\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'prometheus_client', 'mujoco')"
        " or m.startswith('hotloop.serve'))\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
