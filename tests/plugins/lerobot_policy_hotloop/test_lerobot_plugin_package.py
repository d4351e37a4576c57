"""The plugin as LeRobot meets it: the wheel's Name, a cheap import, discovery and loading through
LeRobot's own factory (in the LeRobot venv)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

from lerobot_plugin_helpers import PLUGIN, run_json


def test_wheel_metadata_name_has_underscores(tmp_path: Path, lerobot_python: Path) -> None:
    """LeRobot imports distributions whose metadata Name starts `lerobot_policy_` (a hyphen is never found)."""
    source = (
        tmp_path / "plugin"
    )  # setuptools builds in the source tree: build a copy, leave the checkout clean
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    wheels = tmp_path / "wheels"
    done = subprocess.run(
        [str(lerobot_python), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
         str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        metadata = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        names = [line for line in z.read(metadata).decode().splitlines() if line.startswith("Name:")]
        files = z.namelist()
    assert names == ["Name: lerobot_policy_hotloop"]
    for module in ("configuration_hotloop", "modeling_hotloop", "processor_hotloop"):
        assert f"lerobot_policy_hotloop/{module}.py" in files


def test_import_loads_no_backend(lerobot_python: Path, lerobot_home: Path) -> None:
    """LeRobot imports the plugin in every command: that import registers the type and loads nothing heavy."""
    probe = (
        "import sys, json, lerobot_policy_hotloop\n"
        "from lerobot.configs.policies import PreTrainedConfig\n"
        "print(json.dumps({'known': 'hotloop' in PreTrainedConfig.get_known_choices(), 'modules': sorted(sys.modules)}))"
    )
    out = run_json(["-c", probe], lerobot_home)
    assert out["known"]
    heavy = ("onnxruntime", "openvino", "tensorrt", "hotloop.runtime", "hotloop.compile", "hotloop.families",
             "lerobot_policy_hotloop.modeling_hotloop", "lerobot_policy_hotloop.loading")  # fmt: skip
    loaded = [m for m in out["modules"] if m.startswith(heavy)]
    assert loaded == [], loaded
    assert "lerobot_policy_hotloop.configuration_hotloop" in out["modules"]  # the probe saw the import


def test_lerobot_discovers_and_loads_the_artifact(
    artifacts: Callable[[str], Path], lerobot_home: Path
) -> None:
    art = artifacts("act")
    out = run_json(["discovery.py", str(art)], lerobot_home)
    assert (out["known_before"], out["known_after"]) == (False, True)
    assert out["config_class"] == "HotloopConfig"
    assert out["keys_not_fields"] == []
    assert out["source_type"] == "act"
    assert (out["policy_class"], out["policy_module"]) == (
        "HotloopPolicy",
        "lerobot_policy_hotloop.modeling_hotloop",
    )
    assert out["runs_plan"] and Path(out["engine_path"]) == art
    assert "DeviceProcessorStep" in out["pre_steps"] and "RenameObservationsProcessorStep" in out["pre_steps"]
    assert "NormalizerProcessorStep" in out["pre_steps"] and "UnnormalizerProcessorStep" in out["post_steps"]
    assert (out["own_pre_steps"], out["own_post_steps"]) == (out["pre_steps"], out["post_steps"])
