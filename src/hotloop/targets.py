"""Named bench / eval targets (`family:config`) and the one table that dispatches them.

A target builds a `BenchCase` (one inference, timed by the harness) and, when it is a policy that can
drive a robot, a `Policy` for closed-loop evaluation. Modules are imported only when their target is
used, so `hotloop --help` and `import hotloop` stay light (ARCHITECTURE style rule 5 and 9).
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hotloop.errors import ConfigError
from hotloop.measure.case import BenchCase
from hotloop.registry import Registry

# Upper limits on the size options: far above any real robot policy, low enough that a typo (an extra
# zero or three) is refused at once instead of hanging the machine or exhausting its memory.
OPTION_LIMITS: dict[str, int] = {
    "views": 16,
    "num_steps": 1000,
    "horizon": 1000,
    "action_dim": 1024,
    "batch": 1024,
    "prompt_tokens": 100_000,
    "threads": 1024,
}
MAX_SEED = 2**32 - 1
_FLAGS = {"num_steps": "--steps", "batch": "--batch", "dtype": "--dtype", "device": "--device"}


def flag(name: str) -> str:
    """The command-line flag of a TargetOptions field (num_steps -> --steps)."""
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


@dataclass(frozen=True)
class TargetOptions:
    """Options a target may honour; a target that cannot honour a set option raises ConfigError."""

    views: int | None = None
    num_steps: int | None = None
    horizon: int | None = None
    action_dim: int | None = None
    prompt_tokens: int | None = None  # real tokens among the prompt slots (VLA targets)
    buckets: tuple[int, ...] | None = None  # prompt-length buckets for the prefix (VLA targets)
    device: str = "cpu"
    dtype: str = "float32"
    batch: int = 1
    seed: int = 0
    memory_cap_mb: float | None = None  # a loaded engine's resident-memory cap (artifact targets)
    # Intra-op threads the caller chose (--threads): an artifact's engine runs its backends with these
    # instead of the threads recorded at compile time. None: the manifest's.
    threads: int | None = None

    def __post_init__(self) -> None:
        for name, limit in OPTION_LIMITS.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
                raise ConfigError(f"{flag(name)} must be an integer from 1 to {limit} (got {value!r})")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(f"--dtype {self.dtype!r} is not supported; use float32, bfloat16 or float16")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"--seed must be an integer from 0 to {MAX_SEED} (got {self.seed!r})")
        if self.memory_cap_mb is not None:
            check_cap(self.memory_cap_mb)

    def reject_unsupported(self, target: str, supported: set[str]) -> None:
        """Raise if an option outside `supported` was set (no silent ignoring).

        `dtype`, `batch` and `device` have defaults (float32, 1, cpu): a target that does not list them
        runs only at those defaults, and any other value is refused rather than ignored.
        """
        for name in (
            "views",
            "num_steps",
            "horizon",
            "action_dim",
            "prompt_tokens",
            "buckets",
            "memory_cap_mb",
        ):
            if getattr(self, name) is not None and name not in supported:
                raise ConfigError(
                    f"target {target!r} does not take {flag(name)}; it takes: "
                    f"{', '.join(flag(n) for n in sorted(supported)) or 'no options'}"
                )
        defaults = {"dtype": "float32", "batch": 1, "device": "cpu"}
        for name, default in defaults.items():
            if name not in supported and getattr(self, name) != default:
                raise ConfigError(
                    f"target {target!r} does not take {flag(name)} {getattr(self, name)}: its {name} is fixed "
                    f"(a built-in target runs at {default}, an artifact as compiled); drop {flag(name)}"
                )


CAP_FLAG = "--memory-cap-mb"


MIN_CAP_MB = 1.0  # below a MiB no engine loads: such a cap is a typo (a GiB figure, say), not a limit


def check_cap(cap_mb: float | None) -> None:
    """An engine's resident-memory cap in MiB: None, or a number from `MIN_CAP_MB` to this machine's
    physical memory (a cap above it can never be reached: it would cap nothing, silently); named by its
    flag otherwise."""
    if cap_mb is None:
        return
    total = _physical_memory_mb()
    if (
        isinstance(cap_mb, bool)
        or not isinstance(cap_mb, (int, float))
        or not math.isfinite(cap_mb)
        or not MIN_CAP_MB <= cap_mb <= (total if total is not None else math.inf)
    ):
        upper = f"this machine's {total:,.0f} MiB of memory" if total is not None else "a finite number"
        raise ConfigError(
            f"{CAP_FLAG} must be a number of MiB from {MIN_CAP_MB:g} to {upper} (got {cap_mb!r}); "
            "give the engine's budget in MiB, e.g. 2048"
        )


def _physical_memory_mb() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):  # not POSIX: no upper bound but a finite one
        return None


def check_device(device: str) -> None:
    """`--device` names a device this machine has (cpu, or cuda when a GPU is visible)."""
    if device == "cpu":
        return
    if not device.startswith("cuda"):
        raise ConfigError(f"device {device!r} is not supported; use cpu or cuda")
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} asked for, but no CUDA GPU is visible here; use --device cpu")


def check_fits_memory(
    need_bytes: float, what: str, device: str, fix: str = "lower --batch, --horizon or --views"
) -> None:
    """Refuse a run whose estimated memory exceeds what is free on `device` (instead of swapping or OOM)."""
    if device.startswith("cuda"):
        import torch

        free = float(torch.cuda.mem_get_info(torch.device(device))[0])
    else:
        import psutil

        free = float(psutil.virtual_memory().available)
    if need_bytes > free:
        gib = 1024.0**3
        raise ConfigError(
            f"{what} needs about {need_bytes / gib:.1f} GiB, more than the {free / gib:.1f} GiB free on "
            f"{device}; {fix}"
        )


@dataclass(frozen=True)
class TargetEntry:
    description: str
    bench: str  # "module:function", called as function(config_name, options) -> BenchCase
    policy: str | None = None  # "module:function", called the same way -> Policy
    full_name: bool = False  # pass the whole name (an artifact path), not the part after "family:"
    # "module:function", called the same way -> `hotloop.families.protocol.PolicySource`: what
    # `hotloop compile` / `hotloop compress` plan (None: the target cannot be compiled).
    source: str | None = None
    # "module:function" called as function(policy, manifest policy entry) -> Policy: what an artifact
    # compiled from this target wraps its family's engine policy in (a demo's own transforms).
    wrap: str | None = None
    # "module:function" called as function(name, dataset, options, model=None) -> (fp32 model,
    # `hotloop.families.frames.TargetAdapter`): how the target reads recorded frames.
    data: str | None = None
    # "module:function" called as function(name, options, task, count) -> [observation, ...]: the start
    # observations of `count` episodes (seeds options.seed + i) of the target's own task, as its model
    # sees them; None: the target has no task of its own (its compression is judged on random inputs).
    task_observations: str | None = None
    # "module:function" called as function(name) -> int | None: the length of the action chunks the
    # policy returns, read from its files without building it, so that `hotloop eval` checks
    # --execute-steps / --trigger-remaining against it before seconds of loading. None: known only then.
    horizon: str | None = None

    def _arg(self, name: str) -> str:
        return name if self.full_name else name.split(":", 1)[1]

    def build_bench(self, name: str, options: TargetOptions) -> BenchCase:
        return _resolve(self.bench)(self._arg(name), options)

    def build_policy(self, name: str, options: TargetOptions) -> Any:
        if self.policy is None:
            raise ConfigError(
                f"target {name!r} is a benchmark only and cannot drive a robot; pick a policy target"
            )
        return _resolve(self.policy)(self._arg(name), options)

    def wrap_engine_policy(self, policy: Any, info: dict[str, Any]) -> Any:
        return policy if self.wrap is None else _resolve(self.wrap)(policy, info)

    def build_data(self, name: str, dataset: Any, options: TargetOptions, model: Any = None) -> Any:
        if self.data is None:
            raise ConfigError(f"target {name!r} cannot read recorded frames")
        return _resolve(self.data)(self._arg(name), dataset, options, model)

    def build_task_observations(self, name: str, options: TargetOptions, task: str, count: int) -> list[Any]:
        if self.task_observations is None:
            raise ConfigError(f"target {name!r} has no task of its own")
        return _resolve(self.task_observations)(self._arg(name), options, task, count)  # type: ignore[no-any-return]

    def declared_horizon(self, name: str) -> int | None:
        """The policy's chunk length without building it, or None where only the built policy knows."""
        if self.horizon is None:
            return None
        value = _resolve(self.horizon)(self._arg(name))
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None

    def build_source(self, name: str, options: TargetOptions) -> Any:
        if self.source is None:
            raise ConfigError(f"target {name!r} cannot be compiled (no sub-engines to plan)")
        return _resolve(self.source)(self._arg(name), options)


def _resolve(path: str) -> Callable[..., Any]:
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


_PI = "hotloop.families.pi.targets"
_PI_SOURCE = "hotloop.families.pi.source"
_PI_DATA = "hotloop.families.pi.data"
_SMOLVLA = "hotloop.families.smolvla.targets"
_DEMO_SOURCE = "hotloop.demos.source:demo_source"
_DEMO_DATA = "hotloop.demos.data:demo_data"
_DEMO_TASK_OBSERVATIONS = "hotloop.demos.data:task_observations"
# The demos shipped as LeRobot checkpoint folders: each hook is the family's checkpoint target's.
_DEMO_CHECKPOINTS = "hotloop.demos.checkpoints"
_BUILTIN: tuple[tuple[str, TargetEntry], ...] = (
    (
        "toy:mlp",
        TargetEntry(
            "MLP from a state vector to an action chunk",
            "hotloop.families.toy.targets:build_bench",
            "hotloop.families.toy.targets:build_policy",
            source="hotloop.families.toy.targets:build_source",
            data="hotloop.families.toy.targets:build_data",
        ),
    ),
    (
        "pi0:full",
        TargetEntry(
            "pi0 at the published sizes (SigLIP So400m + Gemma 2B + 300M expert)",
            f"{_PI}:build_pi0_bench",
            f"{_PI}:build_pi0_policy",
            source=f"{_PI_SOURCE}:build_pi0_source",
            data=f"{_PI_DATA}:build_pi0_data",
        ),
    ),
    (
        "pi0:tiny",
        TargetEntry(
            "pi0, test scale (< 5 M parameters)",
            f"{_PI}:build_pi0_bench",
            f"{_PI}:build_pi0_policy",
            source=f"{_PI_SOURCE}:build_pi0_source",
            data=f"{_PI_DATA}:build_pi0_data",
        ),
    ),
    (
        "pi05:full",
        TargetEntry(
            "pi0.5 at the published sizes",
            f"{_PI}:build_pi05_bench",
            f"{_PI}:build_pi05_policy",
            source=f"{_PI_SOURCE}:build_pi05_source",
            data=f"{_PI_DATA}:build_pi05_data",
        ),
    ),
    (
        "pi05:small",
        TargetEntry(
            "pi0.5, CPU-benchmark scale of the same structure",
            f"{_PI}:build_pi05_bench",
            f"{_PI}:build_pi05_policy",
            source=f"{_PI_SOURCE}:build_pi05_source",
            data=f"{_PI_DATA}:build_pi05_data",
        ),
    ),
    (
        "pi05:tiny",
        TargetEntry(
            "pi0.5, test scale (< 5 M parameters)",
            f"{_PI}:build_pi05_bench",
            f"{_PI}:build_pi05_policy",
            source=f"{_PI_SOURCE}:build_pi05_source",
            data=f"{_PI_DATA}:build_pi05_data",
        ),
    ),
    *(
        (
            f"smolvla:{size}",
            TargetEntry(
                description,
                f"{_SMOLVLA}:build_bench",
                f"{_SMOLVLA}:build_policy",
                source=f"{_SMOLVLA}:build_source",
                data=f"{_SMOLVLA}:build_data",
            ),
        )
        for size, description in (
            ("tiny", "SmolVLA, test scale (< 1 M parameters)"),
            ("small", "SmolVLA, CPU-benchmark scale of the same structure (~100 M parameters)"),
            ("base", "SmolVLA at the published smolvla_base sizes (SmolVLM2-500M truncated to 16 layers)"),
        )
    ),
    (
        "expert:scripted",
        TargetEntry(
            "the task's scripted expert (privileged state, horizon 1): what the task allows at a latency",
            "hotloop.sim.expert_policy:build_bench",
            "hotloop.sim.expert_policy:build_policy",
            horizon="hotloop.sim.expert_policy:declared_horizon",
        ),
    ),
    *(
        (
            name,
            TargetEntry(
                description,
                "hotloop.demos.conveyor:build_bench",
                "hotloop.demos.conveyor:build_policy",
                source=_DEMO_SOURCE,
                data=_DEMO_DATA,
                task_observations=_DEMO_TASK_OBSERVATIONS,
                wrap="hotloop.demos.conveyor:wrap_engine_policy",
                horizon="hotloop.demos.conveyor:declared_horizon",
            ),
        )
        for name, description in (
            ("demo:conveyor", "the shipped pi0.5-nano policy trained on conveyor-pick"),
            (
                "demo:conveyor-chain",
                "demo:conveyor trained for an estimated box state: the policy behind --pipeline detector:...",
            ),
        )
    ),
    (
        "demo:conveyor-vision",
        TargetEntry(
            "the shipped pi0.5-mini policy for conveyor-pick that sees the box only through the camera",
            "hotloop.demos.conveyor_vision:build_bench",
            "hotloop.demos.conveyor_vision:build_policy",
            source=_DEMO_SOURCE,
            data=_DEMO_DATA,
            task_observations=_DEMO_TASK_OBSERVATIONS,
            wrap="hotloop.demos.conveyor_vision:wrap_engine_policy",
            horizon="hotloop.demos.conveyor_vision:declared_horizon",
        ),
    ),
    (
        "demo:detector",
        TargetEntry(
            "the shipped learned box detector of conveyor-pick (a CNN; --pipeline detector:model=learned)",
            "hotloop.demos.detector:build_bench",
        ),
    ),
    *(
        (
            f"demo:conveyor-{family}",
            TargetEntry(
                description,
                f"{_DEMO_CHECKPOINTS}:build_bench",
                f"{_DEMO_CHECKPOINTS}:build_policy",
                source=f"{_DEMO_CHECKPOINTS}:build_source",
                data=f"{_DEMO_CHECKPOINTS}:build_data",
                task_observations=f"{_DEMO_CHECKPOINTS}:task_observations",
                horizon=f"{_DEMO_CHECKPOINTS}:declared_horizon",
            ),
        )
        for family, description in (
            (
                "act",
                "the shipped LeRobot ACT checkpoint trained on conveyor-pick from the top and wrist views",
            ),
            (
                "diffusion",
                "the shipped LeRobot Diffusion Policy checkpoint trained on conveyor-pick from the top view",
            ),
            (
                "smolvla",
                "the shipped LeRobot SmolVLA checkpoint (1.2 M parameters) trained on conveyor-pick from the top "
                "and wrist views and the prompt",
            ),
        )
    ),
)


ARTIFACT_ENTRY = TargetEntry(
    "a compiled artifact (hotloop compile)",
    "hotloop.runtime.targets:build_bench",
    "hotloop.runtime.targets:build_policy",
    full_name=True,
)


def find_target(name: str) -> TargetEntry:
    """A registered target, a folder holding a compiled artifact (its manifest.json), or a LeRobot
    checkpoint folder (config.json + model.safetensors; its `type` picks the family)."""
    from pathlib import Path

    path = Path(name)
    if (path / "manifest.json").is_file():
        return ARTIFACT_ENTRY
    from hotloop.families import checkpoint_targets, checkpoint_type, is_checkpoint_dir

    if is_checkpoint_dir(path):
        module = checkpoint_targets(path)
        return TargetEntry(
            f"a LeRobot {checkpoint_type(path)} checkpoint",
            f"{module}:build_bench",
            f"{module}:build_policy",
            full_name=True,
            source=f"{module}:build_source",
            data=f"{module}:build_data",
        )
    if path.is_dir():
        missing = [f for f in ("config.json", "model.safetensors") if not (path / f).is_file()]
        raise ConfigError(
            f"{name} is a folder but neither a compiled artifact (no manifest.json) nor a LeRobot "
            f"checkpoint (no {' and no '.join(missing)}); give an artifact from `hotloop compile`, a "
            "checkpoint folder (.../pretrained_model) or a target name (see `hotloop targets`)"
        )
    registry = default_targets()
    if name not in registry and ("/" in name or path.exists()):
        # A path, not a name: say what a folder target needs instead of listing the names.
        what = "is a file" if path.exists() else "does not exist"
        raise ConfigError(
            f"{name} {what}; a target is a folder (a compiled artifact with manifest.json, or a LeRobot "
            "checkpoint with config.json and model.safetensors) or a target name (see `hotloop targets`)"
        )
    return registry.get(name)


def default_targets() -> Registry[TargetEntry]:
    """A fresh registry holding the built-in targets (callers may register more on their copy)."""
    return Registry.of("target", _BUILTIN)


__all__ = [
    "BenchCase",
    "TargetEntry",
    "TargetOptions",
    "check_cap",
    "check_device",
    "check_fits_memory",
    "default_targets",
    "find_target",
    "flag",
]
