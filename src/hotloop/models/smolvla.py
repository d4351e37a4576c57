"""LeRobot's SmolVLA (policies/smolvla at commit 7427f318) as three tensor-in/tensor-out sub-engines.

    vision(images (B, V, 3, H, W) in [-1, 1])                        -> image tokens (B, V*T, text width)
    prefix(image_tokens, image_masks, lang_tokens, lang_masks, state) -> (k, v (layers, B, kv, P, D), pad (B, P))
    denoise_step(k, v, prefix_pad_mask, x_t, t)                       -> velocity (B, chunk, max_action_dim)

`sample_actions` integrates them with LeRobot's Euler loop; `prepare_images` / `prepare_state` turn what
LeRobot's `predict_action_chunk` receives (model-space batch: raw-size images in [0, 1], normalised state) into
their inputs, and `predict_action_chunk` does all of it.

What SmolVLA does differently from pi0 (and what is matched here): the state is one prefix token
(`state_proj`, its own attention block after images + prompt); image tokens are scaled by sqrt(text width)
after the connector, prompt embeddings too, the optional image special tokens are not; the VLM is truncated to
`num_vlm_layers`; the action expert is a narrower Llama (`expert_width_multiplier`) whose layers either
self-attend over [prefix cache; chunk] (causal over the chunk) or cross-attend to the prefix: its own k_proj /
v_proj applied to the cached (already rotated) VLM keys / values, queries rotated from position 0. Parameter
names are LeRobot's state-dict keys without the leading "model.".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.errors import CheckpointError, ConfigError
from hotloop.finite import assign_finite
from hotloop.models.pi0 import make_att_2d_masks
from hotloop.models.smolvla_config import LM_HEAD_KEY, SmolVLAConfig, read_smolvla_config
from hotloop.models.smolvla_tokenizer import SmolVLATokenizer, load_tokenizer
from hotloop.models.smolvlm import (
    Connector,
    LlamaLayer,
    LlamaStack,
    SmolVLMConfig,
    VisionTransformer,
    apply_rope,
    eager_attention,
    rope_tables,
)

Record = dict[str, Tensor] | None


def sincos_time(t: Tensor, dim: int, min_period: float, max_period: float) -> Tensor:
    """LeRobot's create_sinusoidal_pos_embedding: (B,) float32 times -> (B, dim) [sin, cos] in float64.

    Returned in float64 (as LeRobot returns it) so the caller rounds once, straight to the model dtype.
    """
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    scaling = 1.0 / period * 2 * math.pi
    arg = t[..., None] * scaling
    return torch.cat((torch.sin(arg), torch.cos(arg)), dim=-1)


class _VLMModel(nn.Module):
    def __init__(self, cfg: SmolVLMConfig) -> None:
        super().__init__()
        self.vision_model = VisionTransformer(cfg.vision)
        self.connector = Connector(cfg)
        self.text_model = LlamaStack(cfg.text, cfg.vocab_size)


class _VLM(nn.Module):
    def __init__(self, cfg: SmolVLMConfig) -> None:
        super().__init__()
        self.model = _VLMModel(cfg)


class _VLMWithExpert(nn.Module):
    def __init__(self, cfg: SmolVLAConfig) -> None:
        super().__init__()
        self.vlm = _VLM(cfg.vlm)
        self.lm_expert = LlamaStack(cfg.expert, None)


class SmolVLAModel(nn.Module):
    """The SmolVLA network (`VLAFlowMatching`): names `vlm_with_expert.*`, `state_proj`, `action_*`."""

    def __init__(self, cfg: SmolVLAConfig) -> None:
        super().__init__()
        self.cfg = cfg
        tw, ew = cfg.vlm.text.width, cfg.expert.width
        self.vlm_with_expert = _VLMWithExpert(cfg)
        self.state_proj = nn.Linear(cfg.max_state_dim, tw)
        self.action_in_proj = nn.Linear(cfg.max_action_dim, ew)
        self.action_out_proj = nn.Linear(ew, cfg.max_action_dim)
        self.action_time_mlp_in = nn.Linear(2 * ew, ew)
        self.action_time_mlp_out = nn.Linear(ew, ew)

    @property
    def dtype(self) -> torch.dtype:
        return self.action_in_proj.weight.dtype

    @property
    def _vlm(self) -> _VLMModel:
        return self.vlm_with_expert.vlm.model

    # ---- sub-engine 1: vision ------------------------------------------------------------------------------
    def image_features(self, pixel_values: Tensor, record: Record = None) -> Tensor:
        """(N, 3, H, W) in [-1, 1] -> connector output (N, T, text width), before the sqrt(width) scaling."""
        feats = self._vlm.vision_model(pixel_values, record)
        if record is not None:
            record["vision_out"] = feats
        return cast(Tensor, self._vlm.connector(feats))

    def vision(self, images: Tensor) -> Tensor:
        """images (B, V, 3, H, W) in [-1, 1] at the resized size -> image tokens (B, V*T, text width).

        Includes LeRobot's scaling by sqrt(width), a tensor of the tokens' dtype (not a Python float).
        """
        images = fit_images(images, self.cfg)
        b, nv = images.shape[:2]
        tokens = self.image_features(images.flatten(0, 1))
        scale = torch.tensor(self.cfg.vlm.text.width**0.5, dtype=tokens.dtype, device=tokens.device)
        return (tokens * scale).reshape(b, nv * tokens.shape[1], -1)

    # ---- sub-engine 2: prefix ------------------------------------------------------------------------------
    def embed_prefix(
        self,
        image_tokens: Tensor,
        image_masks: Tensor,
        lang_tokens: Tensor,
        lang_masks: Tensor,
        state: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(embeddings (B, P, W), validity (B, P) bool, block starts (B, P) bool), as LeRobot's embed_prefix."""
        cfg = self.cfg
        b, device = image_tokens.shape[0], image_tokens.device
        embed = self._vlm.text_model.embed_tokens
        t = cfg.image_tokens_per_view
        image_masks = image_masks.bool()
        embs: list[Tensor] = []
        pads: list[Tensor] = []

        def special(ids: tuple[int, ...]) -> None:
            if ids:  # raw embeddings: LeRobot does not scale the image special tokens
                embs.append(embed.weight[list(ids)][None].expand(b, -1, -1))
                pads.append(torch.ones(b, len(ids), dtype=torch.bool, device=device))

        for view in range(image_masks.shape[1]):
            special(cfg.image_start_ids)
            embs.append(image_tokens[:, view * t : (view + 1) * t].to(embed.weight.dtype))
            pads.append(image_masks[:, view : view + 1].expand(b, t))
            special(cfg.image_end_ids)
        lang = embed(lang_tokens)
        embs.append(lang * math.sqrt(self.cfg.vlm.text.width))
        pads.append(lang_masks.bool())
        state_emb = self.state_proj(state.to(self.state_proj.weight.dtype))
        embs.append(state_emb[:, None, :].to(embed.weight.dtype))
        pads.append(torch.ones(b, 1, dtype=torch.bool, device=device))
        x, pad = torch.cat(embs, dim=1), torch.cat(pads, dim=1)
        att = torch.zeros_like(pad)
        att[:, -1] = True  # the state token starts a block: image + prompt tokens do not see it
        if pad.shape[1] < cfg.prefix_length:
            extra = cfg.prefix_length - pad.shape[1]
            x = F.pad(x, (0, 0, 0, extra))
            pad, att = F.pad(pad, (0, extra)), F.pad(att, (0, extra))
        return x, pad, att

    def prefix_pass(
        self, x: Tensor, pad: Tensor, att: Tensor, record: Record = None
    ) -> tuple[Tensor, Tensor]:
        """VLM layers over the prefix; returns per-layer keys (after RoPE) and values (layers, B, kv, P, D)."""
        text = self.cfg.vlm.text
        allowed = make_att_2d_masks(pad, att)
        positions = torch.cumsum(pad.to(torch.int64), dim=1) - 1
        if record is not None:
            record.update(prefix_att_2d_masks=allowed, prefix_position_ids=positions)
        cos, sin = rope_tables(positions, text.head_dim)
        layers = cast(list[LlamaLayer], list(self._vlm.text_model.layers))
        ks, vs = [], []
        for i, layer in enumerate(layers):
            if record is not None:
                record[f"vlm_layer{i}_in"] = x
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = apply_rope(attn.heads(attn.q_proj, h), cos, sin)
            k = apply_rope(attn.heads(attn.k_proj, h), cos, sin)
            v = attn.heads(attn.v_proj, h)
            ks.append(k.transpose(1, 2))
            vs.append(v.transpose(1, 2))
            if i < len(layers) - 1:  # the last layer's output reaches nothing but the unused final norm
                x = layer.finish(x, eager_attention(q, k, v, allowed, text.head_dim))
        return torch.stack(ks), torch.stack(vs)

    def prefix(
        self,
        image_tokens: Tensor,
        image_masks: Tensor,
        lang_tokens: Tensor,
        lang_masks: Tensor,
        state: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Run the VLM once: (k, v (layers, B, kv_heads, P, head_dim), prefix pad mask (B, P) bool).

        state (B, max_state_dim): normalised and zero-padded (`prepare_state`).
        """
        x, pad, att = self.embed_prefix(image_tokens, image_masks, lang_tokens, lang_masks, state)
        k, v = self.prefix_pass(x, pad, att)
        return k, v, pad

    # ---- sub-engine 3: one denoising step --------------------------------------------------------------------
    def embed_suffix(self, x_t: Tensor, t: Tensor, record: Record = None) -> Tensor:
        """Chunk tokens (B, chunk, expert width): action_time_mlp_out(silu(mlp_in([action_in(x), time])))."""
        b = x_t.shape[0]
        t = t.to(torch.float32).reshape(-1).expand(b) if t.numel() == 1 else t.to(torch.float32)
        action = self.action_in_proj(x_t.to(self.dtype))
        temb = sincos_time(t, self.cfg.expert.width, self.cfg.min_period, self.cfg.max_period)
        joint = torch.cat((action, temb.to(action.dtype)[:, None, :].expand_as(action)), dim=2)
        if record is not None:
            record.update(time_sincos=temb, action_emb=action, action_time_in=joint)
        return cast(Tensor, self.action_time_mlp_out(F.silu(self.action_time_mlp_in(joint))))

    def expert_pass(
        self, k: Tensor, v: Tensor, prefix_pad: Tensor, x: Tensor, record: Record = None
    ) -> Tensor:
        """Expert layers over the chunk tokens, reading the prefix cache; returns the final-norm output."""
        cfg, head_dim = self.cfg, self.cfg.expert.head_dim
        b, s, p = x.shape[0], x.shape[1], prefix_pad.shape[1]
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None].expand(b, s, s)
        full = torch.cat((prefix_pad[:, None, :].expand(b, s, p), causal), dim=2)
        positions = prefix_pad.sum(dim=-1)[:, None] + torch.arange(s, device=x.device)[None]
        if record is not None:
            record.update(suffix_att_2d_masks=full, suffix_position_ids=positions)
        cos, sin = rope_tables(positions, head_dim)
        cross_pos = positions - torch.min(positions, dim=1, keepdim=True).values  # "start from 0"
        cos0, sin0 = rope_tables(cross_pos, head_dim)
        layers = cast(list[LlamaLayer], list(self.vlm_with_expert.lm_expert.layers))
        for i, plan in enumerate(cfg.layers):
            if plan.expert is None:  # a cross layer without an expert layer leaves the chunk unchanged
                continue
            layer = layers[plan.expert]
            if record is not None:
                record[f"expert_layer{plan.expert}_in"] = x
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            cache_k, cache_v = k[i].transpose(1, 2), v[i].transpose(1, 2)  # (B, P, kv, D)
            if plan.cross:
                q = apply_rope(attn.heads(attn.q_proj, h), cos0, sin0)
                keys = attn.heads(attn.k_proj, cache_k.reshape(b, p, -1))
                values = attn.heads(attn.v_proj, cache_v.reshape(b, p, -1))
                att = eager_attention(q, keys, values, full[:, :, :p], head_dim)
            else:
                q = apply_rope(attn.heads(attn.q_proj, h), cos, sin)
                keys = torch.cat((cache_k, apply_rope(attn.heads(attn.k_proj, h), cos, sin)), dim=1)
                values = torch.cat((cache_v, attn.heads(attn.v_proj, h)), dim=1)
                att = eager_attention(q, keys, values, full, head_dim)
            x = layer.finish(x, att)
        return cast(Tensor, self.vlm_with_expert.lm_expert.norm(x))

    def denoise_step(self, k: Tensor, v: Tensor, prefix_pad_mask: Tensor, x_t: Tensor, t: Tensor) -> Tensor:
        """Velocity v(x_t, t) (B, chunk, max_action_dim) in float32; t is (B,) or a scalar."""
        out = self.expert_pass(k, v, prefix_pad_mask.bool(), self.embed_suffix(x_t, t))
        out = out[:, -self.cfg.chunk_size :].to(self.action_out_proj.weight.dtype)
        return self.action_out_proj(out).float()


# ---- inputs ----------------------------------------------------------------------------------------------------


def resize_with_pad(img: Tensor, height: int, width: int, pad_value: float = 0.0) -> Tensor:
    """LeRobot's vla_utils.resize_with_pad: keep the aspect ratio (bilinear, no antialias), pad top and left."""
    h, w = img.shape[2:]
    if (h, w) == (height, width):
        return img
    ratio = max(w / width, h / height)
    rh, rw = int(h / ratio), int(w / ratio)
    out = F.interpolate(img, size=(rh, rw), mode="bilinear", align_corners=False)
    return F.pad(out, (max(0, width - rw), 0, max(0, height - rh), 0), value=pad_value)


def fit_images(images: Tensor, cfg: SmolVLAConfig) -> Tensor:
    """Model-space images (..., C, H, W) in [-1, 1] prepared at the checkpoint's own size, resized to the
    size a `vision-res` model takes (`cfg.native_image_size` -> `cfg.image_size`, LeRobot's resize-with-pad,
    padding at -1 = 2 * 0 - 1); any other images are returned as they are (the shape checks name them).
    Bilinear interpolation is affine, so resizing in [-1, 1] equals resizing in [0, 1] and mapping after; a
    policy prepares its raw frames at `image_size` directly (one interpolation, not two)."""
    native = cfg.native_image_size
    if native is None or images.ndim < 4 or not images.is_floating_point():
        return images
    if tuple(images.shape[-2:]) != tuple(native) or tuple(native) == cfg.image_size:
        return images
    lead = images.shape[:-3]
    flat = images.reshape(-1, *images.shape[-3:])
    out = resize_with_pad(flat, *cfg.image_size, pad_value=-1.0)
    return out.reshape(*lead, *out.shape[1:])


def prepare_images(
    images: Mapping[str, Tensor] | Sequence[Tensor] | Tensor, cfg: SmolVLAConfig
) -> tuple[Tensor, Tensor]:
    """LeRobot's SmolVLAPolicy.prepare_images: -> (images (B, V, 3, H, W) in [-1, 1], masks (B, V) bool).

    `images`: a batch dict (camera key -> (B, 3, H, W) float in [0, 1], or (B, T, 3, H, W): the last frame is
    used; an optional `<key>_padding_mask` (B,) gives the view's validity), or the camera tensors in
    `cfg.camera_keys` order. Each is resized with padding to `resize_imgs_with_padding` (if set) and mapped to
    2x - 1; then `empty_cameras` slots of -1 with masks False follow. Every camera must be there: without one,
    LeRobot changes the number of views.
    """
    if isinstance(images, Tensor):
        images = list(images.unbind(1)) if images.ndim == 5 else [images]
    if isinstance(images, Mapping):
        missing = [k for k in cfg.camera_keys if k not in images]
        if missing:
            raise ConfigError(
                f"camera {missing[0]!r} is missing from the batch; the policy takes {list(cfg.camera_keys)}"
            )
        named = [(k, torch.as_tensor(images[k]), images.get(f"{k}_padding_mask")) for k in cfg.camera_keys]
    else:
        if len(images) != len(cfg.camera_keys):
            raise ConfigError(
                f"got {len(images)} camera images; the policy takes {len(cfg.camera_keys)} "
                f"({', '.join(cfg.camera_keys)}), plus {cfg.empty_cameras} empty slots it adds itself"
            )
        named = [(k, img, None) for k, img in zip(cfg.camera_keys, images, strict=True)]
    out, masks = [], []
    height, width = cfg.image_size
    for key, img, mask in named:
        channels = cfg.vlm.vision.num_channels
        if not isinstance(img, Tensor) or img.ndim not in (4, 5) or not img.is_floating_point():
            raise ConfigError(f"camera {key!r} must be a float tensor (B, {channels}, H, W) in [0, 1]")
        if img.shape[-3] != channels:
            raise ConfigError(
                f"camera {key!r} has {img.shape[-3]} channels; the patch embedding takes {channels}"
            )
        img = img[:, -1] if img.ndim == 5 else img
        if cfg.resize_with_pad:
            img = resize_with_pad(img, height, width, pad_value=0.0)
        if tuple(img.shape[2:]) != (height, width):
            raise ConfigError(f"camera {key!r} is {tuple(img.shape[2:])}; the model takes {(height, width)}")
        out.append(img * 2.0 - 1.0)
        b = img.shape[0]
        ones = torch.ones(b, dtype=torch.bool, device=img.device)
        masks.append(torch.as_tensor(mask).bool() if mask is not None else ones)
    for _ in range(cfg.empty_cameras):
        out.append(torch.ones_like(out[-1]) * -1)
        masks.append(torch.zeros_like(masks[-1]))
    return torch.stack(out, dim=1), torch.stack(masks, dim=1)


def prepare_state(state: Tensor, cfg: SmolVLAConfig) -> Tensor:
    """LeRobot's prepare_state: the last frame of (B, T, d) and zero-padding to max_state_dim."""
    state = state[:, -1, :] if state.ndim > 2 else state
    if state.ndim != 2 or state.shape[1] > cfg.max_state_dim:
        raise ConfigError(
            f"state has shape {tuple(state.shape)}; expected (B, <= max_state_dim {cfg.max_state_dim})"
        )
    return F.pad(state, (0, cfg.max_state_dim - state.shape[-1]))


def _check(x: Any, name: str, shape: tuple[int, ...], kind: str) -> None:
    if not isinstance(x, Tensor):
        raise ConfigError(f"{name} must be a tensor of shape {shape} (got {type(x).__name__})")
    if tuple(x.shape) != shape:
        raise ConfigError(f"{name} has shape {tuple(x.shape)}; expected {shape}")
    if kind == "float" and not x.is_floating_point():
        raise ConfigError(f"{name} must be a float tensor (got {x.dtype})")
    if kind == "int" and (x.is_floating_point() or x.dtype == torch.bool):
        raise ConfigError(f"{name} must hold integer token ids (got {x.dtype})")


def check_inputs(
    model: SmolVLAModel,
    images: Tensor,
    image_masks: Tensor,
    lang_tokens: Tensor,
    lang_masks: Tensor,
    state: Tensor,
    noise: Tensor | None,
    num_steps: int | None,
) -> None:
    """ConfigError naming the first input that does not fit the model (the image count included)."""
    cfg = model.cfg
    if not isinstance(images, Tensor) or images.ndim != 5:
        raise ConfigError(
            f"images must be a tensor (B, V, 3, H, W); got {getattr(images, 'shape', type(images))}"
        )
    images = fit_images(images, cfg)
    b, h, w = images.shape[0], *cfg.image_size
    if images.shape[1] != cfg.views:
        raise ConfigError(
            f"images hold {images.shape[1]} views; the policy takes {cfg.views} ({len(cfg.camera_keys)} cameras "
            f"{list(cfg.camera_keys)} + empty_cameras {cfg.empty_cameras}): use prepare_images"
        )
    _check(images, "images", (b, cfg.views, 3, h, w), "float")
    _check(image_masks, "image_masks", (b, cfg.views), "")
    if not isinstance(lang_tokens, Tensor) or lang_tokens.ndim != 2:
        raise ConfigError("lang_tokens must be a tensor (B, L) of token ids")
    _check(lang_tokens, "lang_tokens", (b, lang_tokens.shape[1]), "int")
    _check(lang_masks, "lang_masks", (b, lang_tokens.shape[1]), "")
    if lang_tokens.numel() and (int(lang_tokens.min()) < 0 or int(lang_tokens.max()) >= cfg.vlm.vocab_size):
        raise ConfigError(f"lang_tokens hold ids outside the vocabulary [0, {cfg.vlm.vocab_size})")
    _check(state, "state", (b, cfg.max_state_dim), "float")
    if noise is not None:
        _check(noise, "noise", (b, cfg.chunk_size, cfg.max_action_dim), "float")
    if num_steps is not None and (
        isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1
    ):
        raise ConfigError(f"num_steps must be a positive integer (got {num_steps!r})")


@torch.no_grad()
def sample_actions(
    model: SmolVLAModel,
    images: Tensor,
    image_masks: Tensor,
    lang_tokens: Tensor,
    lang_masks: Tensor,
    state: Tensor,
    noise: Tensor | None = None,
    num_steps: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """VLAFlowMatching.sample_actions: Euler from t = 1 (noise) to 0 -> (B, chunk, max_action_dim) float32.

    The float arithmetic is LeRobot's: dt = -1/N and t = 1 + k*dt in Python floats, t cast to float32 per
    step, x <- x + dt * v. `noise` defaults to N(0, 1) from `generator`; `num_steps` to config.json's.
    """
    check_inputs(model, images, image_masks, lang_tokens, lang_masks, state, noise, num_steps)
    cfg = model.cfg
    b = images.shape[0]
    if noise is None:
        noise = torch.randn(b, cfg.chunk_size, cfg.max_action_dim, generator=generator, device=images.device)
    k, v, pad = model.prefix(model.vision(images), image_masks, lang_tokens, lang_masks, state)
    return euler(model, k, v, pad, noise, num_steps if num_steps is not None else cfg.num_steps)


def euler(model: SmolVLAModel, k: Tensor, v: Tensor, pad: Tensor, noise: Tensor, steps: int) -> Tensor:
    """The flow from `noise` (t = 1) to actions (t = 0) over the prefix's K/V in `steps` Euler steps, in
    LeRobot's float arithmetic: dt = -1/N and t = 1 + k*dt in Python floats, t cast to float32 per step."""
    dt = -1.0 / steps
    x = noise.to(torch.float32)
    for step in range(steps):
        t = torch.tensor(1.0 + step * dt, dtype=torch.float32, device=x.device).expand(noise.shape[0])
        x = x + dt * model.denoise_step(k, v, pad, x, t)
    return x


LANG_TOKENS = "observation.language.tokens"
LANG_MASK = "observation.language.attention_mask"
STATE = "observation.state"


def predict_action_chunk(
    model: SmolVLAModel, batch: Mapping[str, Any], noise: Tensor | None = None, num_steps: int | None = None
) -> Tensor:
    """SmolVLAPolicy.predict_action_chunk on a model-space batch -> (B, chunk, action_dim) normalised actions.

    All chunk_size steps are returned; LeRobot's select_action would execute the first n_action_steps.
    """
    missing = [k for k in (LANG_TOKENS, LANG_MASK, STATE) if k not in batch]
    if missing:
        raise ConfigError(f"batch lacks {missing[0]!r} (keys: {sorted(batch)})")
    images, masks = prepare_images(batch, model.cfg)
    state = prepare_state(torch.as_tensor(batch[STATE]), model.cfg)
    lang, lang_mask = torch.as_tensor(batch[LANG_TOKENS]), torch.as_tensor(batch[LANG_MASK])
    x = sample_actions(model, images, masks, lang, lang_mask, state, noise, num_steps)
    return x[:, :, : model.cfg.action_dim]


# ---- loading ---------------------------------------------------------------------------------------------------

LOAD_DTYPES = (torch.float32, torch.bfloat16)


def load_smolvla(
    folder: str | Path, dtype: torch.dtype = torch.float32
) -> tuple[SmolVLAConfig, SmolVLAModel]:
    """Config from the folder, the model built on `meta` and every tensor assigned (strict, shapes checked).

    `vlm_with_expert.vlm.lm_head.weight` is checked and not loaded: SmolVLA never emits tokens.
    """
    from safetensors import safe_open

    if dtype not in LOAD_DTYPES:
        raise ConfigError(f"dtype {dtype} is not supported; use torch.float32 or torch.bfloat16")
    folder = Path(folder)
    cfg = read_smolvla_config(folder)
    with torch.device("meta"):
        model = SmolVLAModel(cfg).to(dtype)
    expected = dict(model.named_parameters())
    path = folder / "model.safetensors"
    state: dict[str, Tensor] = {}
    unexpected: list[str] = []
    mismatched: list[str] = []
    with safe_open(str(path), framework="pt") as handle:
        for key in handle.keys():  # noqa: SIM118
            name = key.removeprefix("model.")
            shape = tuple(handle.get_slice(key).get_shape())
            if name == LM_HEAD_KEY:
                want: tuple[int, ...] = (cfg.vlm.vocab_size, cfg.vlm.text.width)
            elif name in expected:
                want = tuple(expected[name].shape)
            else:
                unexpected.append(key)
                continue
            if shape != want:
                mismatched.append(f"{key}: found {shape}, expected {want}")
            elif name != LM_HEAD_KEY:
                state[name] = handle.get_tensor(key).to(dtype)
    missing = [
        "model." + n
        for n in expected
        if n not in state and not any(m.startswith(f"model.{n}:") for m in mismatched)
    ]
    if missing or unexpected or mismatched:
        parts = [f"{path} does not match the SmolVLA its config describes:"]
        for what, items in (("shape mismatch", mismatched), ("missing", missing), ("unexpected", unexpected)):
            if items:
                parts.append(f"{what} ({len(items)}): " + "; ".join(items))
        raise CheckpointError("\n  ".join(parts))
    return cfg, assign_finite(model, state, path, "model.")


# ---- stage-by-stage outputs, keyed like the parity fixtures' intermediates.npz -------------------------------


@torch.no_grad()
def smolvla_intermediates(
    model: SmolVLAModel, batch: Mapping[str, Any], noise: Tensor, num_steps: int | None = None
) -> dict[str, Tensor]:
    """Run predict_action_chunk on a model-space batch and return every stage, named as in intermediates.npz."""
    cfg = model.cfg
    out: dict[str, Tensor] = {}
    images, masks = prepare_images(batch, cfg)
    tokens = []
    for i in range(cfg.views):  # LeRobot embeds each view separately
        rec: dict[str, Tensor] = {}
        feats = model.image_features(images[:, i], rec)
        out.update(
            {
                f"vision_in_cam{i}": images[:, i],
                f"vision_patch_embeds_cam{i}": rec["patch_embeds"],
                f"vision_position_ids_cam{i}": rec["position_ids"],
                f"vision_out_cam{i}": rec["vision_out"],
                f"image_tokens_cam{i}": feats,
            }
        )
        tokens.append(feats * torch.tensor(feats.shape[-1] ** 0.5, dtype=feats.dtype))
    state = prepare_state(torch.as_tensor(batch[STATE]), cfg)
    lang, lang_mask = torch.as_tensor(batch[LANG_TOKENS]), torch.as_tensor(batch[LANG_MASK])
    x, pad, att = model.embed_prefix(torch.cat(tokens, dim=1), masks, lang, lang_mask, state)
    out.update(prefix_embs=x, prefix_pad_masks=pad, prefix_att_masks=att)
    rec = {}
    k, v = model.prefix_pass(x, pad, att, rec)
    out.update(rec)
    for layer in range(k.shape[0]):
        out[f"kv_cache_k_layer{layer}"], out[f"kv_cache_v_layer{layer}"] = k[layer], v[layer]
    steps = num_steps if num_steps is not None else cfg.num_steps
    dt = -1.0 / steps
    xt = noise.to(torch.float32)
    per_step: dict[str, list[Tensor]] = {n: [] for n in ("time", "t", "x", "suffix", "expert", "v")}
    for step in range(steps):
        t = torch.tensor(1.0 + step * dt, dtype=torch.float32).expand(xt.shape[0])
        rec = {}
        suffix = model.embed_suffix(xt, t, rec)
        expert = model.expert_pass(k, v, pad, suffix, rec)[:, -cfg.chunk_size :]
        vel = model.action_out_proj(expert.to(model.action_out_proj.weight.dtype)).float()
        if step == 0:
            out.update(action_emb_step0=rec["action_emb"], action_time_in_step0=rec["action_time_in"])
            out.update(
                suffix_att_2d_masks=rec["suffix_att_2d_masks"], suffix_position_ids=rec["suffix_position_ids"]
            )
            out.update({f"{n}_step0": r for n, r in rec.items() if n.startswith("expert_layer")})
        for name, value in (
            ("time", rec["time_sincos"]),
            ("t", t[0]),
            ("x", xt),
            ("suffix", suffix),
            ("expert", expert),
            ("v", vel),
        ):
            per_step[name].append(value)
        xt = xt + dt * vel
    out.update(
        x_0_full=xt,
        time_sincos_per_step=torch.stack(per_step["time"]),
        timesteps=torch.stack(per_step["t"]),
        x_t_per_step=torch.stack(per_step["x"]),
        suffix_embs_per_step=torch.stack(per_step["suffix"]),
        expert_out_per_step=torch.stack(per_step["expert"]),
        v_t_per_step=torch.stack(per_step["v"]),
        actions=xt[:, :, : cfg.action_dim],
    )
    return out


__all__ = [
    "SmolVLAConfig",
    "SmolVLAModel",
    "SmolVLATokenizer",
    "euler",
    "fit_images",
    "load_smolvla",
    "load_tokenizer",
    "predict_action_chunk",
    "prepare_images",
    "prepare_state",
    "read_smolvla_config",
    "resize_with_pad",
    "sample_actions",
    "smolvla_intermediates",
]
