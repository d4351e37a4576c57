"""Tables the pi sub-engines take as float32 inputs instead of computing inside a graph.

Two kinds, both computed here in plain PyTorch, outside any compiled graph (PERFORMANCE-NOTES: bf16
sine/cosine inside a compiled graph is silently wrong):

- per denoising step, known at build time (`time_table`): pi0.5's adaRMS modulations of every expert
  norm, or pi0's sine-cosine time embedding. Step k uses row k; the loop engine reads the whole table.
- per observation (`observation_tables`): the prefix's additive mask and RoPE tables, the suffix's mask
  and RoPE tables. They depend only on the validity masks, so they are computed once per call.

Values are those the model computes on line (same operations, same dtype rounding), stored as float32;
an engine casts them to its own dtype, which reproduces the model's rounding exactly.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.families.pi.blocks import MOD_GATE, MOD_SCALE, MOD_SHIFT
from hotloop.models.configs import PiConfig
from hotloop.models.gemma import AdaRMSNorm, GemmaLayer, rope_cos_sin
from hotloop.models.pi0 import PiModel, additive_mask, prefix_masks, sincos_time_embedding, suffix_masks


def step_times(num_steps: int) -> list[float]:
    """t of each Euler step, float32(1 + k * (-1/N)) computed in float64 first, as `sample_actions` does."""
    return [float(torch.tensor(1.0 + k * (-1.0 / num_steps), dtype=torch.float32)) for k in range(num_steps)]


def time_embedding(model: PiModel, t: float, batch: int = 1) -> Tensor:
    """(batch, expert width): the sine-cosine embedding of t, rounded to the model dtype, as on line."""
    cfg = model.cfg
    times = torch.full((batch,), t, dtype=torch.float32, device=model.action_in_proj.weight.device)
    return sincos_time_embedding(times, cfg.expert.width, cfg.min_period, cfg.max_period).to(model.dtype)


def norm_modulations(norm: AdaRMSNorm, cond: Tensor) -> Tensor:
    """(R, 3, width) = (1 + scale, shift, gate) of one adaRMS norm for conditions (R, cond width), float32."""
    scale, shift, gate = norm.dense(cond).chunk(3, dim=-1)
    rows = [None, None, None]
    rows[MOD_SCALE] = 1.0 + scale.float()
    rows[MOD_SHIFT] = shift.float()
    rows[MOD_GATE] = gate.float()
    return torch.stack(cast(list[Tensor], rows), dim=1)


def step_conditioning(model: PiModel, t: float, batch: int = 1) -> Tensor:
    """One step's row of `time_table`, computed with `batch` identical rows as the model does on line.

    The batch matters for bit-exactness: a matmul's rounding can depend on its row count, so the table is
    computed at the engine's batch and row 0 kept (the rows are identical inputs).
    """
    temb = time_embedding(model, t, batch)
    if not model.cfg.pi05:
        return temb[0].float()
    cond = F.silu(model.time_mlp_out(F.silu(model.time_mlp_in(temb))))
    norms: list[AdaRMSNorm] = []
    for layer in cast(list[GemmaLayer], list(model.expert.layers)):
        norms += [cast(AdaRMSNorm, layer.input_layernorm), cast(AdaRMSNorm, layer.post_attention_layernorm)]
    norms.append(cast(AdaRMSNorm, model.expert.norm))
    return torch.stack([norm_modulations(n, cond)[0] for n in norms], dim=0)


@torch.no_grad()
def time_table(model: PiModel, num_steps: int, batch: int = 1) -> Tensor:
    """The per-step table a denoise engine of `model` reads, float32.

    pi0.5: (N, 2 * depth + 1, 3, expert width): for layer i rows 2i (input norm) and 2i + 1 (post-attention
    norm), then the final norm; each (1 + scale, shift, gate). pi0: (N, expert width), the time embedding.
    """
    return torch.stack([step_conditioning(model, t, batch) for t in step_times(num_steps)])


def observation_tables(
    cfg: PiConfig, image_masks: Tensor, lang_masks: Tensor, tokens_per_view: int | None = None
) -> dict[str, Tensor]:
    """Masks and RoPE tables of one observation, float32, keyed by the engines' input names.

    image_masks (B, V) bool; lang_masks (B, L) bool with L the engine's prompt slots. Returns
    prefix_mask (B, 1, P, P), prefix_cos/prefix_sin (B, P, vlm head_dim), suffix_mask (B, 1, S, P + S),
    suffix_cos/suffix_sin (B, S, expert head_dim), with P = V * tokens_per_view + L.
    """
    tpv = tokens_per_view if tokens_per_view is not None else cfg.vision.tokens_per_view
    pad, allowed, positions = prefix_masks(image_masks.bool(), lang_masks.bool(), tpv)
    prefix_cos, prefix_sin = rope_cos_sin(positions, cfg.vlm.head_dim, cfg.vlm.rope_base, torch.float32)
    s_allowed, s_positions = suffix_masks(cfg, pad)
    suffix_cos, suffix_sin = rope_cos_sin(
        s_positions, cfg.expert.head_dim, cfg.expert.rope_base, torch.float32
    )
    return {
        "prefix_mask": additive_mask(allowed, torch.float32),
        "prefix_cos": prefix_cos,
        "prefix_sin": prefix_sin,
        "suffix_mask": additive_mask(s_allowed, torch.float32),
        "suffix_cos": suffix_cos,
        "suffix_sin": suffix_sin,
    }
