"""SmolVLA checkpoint folders for the family tests, written in LeRobot's layout without fixtures: config.json,
model.safetensors ("model." keys, the unused lm_head included), vlm_config.json, both processor pipelines with
their statistics, and a word-level tokenizer saved as transformers saves one. Sizes other than the parity
fixture's (one or two cameras, their own state / action widths, tokenizer max_length...)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from hotloop.families.smolvla.targets import SIZES, SmolVLASizes, build_model, make_config

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"
TINY = SIZES["tiny"]
CAMERA_HW = (24, 40)


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"parity fixtures not found at {FIXTURES} (expected ../shared/fixtures beside the repo)")
    return FIXTURES


@pytest.fixture(autouse=True)
def _single_intra_op_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tokenizer(folder: Path, vocab: int) -> None:
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors

    folder.mkdir(parents=True)
    specials = ["<pad>", "<unk>", "<fake_token_around_image>", "<global-img>", "<image>"]
    words = {t: i for i, t in enumerate(specials)} | {f"w{i}": i for i in range(len(specials), vocab)}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "backend": "tokenizers", "tokenizer_class": "TokenizersBackend", "pad_token": "<pad>",
        "unk_token": "<unk>", "fake_image_token": "<fake_token_around_image>", "global_image_token": "<global-img>",
        "image_token": "<image>", "model_max_length": 1000000000000000019884624838656,
    }  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def _pipeline(
    folder: Path, name: str, steps: list[tuple[str, dict[str, Any], dict[str, torch.Tensor] | None]]
) -> None:
    entries = []
    for i, (registry, config, state) in enumerate(steps):
        entry: dict[str, Any] = {"registry_name": registry, "config": config}
        if registry == "tokenizer_processor":
            entry["artifacts"] = {"tokenizer_name": "tokenizer"}
        if state:
            entry["state_file"] = f"{name}_step_{i}_{registry}.safetensors"
            save_file({k: v.contiguous() for k, v in state.items()}, str(folder / entry["state_file"]))
        entries.append(entry)
    (folder / f"{name}.json").write_text(json.dumps({"name": name, "steps": entries}, indent=2))


def write_checkpoint(
    folder: Path,
    sizes: SmolVLASizes = TINY,
    cameras: tuple[str, ...] = ("top", "wrist"),
    state_dim: int = 10,
    action_dim: int = 4,
    max_length: int = 12,
    seed: int = 0,
    **config_fields: Any,
) -> Path:
    """A random SmolVLA checkpoint folder as LeRobot's save_pretrained lays it out."""
    import dataclasses

    folder.mkdir(parents=True, exist_ok=True)
    cfg = make_config("test", sizes)
    keys = tuple(f"observation.images.{c}" for c in cameras)
    cfg = dataclasses.replace(cfg, camera_keys=keys, state_dim=state_dim, action_dim=action_dim)
    model = build_model(cfg, torch.float32, seed)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(seed + 7)
    state["model.vlm_with_expert.vlm.lm_head.weight"] = torch.randn(
        sizes.vocab, sizes.text_width, generator=g
    )
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    h, w = CAMERA_HW
    features: dict[str, Any] = {"observation.state": {"type": "STATE", "shape": [state_dim]}}
    features.update({k: {"type": "VISUAL", "shape": [3, h, w]} for k in keys})
    outputs = {"action": {"type": "ACTION", "shape": [action_dim]}}
    norm_map = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    config = {
        "type": "smolvla", "n_obs_steps": 1, "input_features": features, "output_features": outputs,
        "chunk_size": sizes.chunk_size, "n_action_steps": sizes.chunk_size, "normalization_mapping": norm_map,
        "max_state_dim": sizes.max_state_dim, "max_action_dim": sizes.max_action_dim,
        "resize_imgs_with_padding": [sizes.image_size, sizes.image_size], "empty_cameras": 0,
        "tokenizer_max_length": max_length, "num_steps": sizes.num_steps, "use_cache": True,
        "vlm_model_name": "HuggingFaceTB/SmolVLM2-500M-Video-Instruct", "add_image_special_tokens": False,
        "attention_mode": sizes.attention_mode, "prefix_length": -1, "pad_language_to": "longest",
        "num_expert_layers": -1, "num_vlm_layers": sizes.text_layers,
        "self_attn_every_n_layers": sizes.self_attn_every_n_layers,
        "expert_width_multiplier": sizes.expert_width_multiplier, "min_period": 0.004, "max_period": 4.0,
        "rtc_config": None,
        **config_fields,
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config, indent=4))
    vlm = {
        "text_config": {
            "model_type": "llama", "vocab_size": sizes.vocab, "hidden_size": sizes.text_width,
            "intermediate_size": sizes.text_mlp, "num_hidden_layers": sizes.text_layers,
            "num_attention_heads": sizes.heads, "num_key_value_heads": sizes.kv_heads, "head_dim": sizes.head_dim,
            "rms_norm_eps": sizes.text_eps, "hidden_act": "silu",
        },
        "vision_config": {
            "hidden_size": sizes.vision_width, "intermediate_size": sizes.vision_mlp,
            "num_hidden_layers": sizes.vision_layers, "num_attention_heads": sizes.vision_heads,
            "image_size": sizes.image_size, "patch_size": sizes.patch, "layer_norm_eps": 1e-6,
            "hidden_act": "gelu_pytorch_tanh",
        },
        "scale_factor": sizes.scale,
    }  # fmt: skip
    (folder / "vlm_config.json").write_text(json.dumps(vlm, indent=2))
    stats: dict[str, torch.Tensor] = {}
    for key, dim in (("observation.state", state_dim), ("action", action_dim)):
        mean = torch.randn(dim, generator=g) * 0.1
        std = 0.5 + torch.rand(dim, generator=g)
        stats.update(
            {
                f"{key}.mean": mean,
                f"{key}.std": std,
                f"{key}.min": mean - 2 * std,
                f"{key}.max": mean + 2 * std,
            }
        )
    normalizer = {"eps": 1e-8, "features": {**features, **outputs}, "norm_map": norm_map}
    tokenizer = {
        "max_length": max_length, "task_key": "task", "padding_side": "right", "padding": "longest",
        "truncation": True, "tokenizer_name": "tokenizer",
    }  # fmt: skip
    device = {"device": "cpu", "float_dtype": None}
    _pipeline(folder, "policy_preprocessor", [
        ("rename_observations_processor", {"rename_map": {}}, None), ("to_batch_processor", {}, None),
        ("smolvla_new_line_processor", {}, None), ("tokenizer_processor", tokenizer, None),
        ("device_processor", device, None), ("normalizer_processor", normalizer, stats),
    ])  # fmt: skip
    unnormalizer = {"eps": 1e-8, "features": outputs, "norm_map": norm_map}
    _pipeline(folder, "policy_postprocessor", [
        ("unnormalizer_processor", unnormalizer, stats), ("device_processor", device, None),
    ])  # fmt: skip
    _tokenizer(folder / "tokenizer", sizes.vocab)
    return folder


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random SmolVLA for the gantry tasks: cameras top + wrist, their 10-d state, 4-d actions."""
    return write_checkpoint(tmp_path_factory.mktemp("smolvla") / "ckpt")


@pytest.fixture
def make_checkpoint(tmp_path: Path) -> Callable[..., Path]:
    def make(**kwargs: Any) -> Path:
        return write_checkpoint(tmp_path / f"ckpt{len(list(tmp_path.iterdir()))}", **kwargs)

    return make
