"""Artifacts as bench / eval targets: `hotloop bench ART`, `hotloop eval ART` (a folder with manifest.json)."""

from __future__ import annotations

from typing import Any

from hotloop.targets import BenchCase, TargetOptions


def _engine(path: str, options: TargetOptions) -> Any:
    from hotloop.runtime.engine import Engine

    # Shapes were fixed at compile time: an option that would change them is refused, not ignored.
    options.reject_unsupported(path, set())
    return Engine.load(path)


def build_bench(path: str, options: TargetOptions) -> BenchCase:
    import torch

    engine = _engine(path, options)
    obs = engine.example_observation()
    if engine.kind == "onnx":
        return BenchCase(name=path, run=lambda timer: engine.infer(obs), info=engine.describe())
    cfg = engine.cfg
    noise = torch.randn(
        engine.shape.batch,
        cfg.chunk_size,
        cfg.max_action_dim,
        generator=torch.Generator().manual_seed(options.seed),
    )
    info = {**engine.describe(), "num_steps": engine.shape.num_steps, "views": engine.shape.views}
    return BenchCase(name=path, run=lambda timer: engine.sample(obs, noise, timer=timer), info=info)


def build_policy(path: str, options: TargetOptions) -> Any:
    from hotloop.runtime.policy import engine_policy

    return engine_policy(_engine(path, TargetOptions(seed=options.seed)), seed=options.seed)
