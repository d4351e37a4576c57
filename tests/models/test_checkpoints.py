"""Checkpoint save/load: published key names round-trip, openpi layout, and clear errors."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from hotloop.errors import CheckpointError
from hotloop.families.pi.checkpoint import load_checkpoint, load_weights, save_lerobot_checkpoint
from hotloop.families.pi.policy import NormStats, Stats
from hotloop.families.pi.sampling import PiObservation, sample_actions
from hotloop.models.configs import get_pi_config
from hotloop.models.pi0 import PiModel, init_weights


def _model(name: str = "pi05:tiny", seed: int = 1) -> PiModel:
    return init_weights(PiModel(get_pi_config(name)), torch.Generator().manual_seed(seed)).eval()


def _obs(model: PiModel) -> PiObservation:
    cfg = model.cfg
    g = torch.Generator().manual_seed(0)
    s = cfg.vision.image_size
    return PiObservation(
        images=torch.rand(1, cfg.views, 3, s, s, generator=g) * 2 - 1,
        image_masks=torch.ones(1, cfg.views, dtype=torch.bool),
        lang_tokens=torch.randint(0, cfg.vocab_size, (1, cfg.max_token_len), generator=g),
        lang_masks=torch.ones(1, cfg.max_token_len, dtype=torch.bool),
        state=torch.randn(1, cfg.max_state_dim, generator=g),
    )


def _read(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118


@pytest.fixture()
def saved(tmp_path: Path) -> tuple[Path, PiModel]:
    model = _model()
    stats = NormStats(
        state=Stats(q01=-np.ones(4, np.float32), q99=np.ones(4, np.float32)),
        actions=Stats(q01=np.zeros(3, np.float32), q99=2 * np.ones(3, np.float32)),
        mode="quantiles",
    )
    return save_lerobot_checkpoint(model, model.cfg, tmp_path / "ckpt", norm_stats=stats), model


def _assert_same_model(loaded: PiModel, model: PiModel) -> None:
    """Same weights bit for bit; actions agree to rounding (memory-mapped tensors may take other kernels)."""
    assert all(
        torch.equal(a, b)
        for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True)
    )
    obs = _obs(model)
    assert torch.allclose(sample_actions(loaded, obs), sample_actions(model, obs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["pi0:tiny", "pi05:tiny"])
def test_round_trip_with_published_keys(tmp_path: Path, name: str) -> None:
    model = _model(name)
    folder = save_lerobot_checkpoint(model, model.cfg, tmp_path / "ckpt")
    keys = set(_read(folder / "model.safetensors"))
    assert all(k.startswith("model.") for k in keys)
    assert (
        "model.paligemma_with_expert.paligemma.model.language_model.layers.0.self_attn.q_proj.weight" in keys
    )
    assert (
        "model.paligemma_with_expert.paligemma.model.vision_tower.vision_model.post_layernorm.weight" in keys
    )
    assert ("model.time_mlp_in.weight" in keys) is model.cfg.pi05
    assert ("model.state_proj.weight" in keys) is (not model.cfg.pi05)
    ck = load_checkpoint(folder)
    assert ck.config == model.cfg
    assert ck.report.layout == "lerobot"
    assert not ck.report.missing and not ck.report.unexpected and not ck.report.mismatches
    assert ck.report.ignored == ["model.paligemma_with_expert.gemma_expert.lm_head.weight"]
    # Tiny sizes are saved as the "custom" variant: the tensors are the sizes by design, nothing to note.
    assert not [n for n in ck.report.notes if "variant" in n], ck.report.notes
    _assert_same_model(ck.model, model)


def test_norm_stats_round_trip(saved: tuple[Path, PiModel]) -> None:
    folder, _ = saved
    stats = load_checkpoint(folder).norm_stats
    assert stats is not None and stats.mode == "quantiles"
    assert stats.actions is not None and stats.actions.q99 is not None
    np.testing.assert_array_equal(stats.actions.q99, 2 * np.ones(3))
    x = np.array([0.5, 1.0, 1.5], np.float32)
    np.testing.assert_allclose(stats.unnormalize(stats.normalize(x, "actions"), "actions"), x, atol=1e-6)


def test_lerobot_processor_stats_are_merged(tmp_path: Path) -> None:
    model = _model("pi0:tiny")
    folder = save_lerobot_checkpoint(model, model.cfg, tmp_path / "ckpt")
    meta = json.loads((folder / "config.json").read_text())
    meta["normalization_mapping"] = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    (folder / "config.json").write_text(json.dumps(meta))
    pre = {"observation.state.mean": torch.ones(8), "observation.state.std": torch.full((8,), 2.0)}
    post = {"action.mean": torch.zeros(4), "action.std": torch.full((4,), 3.0)}
    save_file(pre, str(folder / "policy_preprocessor_step_3_normalizer_processor.safetensors"))
    save_file(post, str(folder / "policy_postprocessor_step_0_unnormalizer_processor.safetensors"))
    stats = load_checkpoint(folder).norm_stats
    assert stats is not None and stats.mode == "mean_std"
    assert stats.state is not None and stats.actions is not None
    np.testing.assert_allclose(stats.normalize(np.full(8, 3.0, np.float32), "state"), np.ones(8), atol=1e-5)
    np.testing.assert_allclose(
        stats.unnormalize(np.ones(4, np.float32), "actions"), np.full(4, 3.0), atol=1e-5
    )


def test_openpi_layout_and_legacy_spellings(saved: tuple[Path, PiModel], tmp_path: Path) -> None:
    folder, model = saved
    tensors = _read(folder / "model.safetensors")
    renamed = {}
    for k, v in tensors.items():
        k = k.removeprefix("model.")
        k = k.replace("paligemma.model.language_model.", "paligemma.language_model.model.")
        k = k.replace("paligemma.model.vision_tower.", "paligemma.vision_tower.")
        renamed[k] = v
    del renamed[
        "paligemma_with_expert.paligemma.language_model.model.embed_tokens.weight"
    ]  # tied: lm_head only
    out = tmp_path / "openpi"
    out.mkdir()
    save_file(renamed, str(out / "model.safetensors"))
    (out / "assets" / "robot").mkdir(parents=True)
    (out / "assets" / "robot" / "norm_stats.json").write_text(
        json.dumps(
            {
                "norm_stats": {
                    "state": {"mean": [0.0], "std": [2.0], "q01": [-1.0], "q99": [1.0]},
                    "actions": {"mean": [1.0], "std": [1.0], "q01": [0.0], "q99": [2.0]},
                }
            }
        )
    )
    arch = json.loads((folder / "config.json").read_text())["hotloop_arch"]
    (out / "config.json").write_text(
        json.dumps(
            {
                "hotloop_arch": arch,
                "chunk_size": model.cfg.chunk_size,
                "tokenizer_max_length": model.cfg.max_token_len,
            }
        )
    )
    ck = load_checkpoint(out)
    assert ck.report.layout == "openpi"
    assert any("lm_head" in n for n in ck.report.notes)
    assert ck.config.pi05 and ck.norm_stats is not None and ck.norm_stats.mode == "quantiles"
    _assert_same_model(ck.model, model)


def test_bf16_load_reports_dtype_change(saved: tuple[Path, PiModel]) -> None:
    ck = load_checkpoint(saved[0], dtype=torch.bfloat16)
    assert ck.model.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in ck.model.parameters())
    assert ck.report.dtype_changes and "torch.float32 -> torch.bfloat16" in next(
        iter(ck.report.dtype_changes.values())
    )
    a = sample_actions(ck.model, _obs(ck.model))
    assert a.dtype == torch.float32 and torch.isfinite(a).all()


def test_missing_files_are_named(tmp_path: Path, saved: tuple[Path, PiModel]) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
    (saved[0] / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"missing file 'model.safetensors' in .*ckpt"):
        load_checkpoint(saved[0])


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_safetensors(saved: tuple[Path, PiModel], damage: str) -> None:
    path = saved[0] / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(
        {"truncate": data[: len(data) // 2], "garbage": b"\x07not a safetensors file" * 10, "empty": b""}[
            damage
        ]
    )
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(saved[0])


def test_wrong_shapes_name_expected_and_found(saved: tuple[Path, PiModel]) -> None:
    bigger = replace(
        get_pi_config("pi05:tiny"), expert=replace(get_pi_config("pi05:tiny").expert, mlp_dim=96)
    )
    with torch.device("meta"):
        target = PiModel(bigger)
    with pytest.raises(CheckpointError) as info:
        load_weights(target, saved[0])
    msg = str(info.value)
    assert "shape mismatches (6)" in msg  # gate/up/down in each of the 2 expert layers
    assert "gemma_expert.model.layers.0.mlp.gate_proj.weight: expected (96, 32), found (64, 32)" in msg


def test_missing_and_unexpected_keys_are_listed(saved: tuple[Path, PiModel], tmp_path: Path) -> None:
    folder, _ = saved
    tensors = _read(folder / "model.safetensors")
    del tensors["model.action_out_proj.bias"]
    tensors["model.surprise.weight"] = torch.zeros(2)
    out = tmp_path / "broken"
    shutil.copytree(folder, out)
    save_file(tensors, str(out / "model.safetensors"))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(out)
    msg = str(info.value)
    assert "missing keys (1): model.action_out_proj.bias" in msg
    assert "unexpected keys (1): model.surprise.weight" in msg


def test_pi0_weights_into_pi05_model_fail_clearly(tmp_path: Path) -> None:
    pi0 = _model("pi0:tiny")
    folder = save_lerobot_checkpoint(pi0, pi0.cfg, tmp_path / "pi0")
    with torch.device("meta"):
        target = PiModel(get_pi_config("pi05:tiny"))
    with pytest.raises(
        CheckpointError, match=r"missing keys .*time_mlp_in[\s\S]*unexpected keys .*state_proj"
    ):
        load_weights(target, folder)


def test_sentencepiece_tokenizer_is_loaded(saved: tuple[Path, PiModel], tmp_path: Path) -> None:
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(["pick up the red block", "place it on the belt", "move left", "move right"] * 20)
    )
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(saved[0] / "tokenizer"), vocab_size=26, minloglevel=2
    )
    ck = load_checkpoint(saved[0])
    assert ck.tokenizer is not None
    assert len(ck.tokenizer.encode("pick up the red block")) > 0
