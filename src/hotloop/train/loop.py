"""The one training loop every shipped demo policy is trained with: AdamW with linear warm-up and a
cosine decay (`Schedule`), gradient clipping, a progress bar, and every named term of the step loss kept
per step. A non-finite loss stops training with `TrainingDiverged` (the command exits 1 and writes no
model). What it trains on is `hotloop.train.data`'s; the run folder around it `hotloop.train.run`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.errors import HotloopError


class TrainingDiverged(HotloopError):
    """The loss became NaN or infinite: the run stops and writes no model."""


@dataclass(frozen=True)
class Schedule:
    steps: int
    lr: float
    min_lr: float
    warmup: int
    weight_decay: float
    grad_clip: float

    def lr_at(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * progress))


def run_training(
    params: list[Any],
    step_loss: Callable[[int], Mapping[str, Any]],
    schedule: Schedule,
    desc: str,
    progress: bool = True,
) -> dict[str, list[float]]:
    """Optimise `params` for `schedule.steps` steps; `step_loss(step)` draws its batch and returns its
    terms as tensors, "loss" the one minimised. Returns each term's history (the terms other than "loss"
    when there are any, else "loss")."""
    import torch

    opt = torch.optim.AdamW(params, lr=schedule.lr, weight_decay=schedule.weight_decay)
    history: dict[str, list[float]] = {}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=schedule.steps, desc=desc, unit="step", dynamic_ncols=True)
    try:
        for step in range(schedule.steps):
            terms = step_loss(step)
            loss = terms["loss"]
            if not bool(torch.isfinite(loss.detach())):
                raise TrainingDiverged(
                    f"{desc}: the loss is {float(loss.detach())} at step {step}; training stopped and no "
                    "model was written (lower the learning rate, or check the data)"
                )
            for group in opt.param_groups:
                group["lr"] = schedule.lr_at(step)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, schedule.grad_clip)
            opt.step()
            logged = {k: v for k, v in terms.items() if k != "loss"} or {"loss": loss}
            for name, value in logged.items():
                history.setdefault(name, []).append(value.item())
            if bar is not None:
                bar.update(1)
                if step % 20 == 0:
                    bar.set_postfix({k: f"{np.mean(v[-20:]):.4f}" for k, v in history.items()})
    finally:
        if bar is not None:
            bar.close()
    return history
