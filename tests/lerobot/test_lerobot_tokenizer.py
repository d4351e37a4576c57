"""The saved-tokenizer path of LeRobot's tokenizer step, on tiny word-level tokenizers written in tmp_path:
padding (longest / max_length, left / right), truncation, the newline step, transformers 5's config rules
(add_bos_token rebuilds the template, truncation_side), and every refusal naming its file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hotloop.errors import CheckpointError, ConfigError
from hotloop.lerobot.processors import read_pipeline
from hotloop.lerobot.tokenizer import load_tokenizer

pytest.importorskip("tokenizers")  # hotloop's optional tokenizer dependency

WORDS = ["pick", "the", "red", "cube", "up", "now"]
IDS = {w: i + 4 for i, w in enumerate(WORDS)}  # after <pad> <unk> <bos> <eos>


def _tokenizer_policy(files: Any, folder: Path, **step: Any) -> Path:
    files.tokenizer(folder / "tokenizer", WORDS, step.pop("tokenizer_config", None))
    config = {
        "max_length": 4, "task_key": "task", "padding_side": "right", "padding": "longest",
        "truncation": True, "tokenizer_name": "tokenizer", **step,
    }  # fmt: skip
    files.pipeline(
        folder,
        "policy_preprocessor",
        [
            ("to_batch_processor", {}, None),
            ("smolvla_new_line_processor", {}, None),
            ("tokenizer_processor", config, None),
        ],
        artifacts={2: {"tokenizer_name": "tokenizer"}},
    )
    return folder


def _run(folder: Path, task: Any) -> tuple[list[list[int]], list[list[bool]]]:
    out = read_pipeline(folder, "policy_preprocessor")(
        {"observation.state": np.zeros(2, np.float32), "task": task}
    )
    ids, mask = out["observation.language.tokens"], out["observation.language.attention_mask"]
    assert ids.dtype == torch.int64 and mask.dtype == torch.bool and ids.shape == mask.shape
    return ids.tolist(), mask.tolist()


def test_longest_padding_right_and_newline(files: Any, tmp_path: Path) -> None:
    """WhitespaceSplit drops the appended newline: "pick the\\n" -> [pick, the] (the fixture's case)."""
    folder = _tokenizer_policy(files, tmp_path)
    ids, mask = _run(folder, ["pick the", "red cube up"])
    assert ids == [[IDS["pick"], IDS["the"], 0], [IDS["red"], IDS["cube"], IDS["up"]]]
    assert mask == [[True, True, False], [True, True, True]]


def test_numpy_task_arrays_read_as_lists_of_text(files: Any, tmp_path: Path) -> None:
    folder = _tokenizer_policy(files, tmp_path)
    want = _run(folder, ["pick the", "red cube up"])
    assert _run(folder, np.array(["pick the", "red cube up"])) == want
    assert _run(folder, np.array(["pick the", "red cube up"], dtype=object)) == want


def test_max_length_padding_on_the_left(files: Any, tmp_path: Path) -> None:
    folder = _tokenizer_policy(files, tmp_path, padding="max_length", padding_side="left", max_length=5)
    ids, mask = _run(folder, "pick the")
    assert ids == [[0, 0, 0, IDS["pick"], IDS["the"]]]
    assert mask == [[False, False, False, True, True]]


def test_truncation_cuts_at_max_length_from_the_saved_side(files: Any, tmp_path: Path) -> None:
    text = "pick the red cube up now"
    right = _tokenizer_policy(files, tmp_path / "right", max_length=3)
    assert _run(right, text)[0] == [[IDS["pick"], IDS["the"], IDS["red"]]]
    left = _tokenizer_policy(
        files, tmp_path / "left", max_length=3, tokenizer_config={"truncation_side": "left"}
    )
    assert _run(left, text)[0] == [[IDS["cube"], IDS["up"], IDS["now"]]]
    whole = _tokenizer_policy(files, tmp_path / "whole", max_length=3, truncation=False)
    assert len(_run(whole, text)[0][0]) == 6


def test_untruncated_ragged_batch_is_refused(files: Any, tmp_path: Path) -> None:
    folder = _tokenizer_policy(files, tmp_path, max_length=2, truncation=False, padding="max_length")
    with pytest.raises(ConfigError, match="different lengths"):
        _run(folder, ["pick", "pick the red"])


def test_explicit_add_bos_token_rebuilds_the_template(files: Any, tmp_path: Path) -> None:
    """transformers 5 rebuilds the post-processor from add_bos/add_eos when the config states them."""
    config = {"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": True, "add_eos_token": True}
    folder = _tokenizer_policy(files, tmp_path, max_length=8, tokenizer_config=config)
    assert _run(folder, "red cube")[0] == [[2, IDS["red"], IDS["cube"], 3]]
    tok = load_tokenizer(folder / "tokenizer")
    ids, _ = tok.encode(["red"], max_length=3, padding="max_length", padding_side="right", truncation=True)
    assert ids.tolist() == [[2, IDS["red"], 3]]  # special tokens count towards max_length


def test_tokenizer_refusals_name_the_file(files: Any, tmp_path: Path) -> None:
    folder = _tokenizer_policy(files, tmp_path / "a")
    (folder / "tokenizer" / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"tokenizer.json is not a readable tokenizers file.*step 2"):
        read_pipeline(folder, "policy_preprocessor")

    folder = _tokenizer_policy(files, tmp_path / "b")
    (folder / "tokenizer" / "tokenizer_config.json").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer_config.json is missing.*tokenizer_processor"):
        read_pipeline(folder, "policy_preprocessor")

    folder = _tokenizer_policy(files, tmp_path / "c", tokenizer_config={"mask_token": "<mask>"})
    with pytest.raises(CheckpointError, match=r"tokenizer_config.json: special token '<mask>'"):
        read_pipeline(folder, "policy_preprocessor")

    folder = _tokenizer_policy(files, tmp_path / "d", tokenizer_config={"pad_token": None})
    with pytest.raises(CheckpointError, match=r"no pad token.*tokenizer_processor pads \('longest'\)"):
        read_pipeline(folder, "policy_preprocessor")

    with pytest.raises(CheckpointError, match="does not exist"):
        load_tokenizer(tmp_path / "nowhere")


def test_tokenizer_name_must_be_a_folder_inside_the_checkpoint(files: Any, tmp_path: Path) -> None:
    folder = _tokenizer_policy(files, tmp_path)
    path = folder / "policy_preprocessor.json"
    data = json.loads(path.read_text())
    del data["steps"][2]["artifacts"]
    data["steps"][2]["config"]["tokenizer_name"] = "google/paligemma-3b-pt-224"
    path.write_text(json.dumps(data))
    with pytest.raises(
        CheckpointError,
        match=r"field 'steps\[2\].config.tokenizer_name' is 'google/paligemma-3b-pt-224'.*downloads nothing",
    ):
        read_pipeline(folder, "policy_preprocessor")
    data["steps"][2]["artifacts"] = {"tokenizer_name": "../tokenizer"}
    path.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"'../tokenizer' must be a path inside"):
        read_pipeline(folder, "policy_preprocessor")


def test_missing_task_is_named(files: Any, tmp_path: Path) -> None:
    folder = _tokenizer_policy(files, tmp_path)
    with pytest.raises(ConfigError, match=r"step 2 \(tokenizer_processor\): the batch has no 'task'"):
        read_pipeline(folder, "policy_preprocessor")({"observation.state": np.zeros(2, np.float32)})


def test_pi05_pipeline_normalises_then_writes_the_state_into_the_tokenized_prompt(
    files: Any, tmp_path: Path
) -> None:
    """pi0.5's order: normalize -> state prompt -> tokenizer (max_length padding) -> device."""
    words = ["Task:", "open", "door,", "State:", "0", "128", "255;", "Action:"]
    files.tokenizer(tmp_path / "tokenizer", words)
    norm = files.normalizer_config({"observation.state": ("STATE", [3])}, {"STATE": "QUANTILES"})
    stats = files.stats({"observation.state": {"q01": torch.zeros(3), "q99": torch.full((3,), 2.0)}})
    tok = {"max_length": 12, "task_key": "task", "padding_side": "right", "padding": "max_length",
           "truncation": True, "tokenizer_name": "tokenizer"}  # fmt: skip
    files.pipeline(
        tmp_path,
        "policy_preprocessor",
        [
            ("rename_observations_processor", {"rename_map": {}}, None),
            ("to_batch_processor", {}, None),
            (
                "relative_actions_processor",
                {"enabled": False, "exclude_joints": [], "action_names": None},
                None,
            ),
            ("normalizer_processor", norm, stats),
            ("pi05_prepare_state_tokenizer_processor_step", {}, None),
            ("tokenizer_processor", tok, None),
            ("device_processor", {"device": "cuda", "float_dtype": None}, None),
        ],
        artifacts={5: {"tokenizer_name": "tokenizer"}},
    )
    state = np.array([0.0, 1.0, 2.0], np.float32)  # -> [-1, 0, 1] -> bins 0, 128, 255
    out = read_pipeline(tmp_path, "policy_preprocessor")({"observation.state": state, "task": "open_door"})
    assert out["task"] == ["Task: open door, State: 0 128 255;\nAction: "]
    ids = {w: i + 4 for i, w in enumerate(words)}
    expected = [ids[w] for w in ["Task:", "open", "door,", "State:", "0", "128", "255;", "Action:"]]
    assert out["observation.language.tokens"].tolist() == [expected + [0] * 4]
    assert out["observation.language.attention_mask"].tolist() == [[True] * 8 + [False] * 4]
