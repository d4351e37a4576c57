"""pi observations batched and sliced (calibration sets, distillation batches, the recipe's checks): the
generic helpers of `hotloop.families.batching`, under the names pi's compression steps import."""

from __future__ import annotations

from hotloop.families.batching import select, stack

__all__ = ["select", "stack"]
