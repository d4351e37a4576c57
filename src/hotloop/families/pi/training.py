"""What training a pi demo policy from scratch needs of pi (`hotloop.train` runs the loop): a fresh model
with seeded weights, batches as observations, and the prefix cache repeated for several noise draws."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from hotloop.families.pi.sampling import PiObservation
from hotloop.models.configs import PiConfig
from hotloop.models.pi0 import PiModel, PrefixCache, init_weights


def new_model(cfg: PiConfig, generator: torch.Generator, ordinal_bins: bool) -> PiModel:
    """A model of `cfg` with seeded random weights (`init_weights`), its state-bin rows on a smooth curve
    when `ordinal_bins` (`ordinal_bin_embeddings`)."""
    model = PiModel(cfg)
    init_weights(model, generator)
    if ordinal_bins:
        ordinal_bin_embeddings(model, 256, generator)
    return model


def observation(
    images: Tensor, image_masks: Tensor, lang_tokens: Tensor, lang_masks: Tensor, state: Tensor | None = None
) -> PiObservation:
    return PiObservation(
        images=images, image_masks=image_masks, lang_tokens=lang_tokens, lang_masks=lang_masks, state=state
    )


def ordinal_bin_embeddings(model: Any, num_bins: int, generator: Any) -> None:
    """Start the state-bin token rows on a smooth curve: bin b and b+1 begin with nearly the same
    embedding, so what the model learns about one bin carries over to its neighbours.

    pi0.5 carries the state as 256 bin tokens, each with its own embedding row. Published pi0.5 gets
    ordinal structure from a pretrained tokenizer (the bins are written as digits); trained from scratch
    on a few thousand frames, independent random rows leave most bins barely trained and the policy
    imprecise. Only the initial values change; the rows are trained like every other weight.
    """
    weight = model.embed_tokens.weight
    width = weight.shape[1]
    base = weight.shape[0] - num_bins
    values = (torch.arange(num_bins, dtype=torch.float64) + 0.5) / num_bins * 2.0 - 1.0  # bin centres
    freqs = torch.arange(1, 17, dtype=torch.float64) * (math.pi / 2)
    feats = torch.cat(
        [values[:, None], torch.sin(values[:, None] * freqs), torch.cos(values[:, None] * freqs)], 1
    )
    proj = torch.randn(feats.shape[1], width, generator=generator, dtype=torch.float64)
    rows = feats @ proj
    with torch.no_grad():
        target_norm = weight[:base].norm(dim=1).mean()
        rows = rows / rows.norm(dim=1, keepdim=True) * target_norm
        weight[base:] = rows.to(weight.dtype)


def repeat_cache(cache: PrefixCache, times: int) -> PrefixCache:
    """A PrefixCache whose batch is each sample repeated `times` times (sample-major), autograd intact."""
    return PrefixCache(
        k=cache.k.repeat_interleave(times, dim=1),
        v=cache.v.repeat_interleave(times, dim=1),
        pad_mask=cache.pad_mask.repeat_interleave(times, dim=0),
        num_valid=cache.num_valid.repeat_interleave(times, dim=0),
        suffix_mask=cache.suffix_mask.repeat_interleave(times, dim=0),
        suffix_positions=cache.suffix_positions.repeat_interleave(times, dim=0),
    )
