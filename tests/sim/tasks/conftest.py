import importlib
import shutil
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).parent / "plugin_pkg"


def _install_slider(root: Path, monkeypatch: pytest.MonkeyPatch):
    """plugin_pkg/hotloop_test_mujoco_tasks.py installed as a distribution (a dist-info on sys.path) with
    its `slider` task under the `hotloop.tasks` entry point, as `pip install` would leave it."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(PKG / "hotloop_test_mujoco_tasks.py", root)
    dist = root / "hotloop_test_mujoco_tasks-0.1.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hotloop-test-mujoco-tasks\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[hotloop.tasks]\nslider = hotloop_test_mujoco_tasks:make_slider\n"
    )
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    return importlib.import_module("hotloop_test_mujoco_tasks")


@pytest.fixture
def slider_plugin(tmp_path, monkeypatch):
    yield _install_slider(tmp_path / "site", monkeypatch)
    sys.modules.pop("hotloop_test_mujoco_tasks", None)


@pytest.fixture(scope="module")
def slider_dataset(tmp_path_factory):
    """The slider plugin installed for a whole module, and a dataset `hotloop record` wrote of it: 4 expert
    episodes with its own cameras (`corner`, `gripper`) at 64 px, the size every demo trainer takes."""
    from hotloop.datasets.recorder import record

    root = tmp_path_factory.mktemp("slider")
    with pytest.MonkeyPatch.context() as monkeypatch:
        _install_slider(root / "site", monkeypatch)
        result = record("slider", 4, root / "dataset", image_size=64)
        assert result["successes"] == 4
        yield root / "dataset"
    sys.modules.pop("hotloop_test_mujoco_tasks", None)
