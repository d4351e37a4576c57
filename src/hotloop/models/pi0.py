"""pi0 and pi0.5 (flag `PiConfig.pi05`) as three sub-engines with fixed shapes.

    vision(images (B, V, 3, H, W))                      -> image tokens (B, V*T, vlm width)
    prefix(image_tokens, image_masks, lang_tokens, lang_masks) -> PrefixCache (per-layer K after RoPE, V)
    denoise_step(cache, x_t, t[, state])                -> velocity (B, chunk, max_action_dim)

`sample_actions` in `hotloop.families.pi.sampling` composes them with the Euler integrator. The prefix runs once per
observation; every denoising step reads the same prefix-only cache (suffix keys are never appended).

Semantics follow LeRobot's PI0/PI05 and the parity fixtures in `shared/fixtures`: images then prompt form
one bidirectional block; positions count valid tokens only; masks are additive with MASK_VALUE; only the
prompt embeddings are scaled by sqrt(VLM width). pi0 adds a state token and an action-time MLP to the
suffix; pi0.5 has no state token (the state is discretized into the prompt, see `state_prompt_tokens`) and
conditions every expert norm on the time through adaRMS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.models.configs import PiConfig
from hotloop.models.gemma import MASK_VALUE, GemmaLayer, GemmaStack, rope_cos_sin
from hotloop.models.siglip import Projector, SiglipVision


@dataclass
class PrefixCache:
    """What the denoising steps read: per-layer keys (after RoPE) and values of the prefix, plus masks.

    k, v: (depth, B, kv_heads, P, head_dim). pad_mask: (B, P) bool validity. num_valid: (B,) int64, where
    the suffix positions start. suffix_mask: (B, 1, S, P + S) additive mask of the expert's attention and
    suffix_positions: (B, S) its RoPE positions; both depend only on the prefix validity, so they are
    computed once per observation instead of once per step.
    """

    k: Tensor
    v: Tensor
    pad_mask: Tensor
    num_valid: Tensor
    suffix_mask: Tensor
    suffix_positions: Tensor

    def copy_(self, other: PrefixCache) -> PrefixCache:
        """Write `other` into these preallocated tensors (static addresses for graph capture)."""
        for name in ("k", "v", "pad_mask", "num_valid", "suffix_mask", "suffix_positions"):
            getattr(self, name).copy_(getattr(other, name))
        return self


def make_att_2d_masks(pad_masks: Tensor, att_masks: Tensor) -> Tensor:
    """Permission (B, L, L) from validity (B, L) and block-start flags (B, L).

    A token may attend to tokens whose block index (cumulative sum of block starts) is <= its own, and only
    when both are valid. All-zero flags give one bidirectional block.
    """
    blocks = torch.cumsum(att_masks.to(torch.int64), dim=1)
    allowed = blocks[:, None, :] <= blocks[:, :, None]
    return allowed & (pad_masks[:, None, :] & pad_masks[:, :, None])


def additive_mask(allowed: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """bool (B, Lq, Lk) -> additive (B, 1, Lq, Lk): 0 where allowed, MASK_VALUE where blocked."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    blocked = torch.tensor(MASK_VALUE, dtype=dtype, device=allowed.device)
    return torch.where(allowed[:, None], zero, blocked)


def prefix_masks(
    image_masks: Tensor, lang_masks: Tensor, tokens_per_view: int
) -> tuple[Tensor, Tensor, Tensor]:
    """(pad (B, P) bool, permission (B, P, P) bool, positions (B, P) int64) of the prefix.

    image_masks (B, V) bool: each view's flag covers its tokens. Positions = cumsum(valid) - 1, so padding
    does not advance them (leading padding even gets -1).
    """
    pad = torch.cat((image_masks.repeat_interleave(tokens_per_view, dim=1), lang_masks.bool()), dim=1)
    allowed = make_att_2d_masks(pad, torch.zeros_like(pad))
    positions = torch.cumsum(pad.to(torch.int64), dim=1) - 1
    return pad, allowed, positions


def suffix_block_starts(cfg: PiConfig, batch: int, device: torch.device | None = None) -> Tensor:
    """Block-start flags of the suffix: pi0 [state | actions] = [1, 1, 0...]; pi0.5 [actions] = [1, 0...]."""
    flags = [1] + ([] if cfg.pi05 else [1]) + [0] * (cfg.chunk_size - 1)
    return torch.tensor(flags, dtype=torch.bool, device=device).expand(batch, -1)


def suffix_masks(cfg: PiConfig, prefix_pad: Tensor) -> tuple[Tensor, Tensor]:
    """(permission (B, S, P + S) bool, positions (B, S) int64) of the expert's suffix tokens."""
    b, p = prefix_pad.shape
    s = cfg.suffix_len
    suffix_pad = torch.ones(b, s, dtype=torch.bool, device=prefix_pad.device)
    own = make_att_2d_masks(suffix_pad, suffix_block_starts(cfg, b, prefix_pad.device))
    allowed = torch.cat((prefix_pad[:, None, :].expand(b, s, p), own), dim=2)
    positions = prefix_pad.sum(dim=1, keepdim=True) + torch.cumsum(suffix_pad.to(torch.int64), dim=1) - 1
    return allowed, positions


def sincos_time_embedding(t: Tensor, dim: int, min_period: float, max_period: float) -> Tensor:
    """(B,) times -> (B, dim) [sin, cos] embedding, computed in float64 then rounded to t's dtype.

    float64 matters: the shortest period is 0.004, so t * 2pi / period reaches ~1.6e3 rad, where float32
    phase errors would be visible at the fixtures' tolerance.
    """
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    scaling = 1.0 / period * 2 * math.pi
    arg = scaling[None, :] * t.to(torch.float64)[:, None]
    return torch.cat((torch.sin(arg), torch.cos(arg)), dim=1).to(t.dtype)


def discretize_state(state: np.ndarray | Tensor, num_bins: int = 256) -> np.ndarray:
    """Normalised state in [-1, 1] -> integer bins in [0, num_bins), as openpi's pi0.5 tokenizer does.

    Values outside [-1, 1] clip to the first / last bin.
    """
    values = state.detach().cpu().numpy() if isinstance(state, Tensor) else np.asarray(state)
    edges = np.linspace(-1.0, 1.0, num_bins + 1)[:-1]
    return (np.digitize(values, bins=edges) - 1).clip(0, num_bins - 1).astype(np.int64)


def state_prompt_tokens(
    task_ids: np.ndarray | list[int], state: np.ndarray, cfg: PiConfig, num_bins: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Token-id-only pi0.5 prompt (no tokenizer): [task ids..., state bin ids...], right-padded.

    With a real tokenizer openpi writes "Task: ..., State: 12 200 ...;\\nAction: " as text. Without one,
    the last `num_bins` rows of the embedding table stand for the bins: bin b -> id vocab_size - num_bins
    + b, and task ids must lie below vocab_size - num_bins. Returns (ids (max_token_len,) int64, mask bool).
    """
    base = cfg.vocab_size - num_bins
    if base < 1:
        raise ValueError(f"vocab_size {cfg.vocab_size} leaves no room for {num_bins} state bins")
    task = np.asarray(task_ids, dtype=np.int64)
    if task.size and (task.min() < 0 or task.max() >= base):
        raise ValueError(f"task token ids must lie in [0, {base}) so they do not collide with state bins")
    ids = np.concatenate((task, base + discretize_state(state, num_bins)))[: cfg.max_token_len]
    tokens = np.zeros(cfg.max_token_len, dtype=np.int64)
    mask = np.zeros(cfg.max_token_len, dtype=bool)
    tokens[: ids.size], mask[: ids.size] = ids, True
    return tokens, mask


def fit_views(views: Tensor, cfg: PiConfig) -> Tensor:
    """Camera views (N, 3, H, W) in [-1, 1] at the checkpoint's own side (`cfg.image_side`) resized to the
    side a `vision-res` model's tower takes (`cfg.vision.image_size`), bilinear without antialiasing as
    LeRobot's resize (`hotloop.families.pi.policy.resize_with_pad`; both sides are square, so nothing is
    padded); any other views are returned as they are. Part of the model's own vision path (and so of the
    traced vision engine): observations, bench inputs and served frames stay at the native side."""
    side, native = cfg.vision.image_size, cfg.image_side
    if native == side or tuple(views.shape[-2:]) != (native, native):
        return views
    return F.interpolate(views, size=(side, side), mode="bilinear", align_corners=False)


class PiModel(nn.Module):
    """The pi0 / pi0.5 network. Parameter names map to LeRobot's by prefix (see checkpoints.py)."""

    def __init__(self, cfg: PiConfig) -> None:
        super().__init__()
        self.cfg = cfg
        ew = cfg.expert.width
        self.vision_tower = SiglipVision(cfg.vision)
        self.projector = Projector(cfg.vision.width, cfg.vlm.width)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.vlm.width)
        self.vlm = GemmaStack(cfg.vlm)
        self.expert = GemmaStack(cfg.expert, adaptive=cfg.pi05)
        self.action_in_proj = nn.Linear(cfg.max_action_dim, ew)
        self.action_out_proj = nn.Linear(ew, cfg.max_action_dim)
        if cfg.pi05:
            self.time_mlp_in = nn.Linear(ew, ew)
            self.time_mlp_out = nn.Linear(ew, ew)
        else:
            self.state_proj = nn.Linear(cfg.max_state_dim, ew)
            self.action_time_mlp_in = nn.Linear(2 * ew, ew)
            self.action_time_mlp_out = nn.Linear(ew, ew)

    @property
    def dtype(self) -> torch.dtype:
        return self.action_in_proj.weight.dtype

    # ---- sub-engine 1: vision --------------------------------------------------------------------------
    def vision(self, images: Tensor) -> Tensor:
        """images (B, V, 3, H, W) in [-1, 1] -> projected image tokens (B, V*T, vlm width), views in order.
        Images at the checkpoint's own side are resized to a `vision-res` tower's (`fit_views`)."""
        b, nv = images.shape[:2]
        feats = self.vision_tower(fit_views(images.flatten(0, 1), self.cfg))
        return self.projector(feats).reshape(b, nv * feats.shape[1], -1)

    def embed_prompt(self, lang_tokens: Tensor) -> Tensor:
        # The sqrt(width) factor is a float32 constant rounded to the model dtype, as in the peer.
        scale = torch.tensor(self.cfg.vlm.width**0.5, dtype=torch.float32).to(self.embed_tokens.weight.dtype)
        return self.embed_tokens(lang_tokens) * scale

    # ---- sub-engine 2: prefix --------------------------------------------------------------------------
    def prefix(
        self,
        image_tokens: Tensor,
        image_masks: Tensor,
        lang_tokens: Tensor,
        lang_masks: Tensor,
        out: PrefixCache | None = None,
    ) -> PrefixCache:
        """Run the VLM once over [images, prompt] and return its per-layer keys/values.

        With `out` (from `allocate_cache`) the result is copied into those static tensors; without, fresh
        tensors are returned and autograd flows through them (training).
        """
        cfg = self.cfg
        x = torch.cat((image_tokens.to(self.dtype), self.embed_prompt(lang_tokens)), dim=1)
        pad, allowed, positions = prefix_masks(
            image_masks.bool(), lang_masks.bool(), cfg.vision.tokens_per_view
        )
        mask = additive_mask(allowed, x.dtype)
        cos, sin = rope_cos_sin(positions, cfg.vlm.head_dim, cfg.vlm.rope_base, x.dtype)
        ks, vs = [], []
        layers = cast(list[GemmaLayer], list(self.vlm.layers))
        for i, layer in enumerate(layers):
            if i == len(layers) - 1:
                k, v = layer.kv_only(x, cos, sin)
            else:
                x, k, v = layer(x, cos, sin, mask)
            ks.append(k)
            vs.append(v)
        s_allowed, s_positions = suffix_masks(cfg, pad)
        cache = PrefixCache(
            k=torch.stack(ks),
            v=torch.stack(vs),
            pad_mask=pad,
            num_valid=pad.sum(dim=1),
            suffix_mask=additive_mask(s_allowed, x.dtype),
            suffix_positions=s_positions,
        )
        return cache if out is None else out.copy_(cache)

    def allocate_cache(self, batch: int, device: torch.device | str | None = None) -> PrefixCache:
        """Preallocated, fixed-size cache for `prefix(..., out=cache)`."""
        cfg, p, s = self.cfg, self.cfg.prefix_len, self.cfg.suffix_len
        device = device if device is not None else self.action_in_proj.weight.device
        kv_shape = (cfg.vlm.depth, batch, cfg.vlm.num_kv_heads, p, cfg.vlm.head_dim)
        return PrefixCache(
            k=torch.zeros(kv_shape, dtype=self.dtype, device=device),
            v=torch.zeros(kv_shape, dtype=self.dtype, device=device),
            pad_mask=torch.zeros(batch, p, dtype=torch.bool, device=device),
            num_valid=torch.zeros(batch, dtype=torch.int64, device=device),
            suffix_mask=torch.zeros(batch, 1, s, p + s, dtype=self.dtype, device=device),
            suffix_positions=torch.zeros(batch, s, dtype=torch.int64, device=device),
        )

    # ---- sub-engine 3: one denoising step ----------------------------------------------------------------
    def embed_suffix(self, x_t: Tensor, t: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """(expert input tokens (B, S, expert width), adaRMS conditioning or None).

        `t` is a scalar, one time per sample (B,), or one per action token (B, chunk): the last is
        training-time action conditioning (`hotloop.families.pi.rtc_prefix`), where the given prefix of the
        chunk sits at t = 0 and the rest at the sample's t. The conditioning is then (B, chunk, width)
        instead of (B, width), so every adaRMS norm scales, shifts and gates each token by its own time.
        """
        cfg = self.cfg
        b, h = x_t.shape[0], x_t.shape[1]
        per_token = t.ndim == 2
        if per_token and tuple(t.shape) != (b, h):
            raise ValueError(f"per-token time must be (B, chunk) = {(b, h)}; got {tuple(t.shape)}")
        # Per token, every time-only layer runs once per token position on (B, width), the exact shapes of
        # the one-time path: a matmul's rounding depends on its row count, and equal times must give
        # bit-identical outputs (the parity fixtures pin the one-time path).
        columns = [t[:, j] for j in range(h)] if per_token else [t]
        temb_cols = [
            sincos_time_embedding(
                c.to(torch.float32).expand(b), cfg.expert.width, cfg.min_period, cfg.max_period
            ).to(self.dtype)
            for c in columns
        ]
        action_emb = self.action_in_proj(x_t.to(self.dtype))
        if cfg.pi05:
            conds = [F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(e)))) for e in temb_cols]
            return action_emb, torch.stack(conds, dim=1) if per_token else conds[0]
        temb = torch.stack(temb_cols, dim=1) if per_token else temb_cols[0]
        if state is None:
            raise ValueError("pi0 needs `state` (B, max_state_dim) for its state token")
        state_emb = self.state_proj(state.to(self.dtype))
        token_time = temb if per_token else temb[:, None, :].expand_as(action_emb)
        joint = torch.cat((action_emb, token_time), dim=2)
        action_time = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(joint)))
        return torch.cat((state_emb[:, None, :], action_time), dim=1), None

    def expert_forward(self, cache: PrefixCache, tokens: Tensor, cond: Tensor | None) -> Tensor:
        """Expert stack over the suffix tokens, reading the prefix cache; returns the final-norm output."""
        cfg = self.cfg
        cos, sin = rope_cos_sin(
            cache.suffix_positions, cfg.expert.head_dim, cfg.expert.rope_base, tokens.dtype
        )
        x = tokens
        for i, layer in enumerate(self.expert.layers):
            x, _, _ = layer(x, cos, sin, cache.suffix_mask, cond, cache.k[i], cache.v[i])
        out, _ = self.expert.norm(x, cond)  # the final norm's gate is unused
        return out  # type: ignore[no-any-return]

    def denoise_step(self, cache: PrefixCache, x_t: Tensor, t: Tensor, state: Tensor | None = None) -> Tensor:
        """Velocity v(x_t, t) (B, chunk, max_action_dim), in float32."""
        tokens, cond = self.embed_suffix(x_t, t, state)
        out = self.expert_forward(cache, tokens, cond)[:, -self.cfg.chunk_size :]
        return self.action_out_proj(out).float()


def init_weights(model: PiModel, generator: torch.Generator | None = None, std_scale: float = 1.0) -> PiModel:
    """Seeded random weights for benchmarks and untrained tests: matrices N(0, 1/fan_in), norms/biases 0.

    Unlike LeRobot's default, adaRMS `dense` layers get random (not zero) weights so that the time really
    conditions the expert in tests.
    """
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                # Embedding rows are scaled like a width-wide input so that sqrt(width) * row is O(1).
                fan_in = (
                    p.shape[1]
                    if name.endswith("embedding.weight") or "embed_tokens" in name
                    else p[0].numel()
                )
                # Drawn in place in the parameter's dtype: no temporary, no fp32 copy of a bf16 matrix.
                p.normal_(0.0, std_scale / fan_in**0.5, generator=generator)
            elif ("layer_norm" in name or "post_layernorm" in name) and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()
    return model
