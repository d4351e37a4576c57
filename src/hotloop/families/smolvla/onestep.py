"""SmolVLA's calls for the `onestep[:K]` student (`hotloop.compress.onestep`, the method itself): the
prefix K/V of vision + VLM + state (frozen), the action expert's velocity, the parameters the denoising
loop runs."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from hotloop.families.smolvla.compression import expert_parameters, prefix_cache
from hotloop.families.smolvla.observation import SmolVLAObservation, select


class SmolVLAFlowStudent:
    def __init__(self, model: Any) -> None:
        cfg = model.cfg
        self.chunk_shape = (int(cfg.chunk_size), int(cfg.max_action_dim))

    def prefix(self, model: Any, obs: SmolVLAObservation) -> Any:
        return prefix_cache(model, obs)

    def velocity(self, model: Any, cache: Any, obs: SmolVLAObservation, x: Tensor, t: Tensor) -> Tensor:
        k, v, pad = cache
        return model.denoise_step(k, v, pad, x, t)  # type: ignore[no-any-return]

    def select(self, obs: SmolVLAObservation, index: list[int]) -> SmolVLAObservation:
        return select(obs, index)

    def concat(self, a: SmolVLAObservation, b: SmolVLAObservation) -> SmolVLAObservation:
        """One batch of both, the prompts padded (masked) to the wider one's slots: recorded frames come
        with the engines' slots, a policy's own observations with its preprocessor's."""
        import dataclasses

        from hotloop.families.smolvla.observation import pad_prompt, stack

        slots = max(a.lang_tokens.shape[1], b.lang_tokens.shape[1])
        a, b = (
            dataclasses.replace(
                o,
                **dict(
                    zip(
                        ("lang_tokens", "lang_masks"),
                        pad_prompt(o.lang_tokens, o.lang_masks, slots),
                        strict=True,
                    )
                ),
            )
            for o in (a, b)
        )
        return stack([a, b])

    def batch_size(self, obs: SmolVLAObservation) -> int:
        return int(obs.batch)

    def denoising_parameters(self, model: Any) -> list[nn.Parameter]:
        return expert_parameters(model)
