"""Repeated Ctrl-C against a real `hotloop eval` (issue 11, defect 4: a second Ctrl-C during the first
one's shutdown used to lose every finished episode in 4 of 6 tries).

Each try starts `hotloop eval demo:conveyor --workers 2 --json FILE`, waits for the first progress line
(an episode has finished), then sends SIGINT to the whole process group three times within 150 ms, as
an impatient user at a terminal does. A try passes when the command exits 130 and FILE holds the
finished episodes. Run from the repository root:

    MUJOCO_GL=egl PYTHONPATH=src python benchmarks/interrupt_eval.py --tries 6
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one_try(out: Path, episodes: int) -> tuple[int | None, int]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "hotloop", "eval", "demo:conveyor", "--episodes", str(episodes)]
    proc = subprocess.Popen(
        [*cmd, "--workers", "2", "--json", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert proc.stderr is not None
    while True:  # off a terminal, progress is plain lines: the first one means an episode finished
        line = proc.stderr.readline()
        if not line or " ep (" in line:
            break
    for pause in (0.05, 0.1, 0.0):
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(pause)
    proc.communicate(timeout=300)
    kept = len(json.loads(out.read_text())["per_episode"]) if out.exists() else 0
    return proc.returncode, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=6)
    parser.add_argument("--episodes", type=int, default=40)
    args = parser.parse_args()
    passed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.tries):
            code, kept = one_try(Path(tmp) / f"try{i}.json", args.episodes)
            ok = code == 130 and kept > 0
            passed += ok
            print(f"try {i}: exit {code}, finished episodes written: {kept} -> {'ok' if ok else 'LOST'}")
    print(f"finished work kept in {passed} of {args.tries} tries")
    sys.exit(0 if passed == args.tries else 1)


if __name__ == "__main__":
    main()
