"""SmolVLA on random checkpoints written in LeRobot's layout (no fixtures needed): options, determinism, refusals,
and the three sub-engines traced.

`write_checkpoint` lays out what LeRobot's save_pretrained writes (config.json, model.safetensors with "model."
keys, policy_preprocessor.json + the tokenizer folder) plus vlm_config.json for the VLM values no tensor shows. Its
key names and shapes are derived here from LeRobot's construction rules (smolvlm_with_expert.py), not from
hotloop's model, so a naming or shape slip on either side fails the load.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from hotloop.errors import CheckpointError, ConfigError
from hotloop.models.smolvla import (
    load_smolvla,
    load_tokenizer,
    predict_action_chunk,
    prepare_images,
    prepare_state,
    resize_with_pad,
    sample_actions,
)

BASE: dict[str, Any] = {
    "text": {"hidden": 64, "mlp": 96, "layers": 4, "heads": 4, "kv": 2, "head_dim": 16, "eps": 1e-5},
    "vision": {"hidden": 32, "mlp": 48, "layers": 2, "heads": 2, "image": 32, "patch": 8},
    "scale": 2,
    "vocab": 64,
    "policy": {
        "cameras": ["observation.images.top"],
        "empty_cameras": 0,
        "resize": [32, 32],
        "chunk_size": 6,
        "n_action_steps": 4,
        "max_state_dim": 8,
        "max_action_dim": 7,
        "state_dim": 5,
        "action_dim": 4,
        "num_steps": 4,
        "num_vlm_layers": 4,
        "num_expert_layers": -1,
        "self_attn_every_n_layers": 2,
        "attention_mode": "cross_attn",
        "expert_width_multiplier": 0.75,
        "add_image_special_tokens": False,
        "tokenizer_max_length": 12,
        "prefix_length": -1,
    },
    "truncation": True,
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


def lerobot_intermediate_size(hidden: int) -> int:  # smolvlm_with_expert.get_intermediate_size
    h = int(4 * int(2 * hidden / 3))
    return 256 * ((h + 255) // 256)


def lerobot_shapes(a: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    t, v, p = a["text"], a["vision"], a["policy"]
    tw, q_out, kv_out = t["hidden"], t["heads"] * t["head_dim"], t["kv"] * t["head_dim"]
    ew = int(tw * p["expert_width_multiplier"])
    n_exp = p["num_expert_layers"] if p["num_expert_layers"] > 0 else p["num_vlm_layers"]
    every = p["self_attn_every_n_layers"]
    tm, vm, ex = (
        "vlm_with_expert.vlm.model.text_model.",
        "vlm_with_expert.vlm.model.vision_model.",
        "vlm_with_expert.lm_expert.",
    )
    s: dict[str, tuple[int, ...]] = {
        "state_proj.weight": (tw, p["max_state_dim"]), "state_proj.bias": (tw,),
        "action_in_proj.weight": (ew, p["max_action_dim"]), "action_in_proj.bias": (ew,),
        "action_out_proj.weight": (p["max_action_dim"], ew), "action_out_proj.bias": (p["max_action_dim"],),
        "action_time_mlp_in.weight": (ew, 2 * ew), "action_time_mlp_in.bias": (ew,),
        "action_time_mlp_out.weight": (ew, ew), "action_time_mlp_out.bias": (ew,),
        "vlm_with_expert.vlm.lm_head.weight": (a["vocab"], tw),
        tm + "embed_tokens.weight": (a["vocab"], tw), tm + "norm.weight": (tw,),
        vm + "embeddings.patch_embedding.weight": (v["hidden"], 3, v["patch"], v["patch"]),
        vm + "embeddings.patch_embedding.bias": (v["hidden"],),
        vm + "embeddings.position_embedding.weight": ((v["image"] // v["patch"]) ** 2, v["hidden"]),
        vm + "post_layernorm.weight": (v["hidden"],), vm + "post_layernorm.bias": (v["hidden"],),
        "vlm_with_expert.vlm.model.connector.modality_projection.proj.weight": (tw, v["hidden"] * a["scale"] ** 2),
        ex + "norm.weight": (ew,),
    }  # fmt: skip
    for i in range(p["num_vlm_layers"]):
        L = f"{tm}layers.{i}."
        s.update({
            L + "input_layernorm.weight": (tw,), L + "post_attention_layernorm.weight": (tw,),
            L + "self_attn.q_proj.weight": (q_out, tw), L + "self_attn.k_proj.weight": (kv_out, tw),
            L + "self_attn.v_proj.weight": (kv_out, tw), L + "self_attn.o_proj.weight": (tw, q_out),
            L + "mlp.gate_proj.weight": (t["mlp"], tw), L + "mlp.up_proj.weight": (t["mlp"], tw),
            L + "mlp.down_proj.weight": (tw, t["mlp"]),
        })  # fmt: skip
    for i in range(v["layers"]):
        L = f"{vm}encoder.layers.{i}."
        for n in ("layer_norm1", "layer_norm2"):
            s[L + n + ".weight"] = s[L + n + ".bias"] = (v["hidden"],)
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            s[L + f"self_attn.{n}.weight"], s[L + f"self_attn.{n}.bias"] = (
                (v["hidden"], v["hidden"]),
                (v["hidden"],),
            )
        s[L + "mlp.fc1.weight"], s[L + "mlp.fc1.bias"] = (v["mlp"], v["hidden"]), (v["mlp"],)
        s[L + "mlp.fc2.weight"], s[L + "mlp.fc2.bias"] = (v["hidden"], v["mlp"]), (v["hidden"],)
    ie = lerobot_intermediate_size(ew)
    for j in range(n_exp):
        L = f"{ex}layers.{j}."
        cross = "cross" in p["attention_mode"] and not (every > 0 and j % every == 0)
        kin = kv_out if cross else ew
        s.update({
            L + "input_layernorm.weight": (ew,), L + "post_attention_layernorm.weight": (ew,),
            L + "self_attn.q_proj.weight": (q_out, ew), L + "self_attn.k_proj.weight": (kv_out, kin),
            L + "self_attn.v_proj.weight": (kv_out, kin), L + "self_attn.o_proj.weight": (ew, q_out),
            L + "mlp.gate_proj.weight": (ie, ew), L + "mlp.up_proj.weight": (ie, ew), L + "mlp.down_proj.weight": (ew, ie),
        })  # fmt: skip
    return s


def random_tensors(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """The fixtures' recipe: matrices N(0,1)/sqrt(fan_in), norm scales 1 + 0.1 N, other vectors 0.1 N."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, shape in sorted(shapes.items()):
        x = torch.randn(shape, generator=g)
        if len(shape) >= 2:
            x = x / math.sqrt(math.prod(shape[1:]))
        elif "norm" in k and k.endswith("weight"):
            x = 1 + 0.1 * x
        else:
            x = 0.1 * x
        out["model." + k] = x.contiguous()
    return out


def write_tokenizer(folder: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {"<pad>": 0, "<unk>": 1, "<fake_token_around_image>": 2, "<global-img>": 3, "<image>": 4}
    words.update({f"w{i}": i for i in range(5, vocab)})
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "pad_token": "<pad>",
                "unk_token": "<unk>",
                "fake_image_token": "<fake_token_around_image>",
                "global_image_token": "<global-img>",
                "image_token": "<image>",
            }
        )  # fmt: skip
    )


def write_checkpoint(folder: Path, seed: int = 0, **over: Any) -> Path:
    a = _merge(BASE, over)
    t, v, p = a["text"], a["vision"], a["policy"]
    folder.mkdir(parents=True, exist_ok=True)
    shapes = lerobot_shapes(a)
    save_file(random_tensors(shapes, seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    features: dict[str, Any] = {"observation.state": {"type": "STATE", "shape": [p["state_dim"]]}}
    for cam in p["cameras"]:
        features[cam] = {"type": "VISUAL", "shape": [3, 24, 40]}
    config = {
        "type": "smolvla",
        "input_features": features,
        "output_features": {"action": {"type": "ACTION", "shape": [p["action_dim"]]}},
        "resize_imgs_with_padding": p["resize"],
        "vlm_model_name": "HuggingFaceTB/SmolVLM2-500M-Video-Instruct",
        "use_cache": True,
        "pad_language_to": "longest",
        "min_period": 0.004,
        "max_period": 4.0,
        **{k: p[k] for k in p if k not in ("cameras", "resize", "state_dim", "action_dim")},
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    vlm = {
        "text_config": {
            "model_type": "llama", "vocab_size": a["vocab"], "hidden_size": t["hidden"],
            "intermediate_size": t["mlp"], "num_hidden_layers": t["layers"], "num_attention_heads": t["heads"],
            "num_key_value_heads": t["kv"], "head_dim": t["head_dim"], "rms_norm_eps": t["eps"],
            "rope_theta": 100000.0, "hidden_act": "silu",
        },
        "vision_config": {
            "hidden_size": v["hidden"], "intermediate_size": v["mlp"], "num_hidden_layers": v["layers"],
            "num_attention_heads": v["heads"], "image_size": v["image"], "patch_size": v["patch"],
            "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh",
        },
        "scale_factor": a["scale"],
    }  # fmt: skip
    (folder / "vlm_config.json").write_text(json.dumps(vlm, indent=2))
    step = {
        "max_length": p["tokenizer_max_length"], "task_key": "task", "padding_side": "right",
        "padding": "longest", "truncation": a["truncation"], "tokenizer_name": "tokenizer",
    }  # fmt: skip
    pre = {"name": "policy_preprocessor", "steps": [{"registry_name": "tokenizer_processor", "config": step}]}
    (folder / "policy_preprocessor.json").write_text(json.dumps(pre, indent=2))
    write_tokenizer(folder / "tokenizer", a["vocab"])
    return folder


def make_batch(cfg: Any, tok: Any, batch: int = 2, seed: int = 1) -> dict[str, Any]:
    """A model-space batch as predict_action_chunk receives it (raw-size images in [0, 1])."""
    g = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {k: torch.rand(batch, 3, 24, 40, generator=g) for k in cfg.camera_keys}
    out["observation.state"] = torch.randn(batch, cfg.state_dim, generator=g)
    tasks = ["w5 w17 w33 w60 w9", "w7 w8"][:batch] + ["w12"] * max(0, batch - 2)
    ids, mask = tok(tasks)
    out["observation.language.tokens"], out["observation.language.attention_mask"] = ids, mask
    return out


def run(folder: Path, seed: int = 3, num_steps: int | None = None) -> tuple[Any, torch.Tensor]:
    cfg, model = load_smolvla(folder)
    tok = load_tokenizer(folder)
    batch = make_batch(cfg, tok)
    noise = torch.randn(2, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(seed))
    return cfg, predict_action_chunk(model, batch, noise, num_steps)


def _deterministic(folder: Path) -> tuple[Any, torch.Tensor]:
    cfg, a = run(folder)
    _, b = run(folder)
    assert a.shape == (2, cfg.chunk_size, cfg.action_dim)
    assert torch.isfinite(a).all() and a.abs().max() > 0
    assert torch.equal(a, b), "two loads and runs of the same checkpoint differ"
    return cfg, a


# ---- options -------------------------------------------------------------------------------------------------


def test_one_camera_defaults(tmp_path: Path) -> None:
    cfg, _ = _deterministic(write_checkpoint(tmp_path / "ck"))
    assert cfg.views == 1 and cfg.image_tokens_per_view == (32 // 8) ** 2 // 4
    assert [(p.expert, p.cross) for p in cfg.layers] == [(0, False), (1, True), (2, False), (3, True)]
    assert cfg.expert.width == 48 and cfg.expert.kv_in == (48, 32, 48, 32)
    assert cfg.vlm.text.num_heads == 4 and cfg.vlm.text.num_kv_heads == 2 and cfg.vlm.scale_factor == 2
    assert (cfg.chunk_size, cfg.n_action_steps, cfg.max_action_dim, cfg.action_dim) == (6, 4, 7, 4)
    state = prepare_state(torch.ones(2, 3, 5), cfg)  # (B, T, d): last frame, zero-padded to max_state_dim
    assert state.shape == (2, 8) and state[:, :5].eq(1).all() and state[:, 5:].eq(0).all()


def test_published_smolvlm2_sizes_take_its_values() -> None:
    """Shapes only (no 450 M-parameter file): SmolVLA's default VLM, truncated to 16 layers."""
    from hotloop.models.smolvlm_config import Shapes, read_vlm_config

    arch = _merge(BASE, {
        "text": {"hidden": 960, "mlp": 2560, "layers": 32, "heads": 15, "kv": 5, "head_dim": 64},
        "vision": {"hidden": 768, "mlp": 3072, "layers": 12, "heads": 12, "image": 512, "patch": 16},
        "scale": 4, "vocab": 49280, "policy": {"num_vlm_layers": 16},
    })  # fmt: skip
    shapes = lerobot_shapes(arch)
    assumed: list[str] = []
    name = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
    vlm, known, _ = read_vlm_config(Shapes(shapes, Path("model.safetensors")), None, "", name, 16, assumed)
    t, v = vlm.text, vlm.vision
    assert (t.width, t.num_heads, t.num_kv_heads, t.head_dim, t.eps, t.depth) == (960, 15, 5, 64, 1e-5, 16)
    assert (v.width, v.num_heads, v.patch_size, v.positions_per_side, vlm.scale_factor) == (
        768,
        12,
        16,
        32,
        4,
    )
    assert known is not None and known["fake_image_token_id"] == 49189
    assert len(assumed) == 5 and all(name in a or "SmolVLMVisionConfig" in a for a in assumed)
    with pytest.raises(CheckpointError, match="not HuggingFaceTB/SmolVLM2-500M-Video-Instruct's sizes"):
        read_vlm_config(Shapes(lerobot_shapes(BASE), Path("model.safetensors")), None, "", name, 4, [])


def test_bfloat16_runs_close_to_float32(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ck")
    cfg, m32 = load_smolvla(folder)
    _, m16 = load_smolvla(folder, dtype=torch.bfloat16)
    assert m16.vlm_with_expert.lm_expert.norm.weight.dtype == torch.bfloat16
    batch = make_batch(cfg, load_tokenizer(folder))
    noise = torch.randn(2, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(3))
    a32, a16 = predict_action_chunk(m32, batch, noise), predict_action_chunk(m16, batch, noise)
    assert a16.dtype == torch.float32 and torch.isfinite(a16).all()
    assert (a16 - a32).abs().max() < 0.1 * a32.abs().max()
    with pytest.raises(ConfigError, match="dtype torch.float16 is not supported"):
        load_smolvla(folder, dtype=torch.float16)


def test_three_slots_with_an_empty_camera(tmp_path: Path) -> None:
    cams = ["observation.images.top", "observation.images.wrist"]
    folder = write_checkpoint(tmp_path / "ck", policy={"cameras": cams, "empty_cameras": 1})
    # LeRobot saves config.json after validate_features added the empty slot: it must not count twice.
    meta = json.loads((folder / "config.json").read_text())
    meta["input_features"]["observation.images.empty_camera_0"] = {"type": "VISUAL", "shape": [3, 480, 640]}
    (folder / "config.json").write_text(json.dumps(meta))
    cfg, actions = _deterministic(folder)
    assert cfg.views == 3 and cfg.camera_keys == tuple(cams)
    _, model = load_smolvla(folder)
    batch = make_batch(cfg, load_tokenizer(folder))
    images, masks = prepare_images(batch, cfg)
    assert images.shape == (2, 3, 3, 32, 32)
    assert masks.tolist() == [[True, True, False]] * 2 and (images[:, 2] == -1).all()
    # The empty slot is masked out: whatever its pixels, the actions are the same.
    noise = torch.randn(2, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(3))
    lang, lmask = batch["observation.language.tokens"], batch["observation.language.attention_mask"]
    state = torch.nn.functional.pad(batch["observation.state"], (0, cfg.max_state_dim - cfg.state_dim))
    base = sample_actions(model, images, masks, lang, lmask, state, noise)
    noisy = images.clone()
    noisy[:, 2] = torch.rand(noisy[:, 2].shape) * 2 - 1
    assert torch.equal(sample_actions(model, noisy, masks, lang, lmask, state, noise), base)
    assert torch.equal(base[:, :, : cfg.action_dim], actions)
    # ... while a real view's pixels do matter.
    noisy[:, 0] = -noisy[:, 0]
    assert not torch.allclose(sample_actions(model, noisy, masks, lang, lmask, state, noise), base)


def test_kv_heads_equal_to_heads(tmp_path: Path) -> None:
    cfg, _ = _deterministic(write_checkpoint(tmp_path / "ck", text={"kv": 4}))
    assert cfg.vlm.text.num_kv_heads == cfg.vlm.text.num_heads == 4 and cfg.expert.kv_in[1] == 64


@pytest.mark.parametrize("every,pattern", [(1, [False] * 4), (3, [False, True, True, False])])
def test_self_attn_every_n_layers(tmp_path: Path, every: int, pattern: list[bool]) -> None:
    cfg, _ = _deterministic(write_checkpoint(tmp_path / "ck", policy={"self_attn_every_n_layers": every}))
    assert [p.cross for p in cfg.layers] == pattern
    assert cfg.expert.kv_in == tuple(32 if c else 48 for c in pattern)


def test_self_attn_mode(tmp_path: Path) -> None:
    cfg, a = _deterministic(write_checkpoint(tmp_path / "ck", policy={"attention_mode": "self_attn"}))
    assert not any(p.cross for p in cfg.layers) and cfg.expert.kv_in == (48,) * 4
    _, b = run(
        write_checkpoint(tmp_path / "ck2")
    )  # same seed, cross layers: other weights' shapes, other result
    assert not torch.allclose(a, b)


def test_head_dim_not_width_over_heads(tmp_path: Path) -> None:
    cfg, _ = _deterministic(write_checkpoint(tmp_path / "ck", text={"heads": 2, "kv": 1, "head_dim": 24}))
    t = cfg.vlm.text
    assert (t.num_heads, t.num_kv_heads, t.head_dim) == (2, 1, 24) and cfg.expert.head_dim == 24


def test_head_count_alone_derives_the_rest(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ck")
    vlm = json.loads((folder / "vlm_config.json").read_text())
    for key in ("head_dim", "num_key_value_heads", "rms_norm_eps"):
        del vlm["text_config"][key]
    (folder / "vlm_config.json").write_text(json.dumps(vlm))
    cfg, _ = load_smolvla(folder)
    assert (cfg.vlm.text.head_dim, cfg.vlm.text.num_kv_heads) == (16, 2)
    assert cfg.vlm.text.eps == 1e-6 and any("rms_norm_eps 1e-6" in n for n in cfg.assumed)


def test_image_special_tokens_change_the_prefix(tmp_path: Path) -> None:
    on = write_checkpoint(tmp_path / "on", policy={"add_image_special_tokens": True})
    off = write_checkpoint(tmp_path / "off")
    cfg_on, a_on = _deterministic(on)
    cfg_off, a_off = run(off)
    assert cfg_on.image_start_ids == (2, 3) and cfg_on.image_end_ids == (2,)  # from the tokenizer folder
    assert cfg_on.tokens_per_view == cfg_off.tokens_per_view + 3
    assert not torch.allclose(a_on, a_off)
    _, model = load_smolvla(on)
    batch = make_batch(cfg_on, load_tokenizer(on))
    images, masks = prepare_images(batch, cfg_on)
    lang, lmask = batch["observation.language.tokens"], batch["observation.language.attention_mask"]
    k, _, pad = model.prefix(model.vision(images), masks, lang, lmask, torch.zeros(2, cfg_on.max_state_dim))
    assert pad.shape[1] == cfg_on.prefix_len(lang.shape[1]) == 3 + 4 + lang.shape[1] + 1 == k.shape[3]


def test_num_steps_from_config_and_argument(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ck", policy={"num_steps": 3})
    cfg, model = load_smolvla(folder)
    batch = make_batch(cfg, load_tokenizer(folder))
    images, masks = prepare_images(batch, cfg)
    lang, lmask = batch["observation.language.tokens"], batch["observation.language.attention_mask"]
    state = torch.nn.functional.pad(batch["observation.state"], (0, cfg.max_state_dim - cfg.state_dim))
    noise = torch.randn(2, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(0))
    default = sample_actions(model, images, masks, lang, lmask, state, noise)
    with torch.no_grad():  # LeRobot's Euler loop by hand: t = 1, 2/3, 1/3
        k, v, pad = model.prefix(model.vision(images), masks, lang, lmask, state)
        x = noise
        for step in range(3):
            t = torch.tensor(1.0 + step * (-1.0 / 3), dtype=torch.float32).expand(2)
            x = x + (-1.0 / 3) * model.denoise_step(k, v, pad, x, t)
    assert torch.equal(default, x)
    assert not torch.allclose(sample_actions(model, images, masks, lang, lmask, state, noise, num_steps=5), x)


def test_fewer_expert_layers(tmp_path: Path) -> None:
    """num_expert_layers 2 for 4 VLM layers: layers 1, 3 have no expert and cross (pass through); expert 1 is
    built cross-shaped but runs in self layer 2, which LeRobot only survives when kv width = expert width."""
    folder = write_checkpoint(
        tmp_path / "ck", policy={"num_expert_layers": 2, "expert_width_multiplier": 0.5}
    )
    cfg, _ = _deterministic(folder)
    assert [(p.expert, p.cross) for p in cfg.layers] == [(0, False), (None, True), (1, False), (None, True)]
    bad = write_checkpoint(tmp_path / "bad", policy={"num_expert_layers": 2})
    with pytest.raises(
        CheckpointError, match="self_attn_every_n_layers.*expert layer 1.*LeRobot's forward fails"
    ):
        load_smolvla(bad)


def test_prefix_length_pads_without_changing_actions(tmp_path: Path) -> None:
    cfg, a = run(write_checkpoint(tmp_path / "ck"))
    cfg_p, b = run(write_checkpoint(tmp_path / "ck2", policy={"prefix_length": 30}))
    assert cfg_p.prefix_len(5) == 30 and cfg.prefix_len(5) == 4 + 5 + 1
    # the padded keys are masked, but the softmax and matmuls then sum over more terms: fp32 rounding moves
    # the last bits (1.2e-6 measured on an AMD EPYC without AVX512-BF16; 0 where this was first written)
    torch.testing.assert_close(a, b, rtol=0, atol=3e-6)


def test_resized_grid_other_than_the_position_table(tmp_path: Path) -> None:
    """Vision config 48 px / patch 8 (a 6x6 table) fed 32 px images (4x4 patches): ids are bucketed."""
    from hotloop.models.smolvlm import vision_position_ids

    cfg, _ = _deterministic(write_checkpoint(tmp_path / "ck", vision={"image": 48}))
    assert cfg.vlm.vision.positions_per_side == 6 and cfg.image_tokens_per_view == 4
    # fractional coords 0, .25, .5, .75 against edges 1/6 .. 5/6 (right=True): buckets 0, 1, 3, 4
    rows = [0, 1, 3, 4]
    assert vision_position_ids(4, 4, 6).tolist() == [r * 6 + c for r in rows for c in rows]
    assert vision_position_ids(6, 6, 6).tolist() == list(range(36))


def test_resize_with_pad_top_left() -> None:
    img = torch.rand(1, 3, 24, 40)
    out = resize_with_pad(img, 32, 32)
    assert out.shape == (1, 3, 32, 32)
    ratio = 40 / 32  # int(24 / 1.25) = 19 rows: 13 padding rows on top, none on the left
    assert int(24 / ratio) == 19 and (out[:, :, :13] == 0).all() and (out[:, :, 13:] > 0).any()
    assert torch.equal(resize_with_pad(out, 32, 32), out)  # already the size: unchanged


# ---- refusals ------------------------------------------------------------------------------------------------


def test_missing_tokenizer_names_the_folder(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ck")
    for f in (folder / "tokenizer").iterdir():
        f.unlink()
    (folder / "tokenizer").rmdir()
    with pytest.raises(
        CheckpointError, match=r"tokenizer folder .*ck/tokenizer .*tokenizer_name 'tokenizer'"
    ):
        load_tokenizer(folder)
    (folder / "tokenizer").mkdir()
    (folder / "tokenizer" / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"tokenizer folder .*ck/tokenizer: tokenizer.json is not"):
        load_tokenizer(folder)


def test_special_tokens_without_a_source_are_refused(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ck", policy={"add_image_special_tokens": True})
    (folder / "policy_preprocessor.json").unlink()
    with pytest.raises(CheckpointError, match="add_image_special_tokens.*fake_image_token_id"):
        load_smolvla(folder)
    vlm = json.loads((folder / "vlm_config.json").read_text())
    vlm.update(fake_image_token_id=7, global_image_token_id=8)
    (folder / "vlm_config.json").write_text(json.dumps(vlm))
    assert load_smolvla(folder)[0].image_start_ids == (7, 8)


def test_long_prompt_without_truncation(tmp_path: Path) -> None:
    long_task = " ".join(f"w{i}" for i in range(5, 25))
    tok = load_tokenizer(write_checkpoint(tmp_path / "ck", truncation=False))
    with pytest.raises(ConfigError, match="20 tokens.*max_length is 12.*'truncation' is false"):
        tok([long_task])
    ids, mask = load_tokenizer(write_checkpoint(tmp_path / "ck2"))([long_task, "w9"])
    assert (
        ids.shape == (2, 12)
        and ids[0].tolist() == list(range(5, 17))
        and mask[1].tolist() == [True] + [False] * 11
    )


def test_wrong_tensor_shape_names_the_key(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder = write_checkpoint(tmp_path / "ck")
    key = "model.vlm_with_expert.vlm.model.text_model.layers.2.mlp.up_proj.weight"
    tensors = load_file(str(folder / "model.safetensors"))
    tensors[key] = torch.zeros(80, 64)
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(
        CheckpointError, match=rf"shape mismatch \(1\): {key}: found \(80, 64\), expected \(96, 64\)"
    ):
        load_smolvla(folder)


def test_max_state_dim_against_state_proj(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ck")
    meta = json.loads((folder / "config.json").read_text())
    meta["max_state_dim"] = 9
    (folder / "config.json").write_text(json.dumps(meta))
    with pytest.raises(
        CheckpointError, match=r"'model.state_proj.weight' has shape \(64, 8\); expected \(64, 9\)"
    ):
        load_smolvla(folder)


def test_wrong_image_count(tmp_path: Path) -> None:
    folder = write_checkpoint(
        tmp_path / "ck", policy={"cameras": ["observation.images.a", "observation.images.b"]}
    )
    cfg, model = load_smolvla(folder)
    batch = make_batch(cfg, load_tokenizer(folder))
    images, masks = prepare_images(batch, cfg)
    lang, lmask = batch["observation.language.tokens"], batch["observation.language.attention_mask"]
    with pytest.raises(ConfigError, match="images hold 1 views; the policy takes 2"):
        sample_actions(model, images[:, :1], masks[:, :1], lang, lmask, torch.zeros(2, 8))
    del batch["observation.images.b"]
    with pytest.raises(ConfigError, match="camera 'observation.images.b' is missing"):
        prepare_images(batch, cfg)
    with pytest.raises(ConfigError, match="got 1 camera images; the policy takes 2"):
        prepare_images([batch["observation.images.a"]], cfg)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("expert_width_multiplier", 0.5, "'expert_width_multiplier' is 0.5.*48 wide"),
        ("num_vlm_layers", 3, "'num_vlm_layers' is 3; the checkpoint holds 4 text layers"),
        ("attention_mode", "cross_attn_v2", "'attention_mode' is 'cross_attn_v2'"),
        ("adapt_to_pi_aloha", True, "'adapt_to_pi_aloha' is True"),
        ("use_cache", False, "'use_cache' is False"),
        ("n_action_steps", 7, "'n_action_steps' is 7; LeRobot requires n_action_steps <= chunk_size 6"),
        ("resize_imgs_with_padding", [32, 40], "'resize_imgs_with_padding' .*patch grid must be square"),
        ("type", "pi0", "'type' is 'pi0'"),
        ("add_image_special_tokens", "yes", "'add_image_special_tokens' must be true or false"),
        ("max_action_dim", 3, "'model.action_in_proj.weight' has shape \\(48, 7\\); expected \\(48, 3\\)"),
    ],
)
def test_config_refusals(tmp_path: Path, field: str, value: Any, match: str) -> None:
    folder = write_checkpoint(tmp_path / "ck")
    meta = json.loads((folder / "config.json").read_text())
    meta[field] = value
    (folder / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=match):
        load_smolvla(folder)


def test_vlm_values_must_come_from_somewhere(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ck")
    vlm = json.loads((folder / "vlm_config.json").read_text())
    (folder / "vlm_config.json").unlink()
    with pytest.raises(
        CheckpointError, match="head_dim / head counts cannot be read.*not HuggingFaceTB.*vlm_config.json"
    ):
        load_smolvla(folder)
    vlm["text_config"]["hidden_size"] = 960
    (folder / "vlm_config.json").write_text(json.dumps(vlm))
    with pytest.raises(
        CheckpointError, match=r"vlm_config.json: field 'text_config.hidden_size' is 960 .*hold 64"
    ):
        load_smolvla(folder)
    vlm["text_config"].update(hidden_size=64, head_dim=12)
    (folder / "vlm_config.json").write_text(json.dumps(vlm))
    with pytest.raises(CheckpointError, match="head_dim 12 does not split q_proj / k_proj rows 64 / 32"):
        load_smolvla(folder)


# ---- the sub-engines traced ----------------------------------------------------------------------------------


class _Method(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, name: str) -> None:
        super().__init__()
        self.model, self.name = model, name

    def forward(self, *args: torch.Tensor) -> Any:
        return getattr(self.model, self.name)(*args)


def test_sub_engines_trace_to_the_same_numbers(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ck", policy={"add_image_special_tokens": True, "empty_cameras": 1})
    cfg, model = load_smolvla(folder)
    batch = make_batch(cfg, load_tokenizer(folder))
    images, masks = prepare_images(batch, cfg)
    lang, lmask = batch["observation.language.tokens"], batch["observation.language.attention_mask"]
    state = torch.randn(2, cfg.max_state_dim, generator=torch.Generator().manual_seed(2))
    x = torch.randn(2, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(4))
    t = torch.full((2,), 0.7)
    with torch.no_grad():
        tokens = model.vision(images)
        k, v, pad = model.prefix(tokens, masks, lang, lmask, state)
        vel = model.denoise_step(k, v, pad, x, t)
        engines = {
            "vision": ((images,), (tokens,)),
            "prefix": ((tokens, masks, lang, lmask, state), (k, v, pad)),
            "denoise_step": ((k, v, pad, x, t), (vel,)),
        }
        for name, (args, want) in engines.items():
            traced = torch.jit.trace(_Method(model, name), args, check_trace=False)
            got = traced(*args)
            got = got if isinstance(got, tuple) else (got,)
            for g, w in zip(got, want, strict=True):
                assert torch.equal(g, w), (
                    f"{name}: traced differs by {(g.float() - w.float()).abs().max():.3g}"
                )
        # A second time step through the same trace: time is an input, not a baked constant.
        traced = torch.jit.trace(_Method(model, "denoise_step"), (k, v, pad, x, t), check_trace=False)
        t2 = torch.full((2,), 0.2)
        assert torch.equal(traced(k, v, pad, x, t2), model.denoise_step(k, v, pad, x, t2))


def test_sub_engines_export_to_onnx(tmp_path: Path) -> None:
    import warnings

    ort = pytest.importorskip("onnxruntime")
    folder = write_checkpoint(tmp_path / "ck", policy={"add_image_special_tokens": True})
    cfg, model = load_smolvla(folder)
    batch = make_batch(cfg, load_tokenizer(folder))
    images, masks = prepare_images(batch, cfg)
    lang, lmask = batch["observation.language.tokens"], batch["observation.language.attention_mask"]
    state = prepare_state(batch["observation.state"], cfg)
    x, t = torch.randn(2, cfg.chunk_size, cfg.max_action_dim), torch.full((2,), 0.4)
    with torch.no_grad():
        tokens = model.vision(images)
        k, v, pad = model.prefix(tokens, masks, lang, lmask, state)
        vel = model.denoise_step(k, v, pad, x, t)
    for name, args, want in (
        ("vision", (images,), (tokens,)),
        ("prefix", (tokens, masks, lang, lmask, state), (k, v, pad)),
        ("denoise_step", (k, v, pad, x, t), (vel,)),
    ):
        path = tmp_path / f"{name}.onnx"
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(_Method(model, name), args, str(path), dynamo=False, opset_version=17)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        outs = sess.run(None, {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args, strict=True)})
        for g, w in zip(outs, want, strict=True):
            diff = float(abs(g.astype("float64") - w.numpy().astype("float64")).max())
            assert g.dtype == w.numpy().dtype and diff <= 3e-5, f"{name}: onnxruntime differs by {diff:.3g}"
