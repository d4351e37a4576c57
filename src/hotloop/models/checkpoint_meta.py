"""Read the JSON files beside a checkpoint's weights, checking every field a loader uses.

`config.json`, `tiny_arch.json` and `norm_stats.json` come from other tools and from users' hands, so
each value is checked before use: a wrong type, a null, a list where an object belongs, bad JSON or a
binary file becomes one `CheckpointError` naming the file and the field, never a raw TypeError or
JSONDecodeError from deep inside the loader.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hotloop.errors import CheckpointError

MAX_JSON_BYTES = 64 << 20  # a config or processor file is kilobytes; a tokenizer.json some megabytes


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; anything else (unreadable, binary, bad JSON, a list, null) is named."""
    try:
        if not path.is_file():
            raise CheckpointError(f"{path} is not a regular file (a folder or a device); restore it")
        if path.stat().st_size > MAX_JSON_BYTES:
            raise CheckpointError(
                f"{path} is {path.stat().st_size / 2**20:.0f} MiB, more than the {MAX_JSON_BYTES >> 20} MiB a "
                "config file can hold; restore it"
            )
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(
            f"{path} is not a text file (binary or damaged); restore or delete it"
        ) from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise CheckpointError(f"{path} is nested too deep to be a config; restore it") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); fix or delete it"
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object {{...}}, not {_kind(data)}; fix or delete it")
    return data


def lerobot_config(folder: Path, why: str) -> Fields:
    """`folder`/config.json, a LeRobot policy checkpoint's config, as `Fields`; when it is missing the error
    ends with `why` (what needs the file)."""
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"missing file 'config.json' in {folder}: {why}")
    return Fields(read_json_object(path), path)


# Bounds on the sizes a config.json states, checked before anything is allocated from them: far above any
# real policy (and equal to the matching `hotloop bench` option limits), low enough that a typo or a
# hostile file is refused at once instead of hanging a loader or exhausting memory. A size the tensors
# also hold is in addition checked against them.
MAX_CONFIG_INT = 1_000_000  # any integer field: no size of a policy is near a million (vocabularies ~260k)
MAX_CHUNK = 1000  # actions per chunk (chunk_size, horizon, n_action_steps): `--horizon`'s limit
MAX_STEPS = 1000  # denoising / flow steps per inference: `--steps`'s limit
MAX_TRAIN_TIMESTEPS = 10_000  # a diffusion noise schedule's length (LeRobot's default 100, DDPM's 1000)
MAX_OBS_STEPS = 100  # observation history
MAX_TOKENS = 100_000  # prompt tokens: `--prompt-tokens`'s limit
MAX_FEATURE_DIM = 4096  # one dimension of an input feature: a camera's side in pixels, a state's width


class Fields:
    """Typed access to one JSON object; every failure names the file and the dotted field."""

    def __init__(self, data: dict[str, Any], file: Path, prefix: str = "") -> None:
        self.data = data
        self.file = file
        self.prefix = prefix

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def name(self, key: str) -> str:
        """The dotted field name as a user finds it in the file, e.g. "norm_stats.state.q01"."""
        return self.prefix + key

    def _fail(self, key: str, want: str) -> CheckpointError:
        value = self.data[key]
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return CheckpointError(
            f"{self.file}: field {self.name(key)!r} must be {want} (got {_kind(value)} {shown}); "
            "fix or delete the field"
        )

    def integer(self, key: str, minimum: int = 1, maximum: int | None = MAX_CONFIG_INT) -> int | None:
        """An int in [minimum, maximum], or None when the key is absent."""
        if key not in self.data:
            return None
        value = self.data[key]
        ok = isinstance(value, int) and not isinstance(value, bool)
        if isinstance(value, float) and value.is_integer():  # 10.0 written by a float-only JSON writer
            ok, value = True, int(value)
        bound = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        if not ok or value < minimum or (maximum is not None and value > maximum):
            raise self._fail(key, bound)
        return int(value)

    def number(self, key: str, positive: bool = True) -> float | None:
        """A finite float (positive if asked), or None when the key is absent."""
        if key not in self.data:
            return None
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self._fail(key, "a finite number")
        if positive and value <= 0:
            raise self._fail(key, "a number > 0")
        return float(value)

    def string(self, key: str, choices: tuple[str, ...] | None = None) -> str | None:
        if key not in self.data:
            return None
        value = self.data[key]
        if not isinstance(value, str) or (choices is not None and value not in choices):
            raise self._fail(
                key, "a string" if choices is None else "one of " + ", ".join(map(repr, choices))
            )
        return value

    def obj(self, key: str, nullable: bool = False) -> Fields | None:
        """A nested object as Fields; None when absent (or null, if `nullable`)."""
        if key not in self.data or (nullable and self.data[key] is None):
            return None
        value = self.data[key]
        if not isinstance(value, dict):
            raise self._fail(key, "a JSON object {...}" + (" or null" if nullable else ""))
        return Fields(value, self.file, f"{self.prefix}{key}.")

    def numbers(self, key: str, length: int | None = None) -> list[float] | None:
        """A flat list of finite numbers (of `length`, if given); None when absent or null."""
        if key not in self.data or self.data[key] is None:
            return None
        value = self.data[key]
        if (
            not isinstance(value, list)
            or not value
            or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in value
            )
        ):
            raise self._fail(key, "a non-empty list of finite numbers or null")
        if length is not None and len(value) != length:
            raise self._fail(key, f"a list of {length} numbers")
        return [float(v) for v in value]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


__all__ = [
    "MAX_CHUNK",
    "MAX_CONFIG_INT",
    "MAX_FEATURE_DIM",
    "MAX_OBS_STEPS",
    "MAX_STEPS",
    "MAX_TOKENS",
    "MAX_TRAIN_TIMESTEPS",
    "Fields",
    "read_json_object",
]
