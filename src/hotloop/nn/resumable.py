"""The resumable training loop every fine-tune shares (distillation, step distillation): each step draws
its batch, noise and times from a generator seeded by (seed, step), and a checkpoint (student,
optimizer, step, losses) is written atomically every `checkpoint_every` steps and on interruption, so a
resumed run continues exactly where the interrupted one would have gone. A checkpoint of another run
(other model config or settings) is refused, never reused."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from hotloop.errors import CheckpointError, ConfigError

CHECKPOINT = "distill_state.pt"


def check_settings(config: Any, label: str) -> None:
    """ConfigError, naming the training by `label`, for settings `train_resumable` cannot run: steps, batch
    or checkpoint_every below 1, a learning rate not above 0."""
    for name in ("steps", "batch", "checkpoint_every"):
        if getattr(config, name) < 1:
            raise ConfigError(f"{label} {name} must be >= 1 (got {getattr(config, name)})")
    if not config.lr > 0:
        raise ConfigError(f"{label} lr must be > 0 (got {config.lr})")


@dataclass(frozen=True)
class ResumableSettings:
    """The settings `train_resumable` reads and nothing else, checked at construction (`check_settings`);
    `label` names the training in the errors."""

    label: ClassVar[str] = "training"

    steps: int = 200
    batch: int = 8
    lr: float = 3e-4
    seed: int = 0
    checkpoint_every: int = 50

    def __post_init__(self) -> None:
        check_settings(self, self.label)


class WeightAverage:
    """An exponential moving average of the trained parameters (Polyak averaging), updated after every
    optimiser step and saved with the checkpoint: the average of the last ~1 / (1 - decay) steps' weights
    rather than the last step's, which carries the last batches' noise. The decay warms up as
    min(decay, (1 + n) / (10 + n)) over the updates n, so the first updates do not keep the start's weights."""

    def __init__(self, params: list[nn.Parameter], decay: float) -> None:
        if not 0 < decay < 1:
            raise ConfigError(f"the weight average's decay must be in (0, 1) (got {decay})")
        self.params = list(params)
        self.decay = decay
        self.updates = 0
        self.average = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def update(self) -> None:
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for a, p in zip(self.average, self.params, strict=True):
            a.mul_(d).add_(p.detach(), alpha=1 - d)
        self.updates += 1

    @torch.no_grad()
    def swap(self) -> None:
        """Exchange the parameters' values with the average's (twice: back as they were)."""
        for a, p in zip(self.average, self.params, strict=True):
            held = p.detach().clone()
            p.copy_(a)
            a.copy_(held)

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "updates": self.updates, "average": [a.clone() for a in self.average]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = int(state["updates"])
        for a, saved in zip(self.average, state["average"], strict=True):
            a.copy_(saved)


@dataclass
class TrainState:
    step: int = 0
    losses: list[float] = field(default_factory=list)


LossFn = Callable[[torch.Generator], Tensor]


def step_generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train_resumable(
    student: nn.Module,
    loss_fn: LossFn,
    config: Any,
    checkpoint_dir: Path | None,
    kind: str,
    on_step: Callable[[int, float], None] | None = None,
    progress: bool = False,
    params: list[nn.Parameter] | None = None,
    lr_at: Callable[[int], float] | None = None,
    average: WeightAverage | None = None,
) -> TrainState:
    """Adam on `loss_fn(generator)` for `config.steps` steps (`config`: a frozen dataclass with steps, lr,
    seed and checkpoint_every; it is part of the checkpoint's identity), resuming from `checkpoint_dir` if it holds one.
    `params`: the parameters to train (default: all of `student`'s); the others stay frozen. `lr_at`: the
    learning rate's factor at each step (None: `config.lr` throughout); a function of the step alone, so a
    resumed run follows the same schedule. `average`: a weight average of `params` to update after each
    step; it is saved and restored with the checkpoint (the caller decides when to use it)."""
    trained = list(student.parameters()) if params is None else list(params)
    ids = {id(p) for p in trained}
    for p in student.parameters():  # a student copied from a frozen teacher starts frozen too
        p.requires_grad_(id(p) in ids)
    optimizer = torch.optim.Adam(trained, lr=config.lr)
    state = TrainState()
    path = None if checkpoint_dir is None else Path(checkpoint_dir) / CHECKPOINT
    cfg = getattr(student, "cfg", None)  # the model's own config, when it has one (a dataclass)
    model_config = asdict(cfg) if is_dataclass(cfg) and not isinstance(cfg, type) else None
    identity = {"kind": kind, "config": model_config, "train": asdict(config)}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file():
            saved = torch.load(path, weights_only=False)
            if saved.get("identity") != identity:
                raise CheckpointError(
                    f"{path} belongs to another run (different model or settings); pick a new --checkpoint-dir "
                    "or delete it to start over"
                )
            student.load_state_dict(saved["student"])
            optimizer.load_state_dict(saved["optimizer"])
            if average is not None:
                average.load_state_dict(saved["average"])
            state = TrainState(step=saved["step"], losses=list(saved["losses"]))

    def save() -> None:
        if path is not None:
            atomic_save(
                {
                    "identity": identity,
                    "student": student.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "step": state.step,
                    "losses": state.losses,
                    "average": None if average is None else average.state_dict(),
                },
                path,
            )

    student.train()
    bar = None
    if progress:
        from tqdm import tqdm

        # the kind's name only: the rest is the checkpoint's identity (settings), not a label to read
        bar = tqdm(
            total=config.steps, initial=state.step, desc=kind.split(":", 1)[0], unit="step", leave=False
        )
    try:
        while state.step < config.steps:
            if lr_at is not None:
                for group in optimizer.param_groups:
                    group["lr"] = config.lr * lr_at(state.step)
            loss = loss_fn(step_generator(config.seed, state.step))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if average is not None:
                average.update()
            state.step += 1
            state.losses.append(float(loss.detach()))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{float(loss.detach()):.4g}")
            if state.step % config.checkpoint_every == 0 or state.step == config.steps:
                save()
            if on_step is not None:
                on_step(state.step, float(loss.detach()))
    except KeyboardInterrupt:
        save()  # the finished steps are kept; the next run resumes from here
        raise
    finally:
        if bar is not None:
            bar.close()
        student.eval()
    return state
