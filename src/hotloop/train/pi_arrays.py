"""The arrays a pi demo policy (demo:conveyor, demo:conveyor-vision) trains on, built the same way for
both: quantile normalisation of the state and the action chunks (`quantile_norm`), the prompt with the
normalised state's bins as tokens (`state_tokens`), and the chunks normalised and zero-padded to the
model's action width (`padded_actions`, with the `action_mask` the loss averages over).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def quantiles(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo = np.quantile(x, 0.01, axis=0).astype(np.float32)
    hi = np.quantile(x, 0.99, axis=0).astype(np.float32)
    return lo, np.maximum(hi, lo + 1e-3)  # a constant column must not divide by zero


def quantile_norm(state: np.ndarray, chunks: np.ndarray) -> Any:
    """The policy's NormStats: 1st / 99th percentiles of the state (N, S) and of the actions of the chunks
    (N, H, A)."""
    from hotloop.families.pi.policy import NormStats, Stats

    s_lo, s_hi = quantiles(state)
    a_lo, a_hi = quantiles(chunks.reshape(-1, chunks.shape[-1]))
    return NormStats(state=Stats(q01=s_lo, q99=s_hi), actions=Stats(q01=a_lo, q99=a_hi), mode="quantiles")


def state_tokens(norm: Any, state: np.ndarray, cfg_model: Any) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, masks) (N, L): the demo prompt followed by the bins of each normalised state (clipped to
    [-1, 1])."""
    from hotloop.demos.conveyor import PROMPT_TOKENS
    from hotloop.models.pi0 import state_prompt_tokens

    nstate = np.clip(norm.normalize(state, "state"), -1.0, 1.0)
    tokens, masks = zip(
        *(state_prompt_tokens(list(PROMPT_TOKENS), s, cfg_model) for s in nstate), strict=True
    )
    return np.stack(tokens), np.stack(masks)


def padded_actions(norm: Any, chunks: np.ndarray, cfg_model: Any) -> np.ndarray:
    """The chunks (N, H, A) normalised, zero-padded to (N, H, max_action_dim)."""
    n, horizon, action_dim = chunks.shape
    nact = np.zeros((n, horizon, cfg_model.max_action_dim), dtype=np.float32)
    nact[..., :action_dim] = norm.normalize(chunks, "actions")
    return nact


def action_mask(cfg_model: Any, action_dim: int) -> Any:
    """1 on the action's own dimensions, 0 on the padding: the flow-matching loss averages over those."""
    import torch

    mask = torch.zeros(cfg_model.max_action_dim)
    mask[:action_dim] = 1.0
    return mask
