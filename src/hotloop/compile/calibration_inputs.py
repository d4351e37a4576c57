"""Calibration inputs per sub-engine: each graph's own inputs, recorded while the fp32 engines run the
calibration observations (vision sees images, the prefix the image tokens, the denoise engines the
flow states of every step), so a static quantizer sees the ranges it will meet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from hotloop.families.protocol import SubEngine

MAX_ROWS = 64  # per graph: enough for per-tensor ranges, few enough to keep quantizing quick


def capture_inputs(
    source: Any,
    engines: Mapping[str, SubEngine],
    calib: Any,
    observations: int = 16,
    seed: int = 0,
) -> dict[str, list[tuple[Tensor, ...]]]:
    """{sub-engine name: [input tuple, ...]} from running `engines` (batch 1) on calibration frames.

    `source`: the `hotloop.families.protocol.PolicySource` (family, config, shape); `calib`: a
    `compile.calibration.CalibrationSet` (`len`, `batch(index)`)."""
    family, cfg, shape = source.family, source.cfg, source.shape
    n = min(observations, len(calib))
    idx = torch.linspace(0, len(calib) - 1, n).round().long().tolist()
    captured: dict[str, list[tuple[Tensor, ...]]] = {name: [] for name in engines}
    handles = []

    def hook_for(name: str) -> Any:
        def hook(mod: nn.Module, args: tuple[Any, ...]) -> None:
            captured[name].append(tuple(a.detach().clone() for a in args if isinstance(a, Tensor)))

        return hook

    for name, engine in engines.items():
        handles.append(engine.module.register_forward_pre_hook(hook_for(name)))
    gen = torch.Generator().manual_seed(seed)
    loops = [s.loop for s in family.stages if s.loop is not None]
    try:
        step = family.eager_pipeline(cfg, shape, engines, loop=False)
        loop = family.eager_pipeline(cfg, shape, engines, loop=True) if loops else None
        for i in idx:
            obs = calib.batch([i])
            noise = family.make_noise(cfg, shape, 1, gen)
            step.sample(obs, noise)
            if loop is not None:
                loop.sample(obs, noise)
    finally:
        for h in handles:
            h.remove()
    # A loop engine calls its step engine's module inside itself: keep only the step pipeline's calls
    # (each observation runs N steps through the step pipeline, then N more inside the loop engine).
    for spec in loops:
        steps = captured[spec.step]
        per_obs = shape.num_steps * 2
        captured[spec.step] = [row for j, row in enumerate(steps) if j % per_obs < shape.num_steps]
    return {name: _spread(rows) for name, rows in captured.items()}


def _spread(rows: list[tuple[Tensor, ...]]) -> list[tuple[Tensor, ...]]:
    if len(rows) <= MAX_ROWS:
        return rows
    keep = torch.linspace(0, len(rows) - 1, MAX_ROWS).round().long().tolist()
    return [rows[i] for i in keep]


def plan_options(
    precision: str,
    sub_engine: str,
    variant: str,
    engines: Mapping[str, SubEngine],
    source: Any,
    config: Any,
    cache: dict[int, dict[str, list[tuple[Tensor, ...]]]],
) -> dict[str, Any]:
    """Options a quantized candidate is prepared with: its fp32 layers, and calibration inputs for
    static int8 (captured once per engine set, kept in `cache`)."""
    from hotloop.compile.backends.base import BackendError
    from hotloop.compile.backends.quantize import CALIBRATION, FP32_LAYERS, STATIC

    layers = dict(config.fp32_layers or {})
    options: dict[str, Any] = {}
    if layers:
        if variant != "plain":
            raise BackendError(
                f"the mixed-precision plan names layers of the plain sub-engines; {variant} is not tried"
            )
        # A loop stage's layers are named by its step engine; the loop engine holds that engine as `step`.
        loop = source.family.loop_of(sub_engine)
        key = loop.step if loop is not None else sub_engine
        prefix = "step." if loop is not None and sub_engine == loop.loop else ""
        options[FP32_LAYERS] = [prefix + n for n in layers.get(key, [])]
    if precision in STATIC and config.calibration is not None:
        if id(engines) not in cache:
            cache[id(engines)] = capture_inputs(source, engines, config.calibration)
        options[CALIBRATION] = cache[id(engines)][sub_engine]
    return options
