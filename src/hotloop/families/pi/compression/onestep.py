"""pi's calls for the `onestep[:K]` student (`hotloop.compress.onestep`, the method itself): the prefix
cache of vision + VLM (frozen), the action expert's velocity, and the parameters the denoising loop runs."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from hotloop.families.pi.compression.step_distill import expert_parameters
from hotloop.families.pi.sampling import PiObservation
from hotloop.models.pi0 import PrefixCache

# The batch dimension of each field of a `PrefixCache` (k and v are (depth, B, ...)).
BATCH_DIM = {"k": 1, "v": 1, "pad_mask": 0, "num_valid": 0, "suffix_mask": 0, "suffix_positions": 0}


class PiFlowStudent:
    def __init__(self, model: Any) -> None:
        cfg = model.cfg
        self.chunk_shape = (int(cfg.chunk_size), int(cfg.max_action_dim))

    def prefix(self, model: Any, obs: PiObservation) -> Any:
        return model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks)

    def velocity(self, model: Any, cache: Any, obs: PiObservation, x: Tensor, t: Tensor) -> Tensor:
        return model.denoise_step(cache, x, t, obs.state)  # type: ignore[no-any-return]

    def select(self, obs: PiObservation, index: list[int]) -> PiObservation:
        from hotloop.families.pi.batching import select

        return select(obs, index)

    def concat(self, a: Any, b: Any) -> Any:
        from hotloop.families.pi.batching import stack

        return stack([a, b])

    def batch_size(self, obs: PiObservation) -> int:
        return int(obs.batch)

    def stack_prefix(self, caches: list[PrefixCache]) -> PrefixCache:
        """Caches of one config have one prefix length (its fixed shapes): concatenated on the batch."""
        return PrefixCache(
            **{name: torch.cat([getattr(c, name) for c in caches], dim=BATCH_DIM[name]) for name in BATCH_DIM}
        )

    def select_prefix(self, cache: PrefixCache, index: list[int]) -> PrefixCache:
        rows = torch.tensor(index, dtype=torch.long)
        return PrefixCache(
            **{name: getattr(cache, name).index_select(dim, rows) for name, dim in BATCH_DIM.items()}
        )

    def denoising_parameters(self, model: Any) -> list[nn.Parameter]:
        return expert_parameters(model)
