"""How long the simulated robot waits for each inference.

- `measured`: the real wall time of this run's `policy.infer` call (what this machine costs now).
- `fixed:MS`: always MS milliseconds (the real call still runs; its time is ignored).
- `replay:PATH` (or just a path ending in .json): draws from a `hotloop bench --json` result. When the
  file has `samples_ms` (raw per-iteration totals) a draw is one of them, uniformly. Otherwise the draw is
  from the piecewise-linear inverse CDF through the quantiles (0, min), (0.5, p50), (0.9, p90),
  (0.95, p95), (0.99, p99), (1, max); when `min` is absent the lower half is taken as p50 (latency
  distributions are skewed to the right, their lower half is tight), so the replay never invents a
  faster machine than the file shows.
Draws use the episode's generator, so replayed runs are repeatable per seed.

A `--strategy draft` call reports its work as a fraction of a full inference's (a checked draft runs no
denoising loop; a rejected one runs the check and the loop): `fixed:` and `replay:` then stand for a full
inference and charge the call that fraction of their value (`charges_work`); `measured` is its wall time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError

_QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))


@dataclass(frozen=True)
class LatencyModel:
    kind: str  # "measured" | "fixed" | "replay"
    fixed_ms: float = 0.0
    source: str | None = None
    samples_ms: tuple[float, ...] = ()
    quantiles: tuple[tuple[float, float], ...] = field(default=())  # (q, ms) knots of the inverse CDF

    def sample_ms(self, measured_ms: float, rng: np.random.Generator) -> float:
        if self.kind == "measured":
            return float(measured_ms)
        if self.kind == "fixed":
            return float(self.fixed_ms)
        if self.samples_ms:
            return float(self.samples_ms[int(rng.integers(len(self.samples_ms)))])
        qs, values = zip(*self.quantiles, strict=True)
        return float(np.interp(rng.random(), qs, values))

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "spec": self.spec}
        if self.kind == "fixed":
            out["ms"] = self.fixed_ms
        if self.kind == "replay":
            out["source"] = self.source
            out["method"] = "samples_ms" if self.samples_ms else "quantile inverse CDF"
            if self.quantiles:
                out["quantiles_ms"] = {str(q): v for q, v in self.quantiles}
        return out

    @property
    def spec(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.fixed_ms:g}"
        if self.kind == "replay":
            return f"replay:{self.source}"
        return "measured"


@dataclass(frozen=True)
class WrappedLatency:
    """A latency model over another one (`base`, a `LatencyModel` or a wrapper) that keeps its kind and spec;
    a subclass adds its own delay (`sample_ms`) and says so (`describe`)."""

    base: Any

    @property
    def kind(self) -> str:
        return str(self.base.kind)

    @property
    def spec(self) -> str:
        return str(self.base.spec)


def charges_work(latency: LatencyModel | WrappedLatency) -> bool:
    """Whether `latency` (a `LatencyModel`, or a `WrappedLatency`, which keeps its base's kind) stands for a
    full inference, so that a call reporting a fraction of one's work (`--strategy draft`) is charged that
    fraction: `fixed:` and `replay:` do; `measured` is the call's own wall time already."""
    return latency.kind in ("fixed", "replay")


def parse_latency(spec: str) -> LatencyModel:
    """Parse `measured`, `fixed:MS`, `replay:PATH` or `PATH.json`; anything else is a one-line
    `ConfigError` naming the value (never a traceback)."""
    spec = spec.strip()
    if spec == "measured":
        return LatencyModel("measured")
    if spec.startswith("fixed:"):
        try:
            ms = float(spec.split(":", 1)[1])
        except ValueError:
            raise ConfigError(
                f"--latency {_show(spec)}: write fixed:MS with MS a number of milliseconds, e.g. fixed:100"
            ) from None
        if not (math.isfinite(ms) and ms >= 0):
            raise ConfigError(
                f"--latency {_show(spec)}: milliseconds must be finite and >= 0, e.g. fixed:100"
            )
        return LatencyModel("fixed", fixed_ms=ms)
    if spec.startswith("replay:") or spec.endswith(".json"):
        path = spec.removeprefix("replay:").strip()
        if not path:
            raise ConfigError(
                "--latency replay: needs a file, e.g. replay:bench.json from `hotloop bench TARGET --json bench.json`"
            )
        return load_bench_latency(path)
    raise ConfigError(
        f"--latency {_show(spec)} is not understood; use measured, fixed:MS (e.g. fixed:100) or a bench file "
        "(replay:PATH or PATH.json from `hotloop bench --json`)"
    )


def _show(value: object) -> str:
    # Quoted and escaped: a value with a newline or a control character still makes one line.
    return repr(str(value))


def _is_ms(value: object) -> bool:
    """A latency in milliseconds: a JSON number (not a boolean), finite, >= 0."""
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    )


def load_bench_latency(path: str | Path) -> LatencyModel:
    """Read a `hotloop bench --json` result as a latency distribution (see the module doc).

    Every defect of the file (missing, a directory, unreadable, not UTF-8, not JSON, the wrong shape, a
    value that is not a finite non-negative number of milliseconds) is a one-line `ConfigError`."""
    path = Path(path)
    name = _show(path)
    if path.is_dir():
        raise ConfigError(
            f"latency file {name} is a directory; pass the JSON file `hotloop bench --json` wrote"
        )
    if path.exists() and not path.is_file():
        raise ConfigError(
            f"latency file {name} is not a regular file; pass the JSON file `hotloop bench --json` wrote"
        )
    if not path.is_file():
        raise ConfigError(
            f"latency file {name} does not exist; write one with `hotloop bench TARGET --json {path}`"
        )
    try:
        text = path.read_bytes().decode("utf-8")
        doc = json.loads(text)
    except OSError as e:
        raise ConfigError(f"latency file {name} cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"latency file {name} is not a JSON text file; pass a `hotloop bench --json` result"
        ) from None
    except (json.JSONDecodeError, RecursionError) as e:
        reason = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
        raise ConfigError(
            f"latency file {name} is not JSON ({reason}); pass a `hotloop bench --json` result"
        ) from None
    if not isinstance(doc, dict):
        raise ConfigError(
            f"latency file {name} holds a JSON {type(doc).__name__}, not the object `hotloop bench --json` writes"
        )
    samples = doc.get("samples_ms")
    if samples is not None and samples != []:
        if not isinstance(samples, list) or not all(_is_ms(x) for x in samples):
            raise ConfigError(
                f"latency file {name}: samples_ms must be a list of finite, non-negative milliseconds"
            )
        return LatencyModel("replay", source=str(path), samples_ms=tuple(float(x) for x in samples))
    lat = doc.get("latency_ms")
    if not isinstance(lat, dict):
        raise ConfigError(
            f"latency file {name} has no 'latency_ms' object (nor 'samples_ms'); it must be the output of "
            "`hotloop bench --json`"
        )
    missing = [k for k, _ in _QUANTILES if k not in lat]
    if missing:
        raise ConfigError(
            f"latency file {name}: latency_ms lacks {', '.join(missing)}; re-run `hotloop bench --json`"
        )
    keys = [k for k, _ in _QUANTILES] + (["min"] if lat.get("min") is not None else [])
    bad = [k for k in keys if not _is_ms(lat[k])]
    if bad:
        raise ConfigError(
            f"latency file {name}: latency_ms {', '.join(bad)} must be finite, non-negative milliseconds"
        )
    low = float(lat["min"]) if lat.get("min") is not None else float(lat["p50"])
    knots = [(0.0, low)] + [(q, float(lat[k])) for k, q in _QUANTILES]
    values = [v for _, v in knots]
    if any(b < a for a, b in zip(values, values[1:], strict=False)):
        shown = ", ".join(f"{v:g}" for v in values)
        raise ConfigError(f"latency file {name}: latency_ms quantiles must not decrease (got {shown})")
    return LatencyModel("replay", source=str(path), quantiles=tuple(knots))
