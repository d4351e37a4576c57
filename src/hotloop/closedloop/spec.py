"""`hotloop sweep SPEC`: a grid written out by hand, expanded into cells.

A spec is a YAML or JSON object. A key with a list of values is an axis; a key with one value holds for
every cell; `episodes` and `seed` give each cell its seed range (seed .. seed + episodes - 1)::

    target: [demo:conveyor, expert:scripted]
    task: conveyor-pick
    strategy: [sync, async, rtc]
    latency: [fixed:0, fixed:100, fixed:200]
    trigger_remaining: [6, 8]     # as `hotloop eval --sweep-trigger`: only strategies that read it
    episodes: 50
    seed: 0

The keys are `hotloop eval`'s options (dashes or underscores). Every cell is checked as `hotloop eval`
checks its flags, before any episode runs; an unknown key or a bad value is one line naming it.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

from hotloop.closedloop.cells import Cell, check_unique
from hotloop.errors import ConfigError, HotloopError

# spec key -> EvalSweep field
KEYS = {
    "target": "target",
    "task": "task",
    "task_kwargs": "task_kwargs",
    "difficulty": "difficulty",
    "strategy": "strategy",
    "latency": "latency",
    "trigger_remaining": "trigger_remaining",
    "execute_steps": "execute_steps",
    "steps": "num_steps",
    "blend": "blend",
    "fallback": "fallback",
    "deadline_ms": "deadline_ms",
    "guidance_weight": "guidance_weight",
    "ensemble_coeff": "ensemble_coeff",
    "draft_tolerance": "draft_tolerance",
    "draft_from": "draft_from",
    "pipeline": "pipeline",
    "memory_cap_mb": "memory_cap_mb",
}
SEED_KEYS = ("episodes", "seed")
INT_KEYS = ("trigger_remaining", "execute_steps", "steps")
FLOAT_KEYS = ("deadline_ms", "guidance_weight", "ensemble_coeff", "draft_tolerance", "memory_cap_mb")


def _typed(key: str, value: Any, shown: str, where: str) -> Any:
    """A spec value as the eval option takes it (YAML reads `latency: 100` as a number, `0` as an int)."""
    if value is None or key == "task_kwargs":
        return value
    try:
        if key in INT_KEYS:
            if isinstance(value, bool) or int(value) != value:
                raise ValueError
            return int(value)
        if key in FLOAT_KEYS:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
    except (TypeError, ValueError):
        kind = "a whole number" if key in INT_KEYS else "a number"
        raise ConfigError(f"{where}: {key} ({shown}) must be {kind}, got {value!r}") from None
    return str(value)


# Bounds on a spec, far above a hand-written grid, low enough that a mistake (or a YAML alias bomb: a
# few hundred bytes whose aliases expand to gigabytes) is one line before anything is built.
MAX_SPEC_BYTES = 1 << 20
MAX_SPEC_VALUES = 100_000  # values in the spec as written out, every alias expanded
MAX_CELLS = 10_000
MAX_SWEEP_EPISODES = 1_000_000  # over every cell: as `hotloop eval --episodes` allows per point


def _count_values(data: Any, where: str) -> None:
    """Refuse a spec of more than MAX_SPEC_VALUES values as written out (an alias counts each time it is
    used); the walk stops at the bound, so it costs at most that many steps."""
    count = 0
    stack = [data]
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_SPEC_VALUES:
            raise ConfigError(
                f"{where}: more than {MAX_SPEC_VALUES:,} values once its aliases are expanded; a sweep spec "
                "lists axes of a few values each: write it out plainly"
            )
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def read_spec_file(path: Path) -> dict[str, Any]:
    from hotloop.io import read_text_bounded

    text = read_text_bounded(path, "SPEC", MAX_SPEC_BYTES)
    try:
        data = _parse_spec(path, text)
    except RecursionError:
        raise ConfigError(f"SPEC {path}: nested too deep to be a sweep spec") from None
    if not isinstance(data, dict):
        raise ConfigError(f"SPEC {path}: the top level must be a mapping of option: value or [values]")
    _count_values(data, f"SPEC {path}")
    return data


def _parse_spec(path: Path, text: str) -> Any:
    """The YAML or JSON in `text`, read as `path`'s suffix says; bad syntax is named."""
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(
                f"SPEC {path}: reading YAML needs PyYAML (pip install pyyaml), or write it as JSON"
            ) from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"SPEC {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"SPEC {path}: not valid JSON ({e})") from None
    raise ConfigError(f"SPEC {path}: give a .yaml, .yml or .json file")


def expand(data: dict[str, Any], where: str, workers: int = 2) -> list[Cell]:
    """The spec's cells, in axis order (the first axis varies slowest), each checked."""
    from hotloop.closedloop.sweep import EvalSweep, student_readers, trigger_readers

    norm: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in KEYS and name not in SEED_KEYS:
            known = ", ".join([*KEYS, *SEED_KEYS])
            raise ConfigError(f"{where}: unknown axis or option {key!r}; the keys are {known}")
        norm[name] = value
    if "target" not in norm:
        raise ConfigError(f"{where}: no target; add e.g. `target: demo:conveyor` (or a list of them)")
    for name in SEED_KEYS:
        value = norm.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: {name} must be one whole number for every cell, got {value!r}")
    axes = {k: v for k, v in norm.items() if k in KEYS and isinstance(v, list)}
    for k, v in axes.items():
        if not v:
            raise ConfigError(f"{where}: axis {k} has no values; give at least one or drop it")
    fixed = {k: v for k, v in norm.items() if k in KEYS and k not in axes}
    episodes, seed = norm.get("episodes", 50), norm.get("seed", 0)
    points = math.prod(len(v) for v in axes.values())
    if points > MAX_CELLS:
        raise ConfigError(
            f"{where}: {' x '.join(str(len(v)) for v in axes.values())} = {points:,} cells, more than "
            f"{MAX_CELLS:,}; split the grid into several sweeps"
        )
    if points * max(episodes, 1) > MAX_SWEEP_EPISODES:
        raise ConfigError(
            f"{where}: {points:,} cells x {episodes:,} episodes = {points * episodes:,} episodes, more than "
            f"{MAX_SWEEP_EPISODES:,} in one sweep; lower episodes or split the grid"
        )
    cells: list[Cell] = []
    names = list(axes)
    for combo in itertools.product(*(axes[k] for k in names)):
        point = {**fixed, **dict(zip(names, combo, strict=True))}
        shown = ", ".join(f"{k}={point[k]}" for k in names) or "the only cell"
        if isinstance(point.get("task_kwargs"), dict):
            point["task_kwargs"] = json.dumps(point["task_kwargs"], sort_keys=True)
        bad = next((k for k, v in point.items() if isinstance(v, list | dict)), None)
        if bad is not None:
            raise ConfigError(f"{where}: {bad} ({shown}) must be one value per cell, got {point[bad]!r}")
        point = {k: _typed(k, v, shown, where) for k, v in point.items()}
        strategy = str(point.get("strategy", "sync"))
        if point.get("trigger_remaining") is not None and strategy not in trigger_readers([strategy]):
            point["trigger_remaining"] = None  # as --sweep-trigger: one cell for the strategies without one
        if point.get("draft_from") is not None and strategy not in student_readers([strategy]):
            point["draft_from"] = None  # as `hotloop eval`: the student is draft's only
        kwargs = {KEYS[k]: v for k, v in point.items() if v is not None}
        kwargs["strategy"] = (strategy,)
        try:
            sweep = EvalSweep(episodes=episodes, seed=seed, workers=workers, **kwargs)
            (request,) = sweep.requests()
        except TypeError as e:
            raise ConfigError(f"{where}: cell ({shown}): {e}") from None
        except HotloopError as e:
            raise ConfigError(f"{where}: cell ({shown}): {e}") from None
        cell = Cell.of(request)
        if all(c.key != cell.key for c in cells):  # a trigger axis leaves one cell per non-reader
            cells.append(cell)
    check_unique(cells)
    return cells


def load_spec(path: Path, workers: int = 2) -> list[Cell]:
    return expand(read_spec_file(path), f"SPEC {path}", workers)
