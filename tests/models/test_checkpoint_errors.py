"""load_checkpoint on damaged or incomplete directories: one CheckpointError naming the file and field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hotloop.errors import CheckpointError, ConfigError
from hotloop.families.pi.checkpoint import load_checkpoint, save_lerobot_checkpoint
from hotloop.families.pi.policy import NormStats, Stats
from hotloop.families.pi.sampling import PiObservation, sample_actions
from hotloop.models.configs import get_pi_config
from hotloop.models.pi0 import PiModel, init_weights


@pytest.fixture(scope="module")
def saved_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = init_weights(PiModel(get_pi_config("pi05:tiny")), torch.Generator().manual_seed(1)).eval()
    stats = NormStats(
        state=Stats(q01=-np.ones(4, np.float32), q99=np.ones(4, np.float32)),
        actions=Stats(q01=np.zeros(3, np.float32), q99=2 * np.ones(3, np.float32)),
        mode="quantiles",
    )
    return save_lerobot_checkpoint(model, model.cfg, tmp_path_factory.mktemp("ck") / "ckpt", norm_stats=stats)


@pytest.fixture()
def ckpt(saved_once: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved_once, tmp_path / "ckpt"))


def _edit_config(folder: Path, **fields: Any) -> None:
    meta = json.loads((folder / "config.json").read_text())
    meta.update(fields)
    (folder / "config.json").write_text(json.dumps(meta))


def test_missing_config_needs_the_chunk_size_and_states_every_default(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    """The issue's case: without config.json the fixture loaded as chunk 50 / 200 tokens, silently."""
    folder = Path(shutil.copytree(fixtures_dir / "lerobot-pi05-tiny", tmp_path / "noconfig"))
    (folder / "config.json").unlink()
    with pytest.raises(
        CheckpointError, match=r"no config.json.*chunk size .*not stored in the tensors.*chunk_size="
    ):
        load_checkpoint(folder)
    ck = load_checkpoint(folder, chunk_size=10)
    assert ck.config.chunk_size == 10 and ck.config.max_token_len == 200
    notes = " | ".join(ck.report.notes)
    assert (
        "no config.json" in notes and "max_token_len 200 (openpi's default)" in notes and "views 1" in notes
    )
    # With the two values the tensors cannot show, the directory reproduces LeRobot's actions.
    ck = load_checkpoint(folder, chunk_size=10, max_token_len=12)
    inputs = np.load(folder / "inputs.npz")
    obs = PiObservation(
        images=torch.from_numpy(inputs["image_0"])[:, None],
        image_masks=torch.from_numpy(inputs["img_mask_0"])[:, None],
        lang_tokens=torch.from_numpy(inputs["tokens"]),
        lang_masks=torch.from_numpy(inputs["masks"]),
    )
    actions = sample_actions(
        ck.model, obs, noise=torch.from_numpy(np.load(folder / "noise.npy")), num_steps=10
    )
    np.testing.assert_allclose(actions.numpy(), np.load(folder / "actions.npy"), atol=1e-5, rtol=0)


def test_arguments_override_config(ckpt: Path) -> None:
    ck = load_checkpoint(ckpt, chunk_size=4, max_token_len=20, views=2)
    assert (ck.config.chunk_size, ck.config.max_token_len, ck.config.views) == (4, 20, 2)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"[1, 2]", r"config.json must hold a JSON object \{...\}, not a list"),
        (b"null", r"config.json must hold a JSON object .*not null"),
        (b"3.5", r"config.json must hold a JSON object .*not a number"),
        (b'{"type": "pi05",', r"config.json is not valid JSON \(line 1"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", r"config.json is not a text file"),
    ],
)
def test_config_that_is_not_an_object(ckpt: Path, content: bytes, match: str) -> None:
    (ckpt / "config.json").write_bytes(content)
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(ckpt)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (
            {"chunk_size": "10"},
            r"field 'chunk_size' must be an integer >= 1 and <= 1000 \(got a string '10'\)",
        ),
        ({"chunk_size": -1}, r"field 'chunk_size' must be an integer >= 1"),
        ({"chunk_size": None}, r"field 'chunk_size' must be an integer >= 1 and <= 1000 \(got null"),
        ({"chunk_size": True}, r"field 'chunk_size' must be an integer >= 1 and <= 1000 \(got a boolean"),
        ({"tokenizer_max_length": 1.5}, r"field 'tokenizer_max_length' must be an integer"),
        ({"type": 5}, r"field 'type' must be one of 'pi0', 'pi05'"),
        ({"type": "pi0"}, r"field 'type' is 'pi0' but the tensors are a pi05"),
        ({"hotloop_arch": [1]}, r"field 'hotloop_arch' must be a JSON object"),
        ({"input_features": {"cam": 3}}, r"field 'input_features.cam' must be a JSON object"),
        ({"input_features": []}, r"field 'input_features' must be a JSON object"),
        ({"empty_cameras": -2}, r"field 'empty_cameras' must be an integer >= 0"),
        ({"image_resolution": "56"}, r"field 'image_resolution' must be a non-empty list of finite numbers"),
        ({"min_period": "x"}, r"field 'min_period' must be a finite number"),
        ({"max_period": 0}, r"field 'max_period' must be a number > 0"),
        ({"paligemma_variant": 2}, r"field 'paligemma_variant' must be a string"),
        (
            {"normalization_mapping": {"STATE": "ZSCORE"}},
            r"'normalization_mapping.STATE' is 'ZSCORE'; use one of",
        ),
        ({"normalization_mapping": "x"}, r"field 'normalization_mapping' must be a JSON object"),
    ],
)
def test_config_fields_of_the_wrong_type_are_named(ckpt: Path, fields: dict[str, Any], match: str) -> None:
    _edit_config(ckpt, **fields)
    with pytest.raises(CheckpointError, match=match) as info:
        load_checkpoint(ckpt)
    assert f"{ckpt / 'config.json'}: " in str(info.value)


def test_arch_that_contradicts_the_tensors_is_an_error(ckpt: Path) -> None:
    meta = json.loads((ckpt / "config.json").read_text())
    meta["hotloop_arch"]["vlm"]["width"] = 99
    (ckpt / "config.json").write_text(json.dumps(meta))
    with pytest.raises(
        CheckpointError, match=r"field 'hotloop_arch.vlm.width' is 99 but the tensors hold 64"
    ):
        load_checkpoint(ckpt)


@pytest.mark.parametrize(
    ("arch", "match"),
    [
        ("[]", r"tiny_arch.json must hold a JSON object"),
        ("{bad", r"tiny_arch.json is not valid JSON"),
        ('{"vlm": {"head_dim": "16"}}', r"tiny_arch.json: field 'vlm.head_dim' must be an integer"),
        ('{"vlm": 7}', r"tiny_arch.json: field 'vlm' must be a JSON object"),
        ({"vocab_size": 5}, r"tiny_arch.json: field 'vocab_size' is 5 but the tensors hold 1024"),
        ('{"vision": {"image_size": 224}}', r"field 'vision.image_size' is 224 but the tensors hold 56"),
        (
            '{"vlm": {"head_dim": 48}}',
            r"vlm: q/k projections \(128/16 rows\) are not multiples of head_dim 48",
        ),
    ],
)
def test_tiny_arch_is_checked(ckpt: Path, arch: str | dict[str, Any], match: str) -> None:
    meta = json.loads((ckpt / "config.json").read_text())
    good = meta.pop("hotloop_arch")  # tiny_arch.json is read only when config.json has no hotloop_arch
    (ckpt / "config.json").write_text(json.dumps(meta))
    (ckpt / "tiny_arch.json").write_text(arch if isinstance(arch, str) else json.dumps({**good, **arch}))
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(ckpt)


@pytest.mark.parametrize(
    ("stats", "match"),
    [
        ("[]", r"norm_stats.json must hold a JSON object"),
        ('{"other": 1}', r"norm_stats.json has no 'norm_stats' object"),
        ('{"norm_stats": []}', r"field 'norm_stats' must be a JSON object"),
        ('{"norm_stats": {"state": 3}}', r"field 'norm_stats.state' must be a JSON object \{...\} or null"),
        (
            '{"norm_stats": {"state": {"q01": ["a"], "q99": [1]}}}',
            r"'norm_stats.state.q01' must be a non-empty",
        ),
        (
            '{"norm_stats": {"state": {"q01": [0, 0], "q99": [1]}}}',
            r"state statistics have lists of different",
        ),
        (
            '{"norm_stats": {"state": {"mean": [0], "std": [1]}}}',
            r"mode 'quantiles' needs norm_stats.state.q01 and norm_stats.state.q99",
        ),
        ('{"norm_stats": {"mode": "zscore"}}', r"'norm_stats.mode' is 'zscore'; use one of mean_std"),
        ('{"norm_stats": {"actions": {"q01": [NaN], "q99": [1]}}}', r"'norm_stats.actions.q01' must be"),
    ],
)
def test_norm_stats_are_checked(ckpt: Path, stats: str, match: str) -> None:
    (ckpt / "norm_stats.json").write_text(stats)
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(ckpt)


def test_a_file_path_is_not_called_missing(ckpt: Path) -> None:
    with pytest.raises(CheckpointError, match=r"model.safetensors is a file; pass the checkpoint directory"):
        load_checkpoint(ckpt / "model.safetensors")


def test_dtypes_and_devices(ckpt: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"dtype 'float16' is not supported \(pi0/pi0.5 produce NaN.*float32, bfloat16"
    ):
        load_checkpoint(ckpt, dtype="float16")
    with pytest.raises(
        ConfigError, match=r"dtype torch.int8 is not supported; use one of: float32, bfloat16"
    ):
        load_checkpoint(ckpt, dtype=torch.int8)
    with pytest.raises(ConfigError, match=r"device 'gpu0' is not a device"):
        load_checkpoint(ckpt, device="gpu0")
    with pytest.raises(ConfigError, match=r"chunk_size must be a positive integer \(got 0\)"):
        load_checkpoint(ckpt, chunk_size=0)
    ck = load_checkpoint(ckpt, dtype="bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in ck.model.parameters())


# ---- property-based: any config.json / tiny_arch.json / norm_stats.json content -----------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 300) | st.floats(allow_nan=True) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
CONFIG_KEYS = (
    "type",
    "chunk_size",
    "action_horizon",
    "tokenizer_max_length",
    "max_token_len",
    "paligemma_variant",
    "action_expert_variant",
    "hotloop_arch",
    "input_features",
    "empty_cameras",
    "image_resolution",
    "min_period",
    "max_period",
    "num_inference_steps",
    "max_state_dim",
    "max_action_dim",
    "normalization_mapping",
)
PLAUSIBLE = {
    "type": st.sampled_from(["pi0", "pi05", "PI05", ""]),
    "chunk_size": st.integers(-1, 64),
    "tokenizer_max_length": st.integers(-1, 64),
    "hotloop_arch": st.fixed_dictionaries(
        {},
        optional={"vlm": st.fixed_dictionaries({}, optional={"head_dim": st.sampled_from([8, 16, 32, 3])})},
    ),
    "input_features": st.dictionaries(
        st.text(max_size=4),
        st.fixed_dictionaries({"type": st.sampled_from(["VISUAL", "STATE", 3])}),
        max_size=3,
    ),
    "normalization_mapping": st.fixed_dictionaries(
        {}, optional={"STATE": st.sampled_from(["MEAN_STD", "QUANTILES", "IDENTITY", "x", 1])}
    ),
}
CONFIGS = st.fixed_dictionaries(
    {}, optional={k: (PLAUSIBLE[k] | JSON) if k in PLAUSIBLE else JSON for k in CONFIG_KEYS}
)


def _one_line_or_loads(folder: Path) -> None:
    try:
        ck = load_checkpoint(folder)
    except (CheckpointError, ConfigError) as exc:
        assert "\n" not in str(exc) and str(exc), repr(exc)
    else:
        assert ck.config.chunk_size >= 1 and ck.model is not None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=CONFIGS | JSON)
def test_any_config_json_loads_or_gives_one_line(ckpt: Path, config: Any) -> None:
    (ckpt / "config.json").write_text(json.dumps(config))
    _one_line_or_loads(ckpt)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arch=JSON, stats=JSON, raw=st.binary(max_size=40))
def test_any_arch_and_stats_load_or_give_one_line(ckpt: Path, arch: Any, stats: Any, raw: bytes) -> None:
    meta = json.loads((ckpt / "config.json").read_text())
    meta.pop("hotloop_arch", None)
    (ckpt / "config.json").write_text(json.dumps(meta))
    (ckpt / "tiny_arch.json").write_text(json.dumps(arch))
    _one_line_or_loads(ckpt)
    (ckpt / "tiny_arch.json").unlink()
    (ckpt / "norm_stats.json").write_text(json.dumps({"norm_stats": stats}))
    _one_line_or_loads(ckpt)
    (ckpt / "norm_stats.json").write_bytes(raw)
    _one_line_or_loads(ckpt)
