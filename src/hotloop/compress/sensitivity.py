"""Per-layer sensitivity to quantization and automatic mixed precision, judged on the final actions.

`measure_sensitivity` quantizes one linear layer (or one block) of one sub-engine at a time (simulated,
`fake_quant`), runs the whole pipeline on calibration observations under the same noise and measures
the final actions against the fp32 reference: cosine, per-dimension mean error normalised by the
reference actions' spread, and the gripper-flip rate where the target has a gripper column. Each unit
also gets its measured latency gain (`layer_latency`).

`mixed_precision` starts from every unit quantized and returns units to fp32, cheapest first in gain
per unit of error (a unit that gains nothing costs nothing to keep, and goes back first), checking the
whole plan after each change, until the tolerance holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from hotloop.compile.calibration import CalibrationSet
from hotloop.compile.validate import Tolerance, compare_actions
from hotloop.errors import ConfigError
from hotloop.nn.fake_quant import check_mode, fake_quantized, linear_layers


def step_engines(family: Any) -> tuple[str, ...]:
    """The sub-engines one eager inference runs: each stage's own, a loop stage's step engine."""
    return tuple(s.loop.step if s.loop is not None else s.sub_engines[0] for s in family.stages)


GRANULARITIES = ("layer", "block")


@dataclass(frozen=True)
class SensitivityConfig:
    mode: str = "int8"
    granularity: str = "layer"
    samples: int = 16  # calibration observations the actions are compared on
    seed: int = 0  # noise seed (the same noise for the reference and every variant)
    threads: int = 1  # for the latency measurements

    def __post_init__(self) -> None:
        check_mode(self.mode)
        if self.granularity not in GRANULARITIES:
            raise ConfigError(f"--granularity must be layer or block (got {self.granularity!r})")
        if self.samples < 1:
            raise ConfigError(f"--samples must be >= 1 (got {self.samples})")


@dataclass(frozen=True)
class ActionError:
    """Final actions of a variant against the reference (only the target's real action columns)."""

    cosine: float
    max_abs_normalized: float  # max |error| / std of the reference actions (as `compile.validate`)
    dim_error: tuple[float, ...]  # per action dimension: mean |error| / that dimension's reference std
    gripper_flip_rate: float | None  # fraction of (sample, step) whose gripper sign differs

    @property
    def worst_dim_error(self) -> float:
        return max(self.dim_error) if self.dim_error else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "worst_dim_error": self.worst_dim_error}


def action_error(ref: Tensor, got: Tensor, action_dim: int, gripper_dim: int | None) -> ActionError:
    r, g = ref[..., :action_dim].double(), got[..., :action_dim].double()
    agreement = compare_actions(r, g)
    flat_r, flat_g = r.reshape(-1, action_dim), g.reshape(-1, action_dim)
    std = flat_r.std(dim=0).clamp_min(1e-6) if flat_r.shape[0] > 1 else torch.ones(action_dim)
    dims = ((flat_g - flat_r).abs().mean(dim=0) / std).tolist()
    flips = None
    if gripper_dim is not None and gripper_dim < action_dim:
        # Model-space actions are normalised around the gripper's mid value: its sign is open/closed.
        flips = float(((flat_r[:, gripper_dim] > 0) != (flat_g[:, gripper_dim] > 0)).double().mean())
    return ActionError(agreement.cosine, agreement.max_abs_normalized, tuple(dims), flips)


@dataclass(frozen=True)
class UnitResult:
    """One quantized unit (a layer, or a block's layers) and its effect."""

    key: str  # "sub_engine/name"
    sub_engine: str
    layers: tuple[str, ...]
    error: ActionError
    gain_ms: float | None  # measured latency saved per inference by quantizing it (None: not measured)
    calls: int

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error.to_dict()}


@dataclass
class SensitivityResult:
    target: str
    mode: str
    granularity: str
    units: list[UnitResult]  # ranked, most sensitive first
    all_quantized: ActionError
    calibration: dict[str, Any]
    mixed: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "mode": self.mode,
            "granularity": self.granularity,
            "ranking": [u.to_dict() for u in self.units],
            "all_quantized": self.all_quantized.to_dict(),
            "calibration": self.calibration,
            "mixed_precision": self.mixed,
            **self.extra,
        }


def severity(e: ActionError) -> tuple[float, float]:
    """Ranking key: 1 - cosine first, the worst per-dimension error as the tie-break."""
    return (1.0 - e.cosine, e.worst_dim_error)


class ActionProbe:
    """The fp32 plain sub-engines of a model, run as one pipeline on a fixed batch and fixed noise."""

    def __init__(
        self, model: nn.Module, calib: CalibrationSet, samples: int, seed: int, num_steps: int | None = None
    ) -> None:
        family = calib.family
        cfg = family.config_of(model)
        n = min(samples, len(calib))
        idx = torch.linspace(0, len(calib) - 1, n).round().long().tolist()  # spread over the selection
        self.obs = calib.batch(idx)
        self.cfg, self.family = cfg, family
        shape = family.default_shape(cfg, n)
        if num_steps is not None:
            shape = family.with_steps(shape, num_steps)
        self.engines = family.build_subengines(model.float().eval(), shape, torch.float32)
        self.pipeline = family.eager_pipeline(cfg, shape, self.engines)
        gen = torch.Generator().manual_seed(seed)
        self.noise = family.make_noise(cfg, shape, n, gen)
        self.batch = n
        self.reference = self.run()

    def module(self, sub_engine: str) -> nn.Module:
        return self.engines[sub_engine].module

    def run(self) -> Tensor:
        return self.pipeline.sample(self.obs, self.noise).clone()

    def run_with(self, units: dict[str, list[str]], mode: str) -> Tensor:
        """Final actions with the named layers of each sub-engine fake-quantized."""
        with contextlib.ExitStack() as stack:
            for sub, names in units.items():
                stack.enter_context(fake_quantized(self.module(sub), names, mode))
            return self.run()

    def layer_calls(self) -> dict[tuple[str, str], tuple[int, tuple[int, int, int]]]:
        """(sub-engine, layer) -> (calls per inference, (rows per sample, in, out)) for layers that run."""
        seen: dict[tuple[str, str], tuple[int, tuple[int, int, int]]] = {}
        handles = []
        for sub in step_engines(self.family):
            for name, layer in linear_layers(self.module(sub)).items():

                def hook(
                    mod: nn.Module, args: tuple[Tensor, ...], key: tuple[str, str] = (sub, name)
                ) -> None:
                    x = args[0]
                    rows = max(1, x.numel() // x.shape[-1] // self.batch)
                    calls = seen.get(key, (0, (0, 0, 0)))[0] + 1
                    seen[key] = (calls, (rows, int(x.shape[-1]), int(mod.out_features)))  # type: ignore[arg-type]

                handles.append(layer.register_forward_pre_hook(hook))
        try:
            self.run()
        finally:
            for h in handles:
                h.remove()
        return seen


def _units(probe: ActionProbe, granularity: str) -> dict[str, tuple[str, list[str]]]:
    """unit key -> (sub-engine, layer names), for the layers that run in an inference."""
    calls = probe.layer_calls()
    units: dict[str, tuple[str, list[str]]] = {}
    for sub, name in calls:
        unit = name if granularity == "layer" else _block_of(name)
        units.setdefault(f"{sub}/{unit}", (sub, []))[1].append(name)
    return units


def _block_of(name: str) -> str:
    parts = name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p in ("blocks", "layers") and parts[i + 1].isdigit():
            return ".".join(parts[: i + 2])
    return name


def measure_sensitivity(
    target: str,
    model: nn.Module,
    calib: CalibrationSet,
    config: SensitivityConfig,
    action_dim: int,
    gripper_dim: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[SensitivityResult, ActionProbe]:
    from hotloop.compress.layer_latency import matmul_gain_ms

    probe = ActionProbe(model, calib, config.samples, config.seed)
    calls = probe.layer_calls()
    units = _units(probe, config.granularity)
    results: list[UnitResult] = []
    for i, (key, (sub, names)) in enumerate(sorted(units.items())):
        if progress is not None:
            progress(f"[{i + 1}/{len(units)}] {key}")
        got = probe.run_with({sub: names}, config.mode)
        gains = []
        for name in names:
            n_calls, (rows, k, n) = calls[(sub, name)]
            g = matmul_gain_ms(rows, k, n, config.mode, threads=config.threads)
            gains.append(None if g is None else g * n_calls)
        gain = None if any(g is None for g in gains) else float(sum(gains))  # type: ignore[arg-type]
        err = action_error(probe.reference, got, action_dim, gripper_dim)
        results.append(UnitResult(key, sub, tuple(names), err, gain, sum(calls[(sub, n)][0] for n in names)))
    results.sort(key=lambda u: severity(u.error), reverse=True)
    everything = probe.run_with(_by_sub(results), config.mode)
    all_err = action_error(probe.reference, everything, action_dim, gripper_dim)
    return (
        SensitivityResult(target, config.mode, config.granularity, results, all_err, calib.manifest_entry()),
        probe,
    )


def _by_sub(units: list[UnitResult]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for u in units:
        out.setdefault(u.sub_engine, []).extend(u.layers)
    return out


def restore_order(units: list[UnitResult]) -> list[UnitResult]:
    """Units in the order they go back to fp32: least measured gain per unit of error first."""

    def cost(u: UnitResult) -> float:
        err = max(1.0 - u.error.cosine, 1e-12) + u.error.worst_dim_error * 1e-3
        if u.gain_ms is None:  # not measured: by error alone, the most harmful first
            return -err
        return u.gain_ms / err

    return sorted(units, key=cost)


def mixed_precision(
    result: SensitivityResult,
    probe: ActionProbe,
    tolerance: Tolerance,
    action_dim: int,
    gripper_dim: int | None = None,
) -> dict[str, Any]:
    """Return units to fp32 (see `restore_order`) until the whole quantized plan meets `tolerance`.

    Units whose measured gain is not positive stay fp32 from the start: quantizing them costs accuracy
    and buys nothing on this machine."""
    no_gain = [u for u in result.units if u.gain_ms is not None and u.gain_ms <= 0]
    quantized = [u for u in result.units if u not in no_gain]
    history = []
    order = restore_order(quantized)
    err = result.all_quantized
    restored: list[UnitResult] = []
    agreement = compare_actions(probe.reference[..., :action_dim], probe.reference[..., :action_dim])
    while True:
        got = probe.run_with(_by_sub(quantized), result.mode) if quantized else probe.reference
        err = action_error(probe.reference, got, action_dim, gripper_dim)
        agreement = compare_actions(probe.reference[..., :action_dim], got[..., :action_dim])
        history.append(
            {"fp32_units": len(restored), "cosine": err.cosine, "worst_dim_error": err.worst_dim_error}
        )
        if tolerance.violation(agreement) is None or not quantized:
            break
        unit = order[len(restored)]
        restored.append(unit)
        quantized = [u for u in quantized if u.key != unit.key]
    fp32_layers: dict[str, list[str]] = {}
    for u in no_gain + restored:
        fp32_layers.setdefault(u.sub_engine, []).extend(u.layers)
    gain = [u.gain_ms for u in quantized]
    return {
        "tolerance": tolerance.spec,
        "met": tolerance.violation(agreement) is None,
        "fp32_units": [u.key for u in restored],
        "fp32_no_gain_units": [u.key for u in no_gain],
        "fp32_layers": fp32_layers,
        "quantized_units": [u.key for u in quantized],
        "error": err.to_dict(),
        "estimated_gain_ms": None if any(g is None for g in gain) else float(sum(gain)),  # type: ignore[arg-type]
        "history": history,
    }


def plot_sensitivity(result: SensitivityResult, path: Any, top: int = 25) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    units = result.units[:top]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, max(3.0, 0.3 * len(units) + 1)), sharey=True)
    labels = [u.key for u in units][::-1]
    errs = [max(1.0 - u.error.cosine, 1e-12) for u in units][::-1]
    ax1.barh(labels, errs, color="tab:red")
    ax1.set_xscale("log")
    ax1.set_xlabel("1 - final-action cosine (one unit quantized)")
    gains = [u.gain_ms or 0.0 for u in units][::-1]
    ax2.barh(labels, gains, color="tab:green")
    ax2.set_xlabel("measured gain per inference (ms)")
    fig.suptitle(f"{result.target}: {result.mode} sensitivity by {result.granularity}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
