"""The SmolVLM values of a SmolVLA checkpoint: sizes from the tensors, the rest from an override file or the
named VLM's published values.

LeRobot builds SmolVLA's VLM from `AutoConfig.from_pretrained(vlm_model_name)`, so no VLM size is in
config.json. Every size is read from model.safetensors: widths, depths, MLP widths, vocabulary, patch size and
input channels (patch conv), the position table (its side = image_size / patch_size), the pixel-shuffle factor
(connector input = vision width x scale_factor^2), q/k rows (heads x head_dim, kv_heads x head_dim) and whether
the projections carry biases. What no tensor shows comes, in this order, from:

1. `vlm_config.json` beside config.json: the VLM's own config.json as transformers writes it (`text_config`,
   `vision_config`, `scale_factor`), plus two optional hotloop keys `fake_image_token_id` /
   `global_image_token_id`. A field it leaves out takes transformers' class default, as AutoConfig would
   (LlamaConfig: rms_norm_eps 1e-6, hidden_act silu; SmolVLMVisionConfig: 16 heads, layer_norm_eps 1e-6,
   gelu_pytorch_tanh), except the text head geometry, derived from the tensors once head_dim or
   num_attention_heads is known. Stated sizes are checked against the tensors.
2. `tiny_arch.json`'s `vlm_config_kwargs` (the parity fixtures' record of the same dict).
3. The published values of the named VLM (`KNOWN_VLMS`), only when the tensors have that model's sizes.

RoPE's base is LeRobot's fixed 10000: rope_theta is never read. Every value taken as a default is listed in
the config's `assumed`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hotloop.errors import CheckpointError
from hotloop.models.checkpoint_meta import Fields, read_json_object
from hotloop.models.smolvlm import (
    TEXT_ACTIVATIONS,
    VISION_ACTIVATIONS,
    LlamaConfig,
    SmolVLMConfig,
    SmolVLMVisionConfig,
)

VLM_OVERRIDE_FILE = "vlm_config.json"
LM_HEAD_KEY = "vlm_with_expert.vlm.lm_head.weight"  # stored by LeRobot, never used for actions
_TEXT = "vlm_with_expert.vlm.model.text_model."
_VISION = "vlm_with_expert.vlm.model.vision_model."
_CONNECTOR = "vlm_with_expert.vlm.model.connector.modality_projection.proj.weight"


# Published values of the VLMs SmolVLA names, for what the tensors cannot show. Source: SmolVLM2-500M-Video-
# Instruct's config.json (text: SmolLM2-360M, 15 heads, 5 kv heads, head_dim 64, rms_norm_eps 1e-5; vision:
# SigLIP-B/16-512, 12 heads) and its tokenizer's added tokens, as cited in shared/peer/shims/families/
# smolvlm2_500m.py. `match` are the sizes the tensors must have for these values to apply.
KNOWN_VLMS: dict[str, dict[str, Any]] = {
    "HuggingFaceTB/SmolVLM2-500M-Video-Instruct": {
        "match": {"text_width": 960, "q_out": 960, "k_out": 320, "vision_width": 768},
        "head_dim": 64,
        "rms_norm_eps": 1e-5,
        "vision_heads": 12,
        "fake_image_token_id": 49189,
        "global_image_token_id": 49152,
    }
}


def boolean(f: Fields, key: str, default: bool) -> bool:
    """A JSON boolean field (Fields has no boolean reader); absent -> default."""
    if key not in f:
        return default
    value = f.data[key]
    if not isinstance(value, bool):
        raise CheckpointError(f"{f.file}: field {f.name(key)!r} must be true or false (got {value!r})")
    return value


def refuse(f: Fields, key: str, value: Any, why: str) -> CheckpointError:
    """The error for a field whose value hotloop cannot run: names the file, the field and the value."""
    return CheckpointError(f"{f.file}: field {f.name(key)!r} is {value!r}; {why}")


def read_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of model.safetensors, keyed without LeRobot's leading "model."."""
    from safetensors import safe_open

    path = folder / "model.safetensors"
    if not path.is_file():
        raise CheckpointError(f"missing file 'model.safetensors' in {folder}: a SmolVLA checkpoint needs it")
    try:
        with safe_open(str(path), framework="pt") as handle:
            raw = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}  # noqa: SIM118
    except Exception as exc:  # SafetensorError / OSError on damaged headers
        raise CheckpointError(
            f"{path} is not a readable safetensors file (corrupt or truncated?): {exc}"
        ) from exc
    if raw and not all(k.startswith("model.") for k in raw):
        odd = next(k for k in raw if not k.startswith("model."))
        raise CheckpointError(
            f"{path}: key {odd!r} lacks LeRobot's 'model.' prefix: not a LeRobot SmolVLA policy"
        )
    return {k.removeprefix("model."): s for k, s in raw.items()}


class Shapes:
    """Shape lookups whose failures name the file and the missing tensor."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], file: Path) -> None:
        self.shapes, self.file = shapes, file

    def __call__(self, key: str, rank: int = 2) -> tuple[int, ...]:
        shape = self.shapes.get(key)
        if shape is None:
            raise CheckpointError(f"{self.file} lacks tensor 'model.{key}': not a SmolVLA checkpoint")
        if len(shape) != rank:
            raise CheckpointError(
                f"{self.file}: tensor 'model.{key}' has shape {shape}; expected rank {rank}"
            )
        return shape

    def count(self, prefix: str) -> int:
        idx = {int(k[len(prefix) :].split(".")[0]) for k in self.shapes if k.startswith(prefix)}
        if idx != set(range(len(idx))):
            raise CheckpointError(
                f"{self.file}: layers under 'model.{prefix}' are not numbered 0..n-1: {sorted(idx)}"
            )
        return len(idx)

    def has(self, key: str) -> bool:
        return key in self.shapes


def vlm_overrides(folder: Path) -> tuple[Fields | None, str]:
    """(the VLM config dict as Fields, where it came from): vlm_config.json, else tiny_arch.json's kwargs."""
    path = folder / VLM_OVERRIDE_FILE
    if path.is_file():
        return Fields(read_json_object(path), path), str(path)
    tiny = folder / "tiny_arch.json"
    if tiny.is_file():
        kwargs = Fields(read_json_object(tiny), tiny).obj("vlm_config_kwargs")
        if kwargs is not None:
            return kwargs, f"{tiny} (vlm_config_kwargs)"
    return None, ""


def _check_stated(f: Fields | None, key: str, found: int, what: str) -> None:
    stated = f.integer(key) if f is not None else None
    if f is not None and stated is not None and stated != found:
        raise CheckpointError(
            f"{f.file}: field {f.name(key)!r} is {stated} but the tensors hold {found} ({what}); "
            "the file does not describe these weights: fix or delete it"
        )


def read_vlm_config(
    sh: Shapes, ov: Fields | None, ov_name: str, name: str, depth: int, assumed: list[str]
) -> tuple[SmolVLMConfig, dict[str, Any] | None, str]:
    """(VLM config, the KNOWN_VLMS entry used or None, where the non-tensor values came from).

    `ov` is the override dict (`vlm_overrides`), `name` config.json's vlm_model_name, `depth` the text layers
    in the checkpoint; every default taken is appended to `assumed`.
    """
    vocab, width = sh(_TEXT + "embed_tokens.weight")
    q_out, k_out = (
        sh(_TEXT + "layers.0.self_attn.q_proj.weight")[0],
        sh(_TEXT + "layers.0.self_attn.k_proj.weight")[0],
    )
    mlp = sh(_TEXT + "layers.0.mlp.gate_proj.weight")[0]
    v_width, channels, patch, patch_w = sh(_VISION + "embeddings.patch_embedding.weight", 4)
    positions = sh(_VISION + "embeddings.position_embedding.weight")[0]
    v_mlp = sh(_VISION + "encoder.layers.0.mlp.fc1.weight")[0]
    v_depth = sh.count(_VISION + "encoder.layers.")
    proj_out, proj_in = sh(_CONNECTOR)
    per_side = math.isqrt(positions)
    if per_side * per_side != positions or patch != patch_w:
        raise CheckpointError(
            f"{sh.file}: vision position table has {positions} rows and patches {patch}x{patch_w}: SmolVLM's "
            "vision tower needs a square position grid and square patches"
        )
    scale = math.isqrt(proj_in // v_width) if proj_in % v_width == 0 else 0
    if scale < 1 or scale * scale * v_width != proj_in or proj_out != width:
        raise CheckpointError(
            f"{sh.file}: connector projection {(proj_out, proj_in)} is not (text width {width}, vision width "
            f"{v_width} x scale_factor^2) for any integer scale factor"
        )
    known = KNOWN_VLMS.get(name)
    matched = known is not None and known["match"] == {
        "text_width": width,
        "q_out": q_out,
        "k_out": k_out,
        "vision_width": v_width,
    }
    txt = ov.obj("text_config") if ov is not None else None
    vis = ov.obj("vision_config") if ov is not None else None
    if ov is not None:
        _check_stated(ov, "scale_factor", scale, "connector input = vision width x scale_factor^2")
    for f, key, found, what in (
        (txt, "hidden_size", width, "text width"),
        (txt, "intermediate_size", mlp, "text MLP width"),
        (txt, "vocab_size", vocab, "token table rows"),
        (vis, "hidden_size", v_width, "vision width"),
        (vis, "intermediate_size", v_mlp, "vision MLP width"),
        (vis, "num_hidden_layers", v_depth, "vision layers"),
        (vis, "patch_size", patch, "patch convolution kernel"),
        (vis, "num_channels", channels, "patch convolution input channels"),
    ):
        _check_stated(f, key, found, what)
    stated_layers = txt.integer("num_hidden_layers") if txt is not None else None
    if txt is not None and stated_layers is not None and stated_layers < depth:
        raise CheckpointError(
            f"{txt.file}: field {txt.name('num_hidden_layers')!r} is {stated_layers} but the checkpoint holds "
            f"{depth} text layers"
        )
    if vis is not None and vis.integer("image_size") is not None:
        _check_stated(vis, "image_size", per_side * patch, f"{positions} positions of {patch}-px patches")

    def unknown(what: str) -> CheckpointError:
        why = (
            f"the tensors are not {name}'s sizes"
            if known is not None
            else f"vlm_model_name {name!r} is not one of {', '.join(KNOWN_VLMS)}"
        )
        return CheckpointError(
            f"{sh.file.parent}: {what} cannot be read from the tensors and {why} (text width {width}, q/k rows "
            f"{q_out}/{k_out}, vision width {v_width}); put the VLM's config.json beside config.json as "
            f"{VLM_OVERRIDE_FILE} (text_config, vision_config)"
        )

    # Text head geometry: head_dim, or the query head count, fixes the rest through q/k rows.
    head_dim = txt.integer("head_dim") if txt is not None else None
    heads = txt.integer("num_attention_heads") if txt is not None else None
    if head_dim is None and heads is not None:
        head_dim = q_out // heads if q_out % heads == 0 else None
        if head_dim is None:
            raise refuse(txt, "num_attention_heads", heads, f"q_proj has {q_out} rows, not a multiple")  # type: ignore[arg-type]
    if head_dim is None:
        if not matched:
            raise unknown("the text attention's head_dim / head counts")
        head_dim = known["head_dim"]  # type: ignore[index]
        assumed.append(f"text head_dim {head_dim} ({name})")
    where = txt if txt is not None else Fields({}, sh.file, "text_config.")
    if head_dim % 2 or q_out % head_dim or k_out % head_dim or (q_out // head_dim) % (k_out // head_dim):
        raise CheckpointError(
            f"{where.file}: text head_dim {head_dim} does not split q_proj / k_proj rows {q_out} / {k_out} into "
            "query heads that are a multiple of the kv heads (and RoPE needs an even head_dim)"
        )
    heads, kv_heads = q_out // head_dim, k_out // head_dim
    if txt is not None:
        _check_stated(txt, "num_attention_heads", heads, f"q_proj rows {q_out} / head_dim {head_dim}")
        _check_stated(txt, "num_key_value_heads", kv_heads, f"k_proj rows {k_out} / head_dim {head_dim}")
    if txt is not None:
        eps = txt.number("rms_norm_eps")
        if eps is None:
            eps = 1e-6
            assumed.append("text rms_norm_eps 1e-6 (transformers LlamaConfig default)")
        act = txt.string("hidden_act") or "silu"  # LlamaConfig's default
    elif ov is not None:  # a SmolVLMConfig without text_config builds LlamaConfig(rms_norm_eps=1e-5)
        eps, act = 1e-5, "silu"
        assumed.append("text rms_norm_eps 1e-5 (SmolVLMConfig's default text config)")
    elif matched:
        eps, act = known["rms_norm_eps"], "silu"  # type: ignore[index]
        assumed.append(f"text rms_norm_eps {eps} ({name})")
    else:
        raise unknown("the text RMSNorm eps")
    if act not in TEXT_ACTIVATIONS:
        raise refuse(txt, "hidden_act", act, f"hotloop runs {', '.join(TEXT_ACTIVATIONS)}")  # type: ignore[arg-type]

    v_heads = vis.integer("num_attention_heads") if vis is not None else None
    if v_heads is None and vis is not None:
        v_heads = 16
        assumed.append("vision heads 16 (transformers SmolVLMVisionConfig default)")
    elif v_heads is None and ov is not None:
        v_heads = 16
        assumed.append("vision heads 16 (SmolVLMConfig's default vision config)")
    elif v_heads is None:
        if not matched:
            raise unknown("the vision head count")
        v_heads = known["vision_heads"]  # type: ignore[index]
        assumed.append(f"vision heads {v_heads} ({name})")
    if v_width % v_heads:
        raise CheckpointError(
            f"{(vis or where).file}: vision num_attention_heads {v_heads} does not divide the vision width {v_width}"
        )
    v_eps = vis.number("layer_norm_eps") if vis is not None else None
    v_act = vis.string("hidden_act") if vis is not None else None
    if v_eps is None:  # the same in transformers' class default and the published SmolVLM2 configs
        v_eps = 1e-6
        assumed.append("vision layer_norm_eps 1e-6 (SmolVLMVisionConfig default)")
    if v_act is None:
        v_act = "gelu_pytorch_tanh"
        assumed.append("vision hidden_act gelu_pytorch_tanh (SmolVLMVisionConfig default)")
    if v_act not in VISION_ACTIVATIONS:
        raise refuse(vis, "hidden_act", v_act, f"hotloop runs {', '.join(VISION_ACTIVATIONS)}")  # type: ignore[arg-type]
    text = LlamaConfig(
        width=width,
        mlp_dim=mlp,
        depth=depth,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        eps=eps,
        kv_in=(width,) * depth,
        attention_bias=sh.has(_TEXT + "layers.0.self_attn.q_proj.bias"),
        mlp_bias=sh.has(_TEXT + "layers.0.mlp.gate_proj.bias"),
    )
    vision = SmolVLMVisionConfig(
        width=v_width,
        mlp_dim=v_mlp,
        depth=v_depth,
        num_heads=v_heads,
        patch_size=patch,
        num_channels=channels,
        positions_per_side=per_side,
        eps=v_eps,
        act=v_act,
    )
    source = ov_name or (f"published values of {name}" if matched else "tensors only")
    return SmolVLMConfig(vision, text, scale, vocab), (known if matched else None), source


__all__ = [
    "KNOWN_VLMS",
    "LM_HEAD_KEY",
    "Shapes",
    "VLM_OVERRIDE_FILE",
    "boolean",
    "read_shapes",
    "read_vlm_config",
    "refuse",
    "vlm_overrides",
]
