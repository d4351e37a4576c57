"""Dump a reference run of YOUR LeRobot checkpoint, for `hotloop verify CKPT --reference OUT` (docs/verify.md).

Run it in the Python environment where LeRobot runs your policy (not hotloop's: hotloop does not depend on
LeRobot). It loads the checkpoint the way LeRobot does (`<Policy>.from_pretrained` and the saved pre/post
processors), builds one raw observation (seeded, inside the normaliser's statistics; or a frame of a
LeRobot dataset), runs LeRobot's own `predict_action_chunk` once, and writes:

    raw_inputs.npz      the robot-side batch (LeRobot keys; `task` as text for VLAs)
    inputs.npz          the preprocessor's output (what predict_action_chunk receives)
    noise.npy           the starting noise passed to predict_action_chunk (diffusion, flow matching)
    step_noise.npy      DDPM's per-step variance noise as drawn (row k after timestep k; last row zeros)
    actions.npy         predict_action_chunk's output (model space)
    raw_actions.npy     actions.npy through the postprocessor (robot units)
    reference.json      what was run: lerobot version, policy type, seeds, torch version

    python benchmarks/lerobot_reference_run.py .../checkpoints/last/pretrained_model --out ref/ [--seed 0]
        [--task "pick the box"] [--dataset ROOT_OR_REPO --episode 0 --frame 10] [--batch 1]

then, in hotloop's environment:

    hotloop verify .../pretrained_model --reference ref/
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch


def _processors(folder: Path) -> tuple[Any, Any]:
    from lerobot.processor import PolicyProcessorPipeline
    from lerobot.processor.converters import (
        batch_to_transition,
        policy_action_to_transition,
        transition_to_batch,
        transition_to_policy_action,
    )

    pre = PolicyProcessorPipeline.from_pretrained(
        pretrained_model_name_or_path=folder,
        config_filename="policy_preprocessor.json",
        overrides={},
        to_transition=batch_to_transition,
        to_output=transition_to_batch,
    )
    post = PolicyProcessorPipeline.from_pretrained(
        pretrained_model_name_or_path=folder,
        config_filename="policy_postprocessor.json",
        overrides={},
        to_transition=policy_action_to_transition,
        to_output=transition_to_policy_action,
    )
    return pre, post


class DDPMNoise:
    """Records every per-step draw diffusers' DDPM scheduler makes (its variance noise)."""

    def __enter__(self) -> DDPMNoise:
        from diffusers.schedulers import scheduling_ddpm

        self.mod = scheduling_ddpm
        self.original = scheduling_ddpm.randn_tensor
        self.drawn: list[torch.Tensor] = []

        def randn(*args: Any, **kwargs: Any) -> torch.Tensor:
            t = self.original(*args, **kwargs)
            self.drawn.append(t.clone())
            return t

        scheduling_ddpm.randn_tensor = randn
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mod.randn_tensor = self.original

    def table(self, steps: int) -> np.ndarray:
        rows = [t.numpy() for t in self.drawn] + [np.zeros_like(self.drawn[0].numpy())]
        if len(rows) != steps:
            raise SystemExit(f"recorded {len(rows)} DDPM draws for {steps} timesteps: unexpected scheduler")
        return np.stack(rows)


def _stats(pre: Any) -> dict[str, dict[str, torch.Tensor]]:
    for step in pre.steps:
        stats = getattr(step, "_tensor_stats", None) or getattr(step, "stats", None)
        if stats:
            return {k: {n: torch.as_tensor(v) for n, v in s.items()} for k, s in stats.items()}
    return {}


def _random_raw(
    cfg: Any, pre: Any, gen: torch.Generator, batch: int, task: str | None
) -> dict[str, np.ndarray]:
    """One raw batch: images U[0, 1], state and env state around the normaliser's statistics."""
    stats = _stats(pre)
    history = (cfg.n_obs_steps,) if getattr(cfg, "type", "") == "diffusion" and cfg.n_obs_steps > 1 else ()
    raw: dict[str, np.ndarray] = {}
    for key, feature in cfg.input_features.items():
        shape = (batch, *history, *feature.shape)
        kind = str(feature.type).split(".")[-1]
        if kind == "VISUAL":
            raw[key] = torch.rand(shape, generator=gen).numpy()
            continue
        s = stats.get(key, {})
        if "mean" in s and "std" in s:
            raw[key] = (s["mean"] + s["std"] * torch.randn(shape, generator=gen)).float().numpy()
        elif "min" in s and "max" in s:
            u = torch.rand(shape, generator=gen)
            raw[key] = (s["min"] + u * (s["max"] - s["min"])).float().numpy()
        else:
            raw[key] = torch.randn(shape, generator=gen).numpy()
    if task is not None or getattr(cfg, "type", "") in ("smolvla", "pi0", "pi05"):
        raw["task"] = np.array([task or "pick up the object"] * batch)
    return raw


def _dataset_raw(root: str, episode: int, frame: int) -> dict[str, np.ndarray]:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset(root) if not Path(root).exists() else LeRobotDataset(Path(root).name, root=root)
    index = int(ds.episode_data_index["from"][episode]) + frame
    item = ds[index]
    raw: dict[str, np.ndarray] = {}
    for key, value in item.items():
        if key.startswith("observation.") and isinstance(value, torch.Tensor):
            raw[key] = value[None].numpy()
    if "task" in item:
        raw["task"] = np.array([item["task"]])
    return raw


def _noise(cfg: Any, batch: int, gen: torch.Generator) -> torch.Tensor | None:
    kind = getattr(cfg, "type", "")
    if kind == "diffusion":
        action_dim = cfg.output_features["action"].shape[0]
        return torch.randn((batch, cfg.horizon, action_dim), generator=gen)
    if kind in ("pi0", "pi05", "smolvla"):
        return torch.randn((batch, cfg.chunk_size, cfg.max_action_dim), generator=gen)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--task", default=None, help="the prompt of a VLA policy")
    ap.add_argument(
        "--dataset", default=None, help="a LeRobot dataset (root folder or repo id) to take a frame from"
    )
    ap.add_argument("--episode", type=int, default=0)
    ap.add_argument("--frame", type=int, default=0)
    args = ap.parse_args()

    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class

    cfg = PreTrainedConfig.from_pretrained(args.checkpoint)
    policy = get_policy_class(cfg.type).from_pretrained(args.checkpoint, strict=True)
    policy.eval()
    pre, post = _processors(args.checkpoint)
    gen = torch.Generator().manual_seed(args.seed)
    if args.dataset is not None:
        raw = _dataset_raw(args.dataset, args.episode, args.frame)
    else:
        raw = _random_raw(cfg, pre, gen, args.batch, args.task)
    batch = {
        k: (torch.from_numpy(v.copy()) if v.dtype.kind not in "US" else [str(s) for s in v])
        for k, v in raw.items()
    }
    model_batch = pre(batch)
    noise = _noise(cfg, len(next(iter(raw.values()))), gen)
    policy.reset()
    step_noise = None
    with torch.no_grad():
        if cfg.type == "act":
            actions = policy.predict_action_chunk(dict(model_batch))
        elif cfg.type == "diffusion":
            torch.manual_seed(args.seed + 4242)
            with DDPMNoise() as rec:
                actions = policy.predict_action_chunk(dict(model_batch), noise=noise.clone())
            if cfg.noise_scheduler_type == "DDPM":
                step_noise = rec.table(len(policy.diffusion.noise_scheduler.timesteps))
        else:
            actions = policy.predict_action_chunk(dict(model_batch), noise=noise.clone())
    raw_actions = post(actions)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "raw_inputs.npz", **raw)
    np.savez(
        out / "inputs.npz", **{k: v.numpy() for k, v in model_batch.items() if isinstance(v, torch.Tensor)}
    )
    if noise is not None:
        np.save(out / "noise.npy", noise.numpy())
    if step_noise is not None:
        np.save(out / "step_noise.npy", step_noise)
    np.save(out / "actions.npy", actions.numpy())
    np.save(out / "raw_actions.npy", raw_actions.numpy())
    from importlib import metadata

    summary = {
        "checkpoint": str(args.checkpoint.resolve()),
        "type": cfg.type,
        "seed": args.seed,
        "lerobot": metadata.version("lerobot"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "dataset": args.dataset,
    }
    (out / "reference.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"wrote a reference run of {cfg.type} to {out}: now `hotloop verify {args.checkpoint} --reference {out}`"
    )


if __name__ == "__main__":
    main()
