"""Tables SmolVLA's sub-engines take as float32 inputs instead of computing them inside a graph.

- per observation (`observation_tables`): which prefix token may attend to which (images + prompt one
  bidirectional block, the state token its own), the prefix's RoPE angles (positions skip padding), the
  denoise step's mask ([valid prefix; causal chunk]) and its RoPE angles (after the valid prefix). They
  depend only on the validity masks, so they are computed once per call, with the model's own functions
  (`make_att_2d_masks`, `rope_tables`), in float32: bf16 sine / cosine inside a compiled graph is wrong.
- per denoising step, known at build time (`time_rows`): the sine-cosine time embedding (LeRobot's
  float64, cast to float32), one row per chunk token so that RTC's per-token times fit the same input.

Masks travel as float32 0 / 1 (every backend takes floats); the engines turn them back into booleans for
LeRobot's `torch.where(mask, scores, finfo.min)`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.models.pi0 import make_att_2d_masks
from hotloop.models.smolvla import sincos_time
from hotloop.models.smolvla_config import SmolVLAConfig
from hotloop.models.smolvlm import rope_tables

OBSERVATION_TABLES = ("prefix_mask", "prefix_cos", "prefix_sin", "suffix_mask", "suffix_cos", "suffix_sin")


def prefix_validity(cfg: SmolVLAConfig, image_masks: Tensor, lang_masks: Tensor) -> tuple[Tensor, Tensor]:
    """(validity (B, P) bool, block starts (B, P) bool) as LeRobot's embed_prefix lays the prefix out: per
    view its special tokens (always valid) around its image tokens (the view's mask), the prompt, the state
    token (valid, starting its own block), then zero padding up to `prefix_length`."""
    b, device = image_masks.shape[0], image_masks.device
    t = cfg.image_tokens_per_view
    ones = torch.ones(b, 1, dtype=torch.bool, device=device)
    parts: list[Tensor] = []
    for view in range(image_masks.shape[1]):
        if cfg.image_start_ids:
            parts.append(ones.expand(b, len(cfg.image_start_ids)))
        parts.append(image_masks[:, view : view + 1].bool().expand(b, t))
        if cfg.image_end_ids:
            parts.append(ones.expand(b, len(cfg.image_end_ids)))
    parts += [lang_masks.bool(), ones]
    pad = torch.cat(parts, dim=1)
    att = torch.zeros_like(pad)
    att[:, -1] = True
    if pad.shape[1] < cfg.prefix_length:
        extra = cfg.prefix_length - pad.shape[1]
        pad, att = F.pad(pad, (0, extra)), F.pad(att, (0, extra))
    return pad, att


def observation_tables(cfg: SmolVLAConfig, image_masks: Tensor, lang_masks: Tensor) -> dict[str, Tensor]:
    """Every per-observation table, float32: prefix_mask (B, P, P), prefix_cos / prefix_sin (B, P, 1, D/2),
    suffix_mask (B, S, P + S), suffix_cos / suffix_sin (B, S, 1, D/2)."""
    pad, att = prefix_validity(cfg, image_masks, lang_masks)
    b, p, s = pad.shape[0], pad.shape[1], cfg.chunk_size
    head_dim = cfg.vlm.text.head_dim
    allowed = make_att_2d_masks(pad, att)
    prefix_cos, prefix_sin = rope_tables(torch.cumsum(pad.to(torch.int64), dim=1) - 1, head_dim)
    causal = torch.ones(s, s, dtype=torch.bool, device=pad.device).tril()[None].expand(b, s, s)
    full = torch.cat((pad[:, None, :].expand(b, s, p), causal), dim=2)
    positions = pad.sum(dim=-1)[:, None] + torch.arange(s, device=pad.device)[None]
    suffix_cos, suffix_sin = rope_tables(positions, cfg.expert.head_dim)
    return {
        "prefix_mask": allowed.float(),
        "prefix_cos": prefix_cos,
        "prefix_sin": prefix_sin,
        "suffix_mask": full.float(),
        "suffix_cos": suffix_cos,
        "suffix_sin": suffix_sin,
    }


def step_time(k: int, num_steps: int) -> float:
    """t of Euler step k as LeRobot computes it: the Python float 1 + k * (-1/N)."""
    return 1.0 + k * (-1.0 / num_steps)


def time_embedding(cfg: SmolVLAConfig, t: Tensor) -> Tensor:
    """float32 times (B,) or per token (B, chunk) -> (B, chunk, expert width): LeRobot's sine-cosine
    embedding (float64) rounded to float32, broadcast over the chunk for one time per row."""
    emb = sincos_time(t.to(torch.float32), cfg.expert.width, cfg.min_period, cfg.max_period).to(torch.float32)
    if t.ndim == 1:
        emb = emb[:, None, :].expand(t.shape[0], cfg.chunk_size, -1)
    return emb.contiguous()


def time_rows(cfg: SmolVLAConfig, num_steps: int, batch: int, device: torch.device | str = "cpu") -> Tensor:
    """(N, B, chunk, expert width) float32: row k is the embedding of step k's time, as on line."""
    rows = []
    for k in range(num_steps):
        t = torch.tensor(step_time(k, num_steps), dtype=torch.float32, device=device).expand(batch)
        rows.append(time_embedding(cfg, t))
    return torch.stack(rows)
