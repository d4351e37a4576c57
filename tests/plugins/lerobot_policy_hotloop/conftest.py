"""Fixtures of the plugin tests: the LeRobot venv (required: these tests never skip), checkpoints made by
LeRobot's own code and hotloop's artifacts of them, made once per test session and shared by the xdist
workers (a lock in the session's common temporary folder)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock
from lerobot_plugin_helpers import LEROBOT_PYTHON, compile_artifact, run_json

# The tolerance each artifact is compiled (and so judged) at. SmolVLA's is a cosine only: hotloop's SmolVLM
# numbers its vision patches as transformers 5 does, LeRobot 0.4's transformers 4.57 shifts them by one, so
# the two differ by ~2e-2 (normalised) on a random model; the rest of the pipeline agrees to 1e-6.
TOLERANCES = {"act": "cos:0.9999,maxabs:0.01", "diffusion": "cos:0.9999,maxabs:0.01", "smolvla": "cos:0.9999"}


@pytest.fixture(scope="session")
def lerobot_python() -> Path:
    if not LEROBOT_PYTHON.is_file():
        pytest.fail(
            f"{LEROBOT_PYTHON} is missing: the plugin tests run LeRobot's own released code in its own venv. "
            "Create it with `make lerobot-venv` (`make test` builds it too)."
        )
    return LEROBOT_PYTHON


def _shared(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """`make(folder)` once per session across xdist workers; every worker gets the same folder."""
    root = factory.getbasetemp()
    root = root.parent if root.name.startswith("popen-gw") else root  # xdist: the workers' common folder
    folder = root / "lerobot-plugin" / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not (folder / ".done").is_file():
            folder.mkdir(exist_ok=True)
            make(folder)
            (folder / ".done").write_text("")
    return folder


@pytest.fixture(scope="session")
def lerobot_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working folder and Hugging Face home of the LeRobot processes (nothing of the user's)."""
    return _shared(tmp_path_factory, "home", lambda folder: None)


@pytest.fixture(scope="session")
def checkpoints(
    tmp_path_factory: pytest.TempPathFactory, lerobot_python: Path, lerobot_home: Path
) -> dict[str, Path]:
    def make(folder: Path) -> None:
        made = run_json(["make_checkpoints.py", str(folder), "act", "diffusion", "smolvla"], lerobot_home)
        (folder / "made.json").write_text(json.dumps(made))

    folder = _shared(tmp_path_factory, "checkpoints", make)
    return {k: Path(v) for k, v in json.loads((folder / "made.json").read_text()).items()}


@pytest.fixture(scope="session")
def artifacts(
    tmp_path_factory: pytest.TempPathFactory, checkpoints: dict[str, Path]
) -> Callable[[str], Path]:
    """The artifact of one family's checkpoint, compiled on first use."""

    def artifact(family: str) -> Path:
        def make(folder: Path) -> None:
            compile_artifact(checkpoints[family], folder / "art", TOLERANCES[family])

        return _shared(tmp_path_factory, f"art-{family}", make) / "art"

    return artifact
