"""Calibration inputs per sub-engine: each graph's own inputs, recorded while the fp32 engines run the
calibration observations (vision sees images, the prefix the image tokens, the denoise engines the
flow states of every step), so a static quantizer sees the ranges it will meet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from hotloop.families.pi.engines import PiEngineShape, PiPipeline, SubEngine
from hotloop.compress.calibration import CalibrationSet

MAX_ROWS = 64  # per graph: enough for per-tensor ranges, few enough to keep quantizing quick


def capture_inputs(
    cfg: Any,
    shape: PiEngineShape,
    engines: Mapping[str, SubEngine],
    calib: CalibrationSet,
    observations: int = 16,
    seed: int = 0,
) -> dict[str, list[tuple[Tensor, ...]]]:
    """{sub-engine name: [input tuple, ...]} from running `engines` (batch 1) on calibration frames."""
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
    try:
        step = PiPipeline.eager(cfg, shape, engines, loop=False)
        loop = PiPipeline.eager(cfg, shape, engines, loop=True)
        for i in idx:
            obs = calib.batch([i])
            noise = torch.randn(1, cfg.chunk_size, cfg.max_action_dim, generator=gen)
            step.sample(obs, noise)
            loop.sample(obs, noise)
    finally:
        for h in handles:
            h.remove()
    # The loop engine calls the step engine's module inside itself: keep only the step pipeline's calls.
    steps = captured["denoise_step"]
    per_obs = shape.num_steps * 2
    captured["denoise_step"] = [row for j, row in enumerate(steps) if j % per_obs < shape.num_steps]
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
    from hotloop.compress.quantize import CALIBRATION, FP32_LAYERS, STATIC

    layers = dict(config.fp32_layers or {})
    options: dict[str, Any] = {}
    if layers:
        if variant != "plain":
            raise BackendError(
                f"the mixed-precision plan names layers of the plain sub-engines; {variant} is not tried"
            )
        key = "denoise_step" if sub_engine.startswith("denoise") else sub_engine
        prefix = "step." if sub_engine == "denoise_loop" else ""
        options[FP32_LAYERS] = [prefix + n for n in layers.get(key, [])]
    if precision in STATIC and config.calibration is not None:
        if id(engines) not in cache:
            cache[id(engines)] = capture_inputs(source.cfg, source.shape, engines, config.calibration)
        options[CALIBRATION] = cache[id(engines)][sub_engine]
    return options
