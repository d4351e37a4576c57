"""Running LeRobot's real code in its own venv (`make lerobot-venv`) from the main venv's tests.

Every LeRobot-side step is a script in `lerobot_side/` run by `.venv-lerobot/bin/python` with this checkout's
hotloop and plugin first on the path (the venv holds them editable, perhaps from another checkout), offline
(`HF_HUB_OFFLINE=1`, a private Hugging Face cache: nothing is ever downloaded). Artifacts are compiled by this
venv's `hotloop compile`, as a user compiles them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
LEROBOT_VENV = REPO_ROOT / ".venv-lerobot"
LEROBOT_PYTHON = LEROBOT_VENV / "bin" / "python"
LEROBOT_EVAL = LEROBOT_VENV / "bin" / "lerobot-eval"
PLUGIN = REPO_ROOT / "plugins" / "lerobot_policy_hotloop"
LEROBOT_SIDE = Path(__file__).with_name("lerobot_side")
# Small PushT runs: 96x96 views (the checkpoints' size), 20 steps an episode, both episodes in one batch.
PUSHT = (
    "--env.type=pusht", "--env.episode_length=20", "--env.observation_height=96", "--env.observation_width=96",
    "--eval.n_episodes=2", "--eval.batch_size=2", "--seed=0",
)  # fmt: skip


# One intra-op thread in every LeRobot-side process and `hotloop compile`: on a 2-core box beside another
# xdist worker, torch's two OpenMP threads spin at their barriers (measured under load: 1.56 CPU-s instead of
# 37 ms for one Diffusion inference of these checkpoints; tests/models/conftest.py saw the same).
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def lerobot_env(home: Path) -> dict[str, str]:
    paths = [str(REPO_ROOT / "src"), str(PLUGIN / "src"), str(LEROBOT_SIDE)]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(home / "hf-home"),
        "WANDB_MODE": "disabled",
        **ONE_THREAD,
    }


def run_lerobot(
    args: list[str], home: Path, timeout: float = 600, program: Path = LEROBOT_PYTHON
) -> subprocess.CompletedProcess[str]:
    """`program args...` in the LeRobot venv (a script of lerobot_side/ when args[0] names one)."""
    script = LEROBOT_SIDE / args[0]
    argv = [str(script), *args[1:]] if script.is_file() else args
    return subprocess.run(
        [str(program), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=lerobot_env(home),
        cwd=home,
    )


def run_json(args: list[str], home: Path, timeout: float = 600) -> Any:
    done = run_lerobot(args, home, timeout)
    assert done.returncode == 0, f"{args[0]} failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def compile_artifact(checkpoint: Path, out: Path, tolerance: str) -> Path:
    """`hotloop compile CKPT -o ART` with few, quick candidates (ONNX Runtime fp32 beside eager), one
    thread (recorded in the manifest: the plugin's engine runs with it too)."""
    cmd = [sys.executable, "-m", "hotloop", "compile", str(checkpoint), "-o", str(out), "--backends", "onnxruntime",
           "--precisions", "fp32", "--threads", "1", "--iters", "2", "--warmup", "1", "--no-cache", "--quiet",
           "--max-load", "inf", "--tolerance", tolerance]  # fmt: skip
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), **ONE_THREAD},
    )
    assert done.returncode == 0, f"hotloop compile {checkpoint} failed:\n{done.stderr[-4000:]}"
    return out
