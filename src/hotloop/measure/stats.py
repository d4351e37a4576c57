"""Latency statistics: the distribution, never the mean alone (R1.1), and the hidden-jitter flag (R1.2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

# R1.2: p95 above 1.5 x p50 means the tail hides stalls the median does not show.
JITTER_RATIO = 1.5


@dataclass(frozen=True)
class LatencyStats:
    """Statistics of one latency sample, in milliseconds."""

    p50: float
    p90: float
    p95: float
    p99: float
    max: float
    mean: float
    std: float

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float] | np.ndarray) -> LatencyStats:
        x = np.asarray(samples_ms, dtype=np.float64)
        if x.size == 0:
            raise ValueError("cannot summarise an empty latency sample")
        # numpy's default (linear interpolation) percentile definition, so numbers agree with numpy's.
        p50, p90, p95, p99 = np.percentile(x, [50, 90, 95, 99])
        return cls(
            p50=float(p50),
            p90=float(p90),
            p95=float(p95),
            p99=float(p99),
            max=float(x.max()),
            mean=float(x.mean()),
            std=float(x.std()),
        )

    @property
    def jitter_warning(self) -> bool:
        return self.p95 > JITTER_RATIO * self.p50

    @property
    def rate_hz_p50(self) -> float:
        """Control rate a loop could sustain at the median latency."""
        return 1000.0 / self.p50 if self.p50 > 0 else float("inf")

    @property
    def rate_hz_p99(self) -> float:
        """Control rate a loop could sustain at the 99th-percentile latency (the honest one)."""
        return 1000.0 / self.p99 if self.p99 > 0 else float("inf")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)
