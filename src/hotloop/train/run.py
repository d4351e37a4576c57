"""One demo training run and the folder it writes, the same for every family.

`TrainingRun.start` makes the output folder and sets torch for repeatable CPU training (the run's seed,
its thread count, deterministic kernels); the run then keeps the clock of its phases (the data, then the
optimisation `train` runs) for the summary's "training" block. Every run folder holds, beside what the
family's checkpoint writer puts there:

    dataset/     the episodes recorded for the run (none when --dataset named one)
    loss.json    each loss term per step, rounded to 5 digits
    loss.png     the curve of the term that says most
    <summary>    train.json, demo.json or detector.json: the options, the data, the timings

`ship` copies a finished run's files into the package assets, the folder a shipped demo loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.io import atomic_write_json
from hotloop.train.options import CameraDemoOptions, RecordedDemoOptions, TrainOptions, summary_config

Folder = str | Path  # an output or dataset folder as a trainer takes it
Json = Mapping[str, Any]


@dataclass
class TrainingRun:
    """One training run: its output folder, its options, and when its phases ended."""

    out: Path
    options: TrainOptions
    progress: bool
    started: float
    data_ready: float | None = None
    trained: float | None = None

    @classmethod
    def start(cls, out_dir: Folder, options: TrainOptions, progress: bool = True) -> TrainingRun:
        """Make the folder and set torch's process-wide seed, thread count and deterministic kernels (what
        ACT's dropout draws from, and what makes two runs of one config the same bits)."""
        import torch

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(options.seed)
        torch.set_num_threads(options.threads)
        torch.use_deterministic_algorithms(True)
        return cls(out, options, progress, time.perf_counter())

    def dataset(
        self, dataset_dir: Folder | None, options: RecordedDemoOptions
    ) -> tuple[Any, dict[str, Any] | None]:
        """(the dataset, the recording summary or None): `hotloop.train.data.prepare_dataset` with the
        options' recording settings; the data phase ends here."""
        from hotloop.train.data import prepare_dataset

        dataset, recorded = prepare_dataset(dataset_dir, self.out, options.record_options())
        self.data_done()
        return dataset, recorded

    def data_done(self) -> None:
        self.data_ready = time.perf_counter()

    def train(
        self, params: list[Any], step_loss: Callable[[int], Mapping[str, Any]], desc: str
    ) -> dict[str, list[float]]:
        """`hotloop.train.loop.run_training` on the options' schedule; the training phase ends here."""
        from hotloop.train.loop import run_training

        history = run_training(params, step_loss, self.options.schedule(), desc, self.progress)
        self.trained = time.perf_counter()
        return history

    def training_summary(self, data: Json, finals: Json, data_phase: str = "record") -> dict[str, Any]:
        """The summary's "training" block: what was trained on (`data`), the phases' seconds, the final
        losses (`finals`), and the torch version and thread count the weights came from."""
        import torch

        ready = self.data_ready if self.data_ready is not None else self.started
        trained = self.trained if self.trained is not None else ready
        return {
            **data,
            f"{data_phase}_s": round(ready - self.started, 1),
            "train_s": round(trained - ready, 1),
            "total_s": round(time.perf_counter() - self.started, 1),
            **finals,
            "torch": torch.__version__,
            "threads": self.options.threads,
        }

    def write_summary(
        self, name: str, cfg: CameraDemoOptions, dataset: Any, model: Any, training: Json, /, **own: Any
    ) -> dict[str, Any]:
        """The summary file `name` (train.json, demo.json): what the family says of itself (`own`), the task
        the episodes were recorded on, the difficulty, the model's size, the views, the options and the
        "training" block (`training_summary`); returned as written. (`own` may name its own "model".)"""
        from hotloop.train.data import dataset_task

        summary = {
            **own,
            "task": dataset_task(dataset, cfg.task),
            "difficulty": cfg.difficulty,
            "parameters": sum(p.numel() for p in model.parameters()),
            "views": list(cfg.views),
            "config": summary_config(cfg),
            "training": dict(training),
        }
        atomic_write_json(self.out / name, summary)
        return summary

    def write_losses(
        self, curves: Mapping[str, Sequence[float]] | Sequence[float], plotted: Sequence[float], title: str
    ) -> None:
        """loss.json (`curves`: each term's values by name, or one term's) and loss.png (`plotted`)."""
        if isinstance(curves, Mapping):
            atomic_write_json(self.out / "loss.json", {k: _rounded(v) for k, v in curves.items()})
        else:
            atomic_write_json(self.out / "loss.json", _rounded(curves))
        plot_loss(list(plotted), self.out / "loss.png", title=title)


def _rounded(values: Sequence[float]) -> list[float]:
    return [round(x, 5) for x in values]


def final(values: Sequence[float], last: int = 100) -> float:
    """A loss term's final value: the mean of its last `last` steps."""
    return float(np.mean(values[-last:]))


def plot_loss(losses: list[float], path: Path, title: str = "demo:conveyor training") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(losses, lw=0.5, alpha=0.4, label="step")
    w = max(1, len(losses) // 50)
    if len(losses) >= w:
        smooth = np.convolve(losses, np.ones(w) / w, mode="valid")
        ax.plot(np.arange(w - 1, len(losses)), smooth, lw=1.5, label=f"mean of {w}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("flow-matching loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def ship(run_dir: Folder, dest: Path, files: Sequence[str], train_command: str) -> Path:
    """Copy `files` of a finished run into `dest` (a shipped demo's asset folder); a run that lacks one is
    refused by name with the command that trains it."""
    import shutil

    src = Path(run_dir)
    missing = [f for f in files if not (src / f).is_file()]
    if missing:
        raise ConfigError(f"{src} lacks {', '.join(missing)}; run `{train_command} -o {src}` first")
    dest.mkdir(parents=True, exist_ok=True)
    for name in files:
        shutil.copyfile(src / name, dest / name)
    return dest
