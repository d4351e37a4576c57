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
"""

from __future__ import annotations

import json
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


def parse_latency(spec: str) -> LatencyModel:
    """Parse `measured`, `fixed:MS`, `replay:PATH` or `PATH.json`."""
    spec = spec.strip()
    if spec == "measured":
        return LatencyModel("measured")
    if spec.startswith("fixed:"):
        try:
            ms = float(spec.split(":", 1)[1])
        except ValueError:
            raise ConfigError(
                f"latency {spec!r}: write fixed:MS with MS a number of milliseconds, e.g. fixed:100"
            ) from None
        if not ms >= 0:
            raise ConfigError(f"latency {spec!r}: milliseconds must be >= 0")
        return LatencyModel("fixed", fixed_ms=ms)
    if spec.startswith("replay:") or spec.endswith(".json"):
        return load_bench_latency(spec.removeprefix("replay:"))
    raise ConfigError(
        f"latency {spec!r} is not understood; use measured, fixed:MS (e.g. fixed:100) or a bench file "
        "(replay:PATH or PATH.json from `hotloop bench --json`)"
    )


def load_bench_latency(path: str | Path) -> LatencyModel:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"latency file {path} does not exist; write one with `hotloop bench TARGET --json {path}`"
        )
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"latency file {path} is not JSON ({e}); pass a `hotloop bench --json` result"
        ) from None
    if isinstance(doc, dict) and isinstance(doc.get("samples_ms"), list) and doc["samples_ms"]:
        samples = tuple(float(x) for x in doc["samples_ms"])
        if any(not np.isfinite(x) or x < 0 for x in samples):
            raise ConfigError(f"latency file {path}: samples_ms must be finite, non-negative milliseconds")
        return LatencyModel("replay", source=str(path), samples_ms=samples)
    lat = doc.get("latency_ms") if isinstance(doc, dict) else None
    if not isinstance(lat, dict):
        raise ConfigError(
            f"latency file {path} has no 'latency_ms' object (nor 'samples_ms'); it must be the output of "
            "`hotloop bench --json`"
        )
    missing = [k for k, _ in _QUANTILES if not isinstance(lat.get(k), int | float)]
    if missing:
        raise ConfigError(
            f"latency file {path}: latency_ms lacks {', '.join(missing)}; re-run `hotloop bench --json`"
        )
    low = float(lat["min"]) if isinstance(lat.get("min"), int | float) else float(lat["p50"])
    knots = [(0.0, low)] + [(q, float(lat[k])) for k, q in _QUANTILES]
    values = [v for _, v in knots]
    if any(b < a for a, b in zip(values, values[1:], strict=False)):
        raise ConfigError(f"latency file {path}: latency_ms quantiles must not decrease (got {values})")
    return LatencyModel("replay", source=str(path), quantiles=tuple(knots))
