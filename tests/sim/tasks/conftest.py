import importlib
import shutil
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).parent / "plugin_pkg"


@pytest.fixture
def slider_plugin(tmp_path, monkeypatch):
    """plugin_pkg/hotloop_test_mujoco_tasks.py installed as a distribution (a dist-info on sys.path) with
    its `slider` task under the `hotloop.tasks` entry point, as `pip install` would leave it."""
    root = tmp_path / "site"
    root.mkdir()
    shutil.copy(PKG / "hotloop_test_mujoco_tasks.py", root)
    dist = root / "hotloop_test_mujoco_tasks-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hotloop-test-mujoco-tasks\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[hotloop.tasks]\nslider = hotloop_test_mujoco_tasks:make_slider\n"
    )
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    yield importlib.import_module("hotloop_test_mujoco_tasks")
    sys.modules.pop("hotloop_test_mujoco_tasks", None)
