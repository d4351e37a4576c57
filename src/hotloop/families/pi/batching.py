"""pi observations batched and sliced (calibration sets, distillation batches, the recipe's checks)."""

from __future__ import annotations

import torch

from hotloop.families.pi.sampling import PiObservation


def stack(observations: list[PiObservation]) -> PiObservation:
    """Batch-1 observations -> one batch."""
    state = [o.state for o in observations]
    return PiObservation(
        images=torch.cat([o.images for o in observations]),
        image_masks=torch.cat([o.image_masks for o in observations]),
        lang_tokens=torch.cat([o.lang_tokens for o in observations]),
        lang_masks=torch.cat([o.lang_masks for o in observations]),
        state=None if any(s is None for s in state) else torch.cat(state),  # type: ignore[arg-type]
    )


def select(obs: PiObservation, index: slice | list[int]) -> PiObservation:
    return PiObservation(
        images=obs.images[index],
        image_masks=obs.image_masks[index],
        lang_tokens=obs.lang_tokens[index],
        lang_masks=obs.lang_masks[index],
        state=None if obs.state is None else obs.state[index],
    )
