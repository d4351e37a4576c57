"""pi's calls for the `onestep[:K]` student (`hotloop.compress.onestep`, the method itself): the prefix
cache of vision + VLM (frozen), the action expert's velocity, and the parameters the denoising loop runs."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from hotloop.families.pi.compression.step_distill import expert_parameters
from hotloop.families.pi.sampling import PiObservation


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

    def denoising_parameters(self, model: Any) -> list[nn.Parameter]:
        return expert_parameters(model)
