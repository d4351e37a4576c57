"""Calibration inputs per sub-engine: each graph's own inputs, recorded while the fp32 engines run the
calibration observations (vision sees images, the prefix the image tokens, the denoise engines the
flow states of every step), so a static quantizer sees the ranges it will meet."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from hotloop.families.protocol import SubEngine

MAX_ROWS = 64  # per graph: enough for per-tensor ranges, few enough to keep quantizing quick
CAPTURE_OBSERVATIONS = 16  # calibration observations the capture runs


def capture_inputs(
    source: Any,
    engines: Mapping[str, SubEngine],
    calib: Any,
    observations: int = CAPTURE_OBSERVATIONS,
    seed: int = 0,
) -> dict[str, list[tuple[Tensor, ...]]]:
    """{sub-engine name: [input tuple, ...]} from running `engines` (batch 1) on calibration frames.

    `source`: the `hotloop.families.protocol.PolicySource` (family, config, shape); `calib`: a
    `compile.calibration.CalibrationSet` (`len`, `batch(index)`).

    Each observation runs the step pipeline (every sub-engine but the loop engines, the step engine once
    per step) and then the loop pipeline, of which only the loop engines' calls are kept: the stages
    before the loop see the same observation there, so they are not run again but give back their
    step-pipeline outputs (at pi05:full the prefix is most of an inference), and a loop engine that calls
    its step engine's module (Diffusion Policy's) would add a second set of step rows. An input a
    sub-engine is given again with the same values (the prefix's keys and values, at every denoising
    step) is stored once."""
    family, cfg, shape = source.family, source.cfg, source.shape
    n = min(observations, len(calib))
    idx = torch.linspace(0, len(calib) - 1, n).round().long().tolist()
    captured: dict[str, list[tuple[Tensor, ...]]] = {name: [] for name in engines}
    loops = [s.loop for s in family.stages if s.loop is not None]
    loop_engines = {spec.loop for spec in loops}
    before_loop = [n for n in engines if n not in loop_engines and n not in {s.step for s in loops}]
    step = family.eager_pipeline(cfg, shape, engines, loop=False)
    loop = family.eager_pipeline(cfg, shape, engines, loop=True) if loops else None
    phase = ["step"]
    kept = _Clones()
    outputs: dict[str, Any] = {}  # the step pipeline's outputs of the stages before the loop
    handles = []

    def pre_hook(name: str) -> Any:
        def hook(mod: nn.Module, args: tuple[Any, ...]) -> None:
            if (phase[0] == "loop") == (name in loop_engines):
                captured[name].append(tuple(kept.of(a) for a in args if isinstance(a, Tensor)))

        return hook

    def keep_output(name: str) -> Any:
        def hook(mod: nn.Module, args: tuple[Any, ...], out: Any) -> None:
            if phase[0] == "step":
                outputs[name] = out

        return hook

    for name, engine in engines.items():
        handles.append(engine.module.register_forward_pre_hook(pre_hook(name)))
        if name in before_loop:
            handles.append(engine.module.register_forward_hook(keep_output(name)))
    gen = torch.Generator().manual_seed(seed)
    try:
        for i in idx:
            obs = calib.batch([i])
            noise = family.make_noise(cfg, shape, 1, gen)
            phase[0] = "step"
            step.sample(obs, noise)
            if loop is not None:
                phase[0] = "loop"
                with _replaying(engines, before_loop, outputs):
                    loop.sample(obs, noise)
    finally:
        for h in handles:
            h.remove()
    return {name: _spread(rows) for name, rows in captured.items()}


@contextlib.contextmanager
def _replaying(engines: Mapping[str, SubEngine], names: list[str], outputs: dict[str, Any]) -> Iterator[None]:
    """Within the block, the modules of `names` return their recorded `outputs` instead of computing."""
    for name in names:
        engines[name].module.forward = (lambda out: lambda *a, **k: out)(outputs[name])
    try:
        yield
    finally:
        for name in names:
            del engines[name].module.forward


class _Clones:
    """Clones of captured inputs, one per distinct value: a tensor passed again unwritten and alive (same
    storage, view and version), or rewritten with the same values (a runner's input buffer refilled
    from the same producer), gets the clone it got before."""

    def __init__(self) -> None:
        self._seen: dict[tuple[Any, ...], tuple[weakref.ref[Tensor], int, Tensor]] = {}

    def of(self, t: Tensor) -> Tensor:
        where: tuple[Any, ...] = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        where += (t.stride(), t.dtype)
        hit = self._seen.get(where)
        if hit is not None and hit[0]() is not None:  # alive: its storage cannot have been reused
            ref, version, clone = hit
            if version == t._version or torch.equal(clone, t):
                self._seen[where] = (ref, t._version, clone)
                return clone
        clone = t.detach().clone()
        self._seen[where] = (weakref.ref(t), t._version, clone)
        return clone


def captured_bytes(captured: Mapping[str, list[tuple[Tensor, ...]]]) -> int:
    """Bytes the capture holds (a tensor shared by several rows counted once)."""
    seen: dict[int, int] = {}
    for rows in captured.values():
        for row in rows:
            for t in row:
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def capture_bound(engines: Mapping[str, SubEngine], source: Any, calib: Any) -> int:
    """An upper bound of `capture_inputs`' bytes before it runs: every kept row holding a copy of all of
    its sub-engine's inputs (rows that share an unchanged tensor hold it once, so the capture is below)."""
    n = min(CAPTURE_OBSERVATIONS, len(calib))
    loops = {s.loop.step: source.shape.num_steps for s in source.family.stages if s.loop is not None}
    total = 0
    for name, engine in engines.items():
        rows = min(n * loops.get(name, 1), MAX_ROWS)
        total += rows * sum(x.numel() * x.element_size() for x in engine.example_inputs)
    return total


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
