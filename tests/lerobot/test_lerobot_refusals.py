"""Every pipeline hotloop cannot run exactly as LeRobot does is refused with one CheckpointError naming the
file, the step (index and registry name) and the field -- never skipped, never approximated."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from hotloop.errors import CheckpointError
from hotloop.lerobot.features import read_policy_features
from hotloop.lerobot.processors import read_pipeline
from hotloop.models.checkpoint_meta import Fields

STATE = {"observation.state": ("STATE", [3])}
STATS = {"observation.state": {"mean": torch.zeros(3), "std": torch.ones(3)}}


def _normalizer_policy(files: Any, folder: Path, config: dict[str, Any] | None = None, **kw: Any) -> Path:
    cfg = config or files.normalizer_config(STATE, {"STATE": "MEAN_STD"})
    stats = kw.pop("stats", STATS)
    files.pipeline(
        folder,
        "policy_preprocessor",
        [
            ("rename_observations_processor", {"rename_map": {}}, None),
            ("device_processor", kw.pop("device", {"device": "cpu", "float_dtype": None}), None),
            ("normalizer_processor", cfg, files.stats(stats) if stats else None),
        ],
    )
    return folder


def _refused(folder: Path, *parts: str) -> str:
    with pytest.raises(CheckpointError) as info:
        read_pipeline(folder, "policy_preprocessor")
    message = str(info.value)
    for part in parts:
        assert re.search(part, message), f"{part!r} not in: {message}"
    return message


def _edit(folder: Path, edit: Any) -> None:
    path = folder / "policy_preprocessor.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_unknown_step_and_class_steps(files: Any, tmp_path: Path) -> None:
    folder = _normalizer_policy(files, tmp_path)
    _edit(folder, lambda d: d["steps"][1].update(registry_name="image_crop_resize_processor"))
    _refused(
        folder, "policy_preprocessor.json", r"'steps\[1\].registry_name'", "'image_crop_resize_processor'"
    )
    _edit(folder, lambda d: d["steps"][1].pop("registry_name") and d["steps"][1].update({"class": "my.Step"}))
    _refused(folder, "policy_preprocessor.json", "step 1 has the class 'my.Step'")


def test_unknown_norm_mode_and_feature_type(files: Any, tmp_path: Path) -> None:
    cfg = files.normalizer_config(STATE, {"STATE": "ROBUST_SCALE"})
    _refused(
        _normalizer_policy(files, tmp_path / "a", cfg),
        "policy_preprocessor.json",
        r"'steps\[2\].config.norm_map.STATE'",
        "QUANTILE10",
        r"\(step 2: normalizer_processor\)",
    )
    cfg = files.normalizer_config(STATE, {"POINTCLOUD": "MEAN_STD"})
    _refused(_normalizer_policy(files, tmp_path / "b", cfg), r"'steps\[2\].config.norm_map.POINTCLOUD'")
    cfg = files.normalizer_config({"observation.state": ("JOINTS", [3])}, {"STATE": "MEAN_STD"})
    _refused(
        _normalizer_policy(files, tmp_path / "c", cfg),
        r"'steps\[2\].config.features.observation.state.type'",
        "step 2: normalizer_processor",
    )


def test_stats_file_missing_or_unreadable(files: Any, tmp_path: Path) -> None:
    folder = _normalizer_policy(files, tmp_path / "a")
    stats_file = folder / "policy_preprocessor_step_2_normalizer_processor.safetensors"
    stats_file.unlink()
    _refused(folder, re.escape(str(stats_file)) + " is missing", r"\(step 2: normalizer_processor\)")
    folder = _normalizer_policy(files, tmp_path / "b")
    (folder / stats_file.name).write_bytes(b"\x00" * 20)
    _refused(folder, "not a readable safetensors file", "step 2: normalizer_processor")


def test_stats_lacking_a_key_a_feature_needs(files: Any, tmp_path: Path) -> None:
    folder = _normalizer_policy(files, tmp_path / "a", stats={"observation.state": {"mean": torch.zeros(3)}})
    _refused(
        folder,
        "policy_preprocessor_step_2_normalizer_processor.safetensors",
        "lacks 'observation.state.std'",
        "MEAN_STD",
        "step 2: normalizer_processor",
    )
    # LeRobot would pass an unnormalised state through here; hotloop refuses.
    folder = _normalizer_policy(
        files, tmp_path / "b", stats={"action": {"mean": torch.zeros(3), "std": torch.ones(3)}}
    )
    _refused(folder, "lacks 'observation.state.mean'")
    folder = _normalizer_policy(files, tmp_path / "c", stats={})
    _refused(
        folder,
        "policy_preprocessor.json: has no state_file",
        "'observation.state.mean' and 'observation.state.std'",
    )
    cfg = files.normalizer_config(STATE, {"STATE": "QUANTILES"})
    _refused(
        _normalizer_policy(files, tmp_path / "d", cfg),
        "lacks 'observation.state.q01'",
        "q01' and 'observation.state.q99'",
    )


def test_stats_of_the_wrong_shape_or_not_finite(files: Any, tmp_path: Path) -> None:
    bad = {"observation.state": {"mean": torch.zeros(4), "std": torch.ones(4)}}
    _refused(
        _normalizer_policy(files, tmp_path / "a", stats=bad),
        r"'observation.state.mean' has shape \(4,\).*\(3,\)",
        "step 2: normalizer_processor",
    )
    cfg = files.normalizer_config({"observation.images.top": ("VISUAL", [3, 8, 8])}, {"VISUAL": "MEAN_STD"})
    image = {"observation.images.top": {"mean": torch.zeros(4, 1, 1), "std": torch.ones(4, 1, 1)}}
    _refused(_normalizer_policy(files, tmp_path / "b", cfg, stats=image), r"\(4, 1, 1\).*\(3, 8, 8\)")
    nan = {"observation.state": {"mean": torch.zeros(3), "std": torch.tensor([1.0, float("nan"), 1.0])}}
    _refused(
        _normalizer_policy(files, tmp_path / "c", stats=nan),
        "'observation.state.std' holds 1 non-finite value",
    )


def test_float_dtypes_hotloop_cannot_honour(files: Any, tmp_path: Path) -> None:
    for i, dtype in enumerate(("bfloat16", "float16", "double")):
        folder = _normalizer_policy(files, tmp_path / str(i), device={"device": "cuda", "float_dtype": dtype})
        _refused(folder, r"'steps\[1\].config.float_dtype' is '" + dtype, r"\(step 1: device_processor\)")
    folder = _normalizer_policy(files, tmp_path / "x", device={"device": "cpu", "float_dtype": "float8"})
    _refused(folder, r"'steps\[1\].config.float_dtype' must be null or one of")
    for i, ok in enumerate((None, "float32", "float")):  # the names that mean float32 are honoured
        read_pipeline(
            _normalizer_policy(files, tmp_path / f"ok{i}", device={"device": "mps", "float_dtype": ok}),
            "policy_preprocessor",
        )


def test_config_keys_lerobot_would_not_take(files: Any, tmp_path: Path) -> None:
    folder = _normalizer_policy(files, tmp_path / "a")
    _edit(folder, lambda d: d["steps"][0]["config"].update(rename_mapping={}))
    _refused(folder, r"'steps\[0\].config.rename_mapping' is not a setting of rename_observations_processor")
    cfg = files.normalizer_config(STATE, {"STATE": "MEAN_STD"})
    cfg["stats"] = {"observation.state": {"mean": [0, 0, 0], "std": [1, 1, 1]}}
    _refused(_normalizer_policy(files, tmp_path / "b", cfg), r"'steps\[2\].config.stats' is set")
    folder = _normalizer_policy(files, tmp_path / "c")
    _edit(folder, lambda d: d["steps"][2]["config"].update(eps=-1.0))
    _refused(folder, r"'steps\[2\].config.eps' must be a number >= 0")
    folder = _normalizer_policy(files, tmp_path / "d")
    _edit(folder, lambda d: d["steps"][2]["config"].pop("norm_map"))
    _refused(folder, r"'steps\[2\].config.norm_map' is missing")


def test_pipeline_file_itself(files: Any, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"policy_postprocessor.json is missing"):
        read_pipeline(tmp_path, "policy_postprocessor")
    (tmp_path / "policy_preprocessor.json").write_text('{"name": "policy_preprocessor", "steps": {}}')
    _refused(tmp_path, "field 'steps' must be a list")
    (tmp_path / "policy_preprocessor.json").write_text('{"steps": [')
    _refused(tmp_path, "is not valid JSON")
    (tmp_path / "policy_preprocessor.json").write_text(
        '{"steps": [{"registry_name": "to_batch_processor", "state_file": "/etc/x"}]}'
    )
    _refused(tmp_path, "state_file '/etc/x' must be a path inside")


def test_policy_features_from_config_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    config = {
        "input_features": {"observation.state": {"type": "STATE", "shape": [6]}},
        "output_features": {"action": {"type": "ACTION", "shape": [6]}},
    }
    inputs, outputs = read_policy_features(Fields(config, path))
    assert inputs["observation.state"].shape == (6,) and outputs["action"].type.value == "ACTION"
    config["input_features"]["observation.state"]["shape"] = [6.5]
    with pytest.raises(CheckpointError, match=r"config.json: field 'input_features.observation.state.shape'"):
        read_policy_features(Fields(config, path))
    config["input_features"] = {"observation.state": {"shape": [6]}}
    with pytest.raises(CheckpointError, match=r"'input_features.observation.state.type' is missing"):
        read_policy_features(Fields(config, path))
