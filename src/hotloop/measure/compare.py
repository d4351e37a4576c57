"""The statistics behind `--baseline`: is a run faster, slower, or no different from an earlier one (R1.6)?

Everything here is scipy's (bootstrap, Mann-Whitney U, the exact binomial test and its Clopper-Pearson
interval, Wilson intervals, Fisher's exact test, the paired t-test); what is written here is only how they
are combined:

- Latency: the ratio current / baseline of a quantile (p50, p99), with a percentile-bootstrap 95 %
  interval from resampling each run's samples independently, and the two-sided Mann-Whitney U p-value
  of the two samples. A row is *slower* (or *faster*) when the change is detected (p < 0.05 and the
  p50 ratio's interval excludes 1) and the p50 ratio is beyond the threshold (> 1 + t, or < 1 / (1 + t)),
  the rule of asv's `compare --factor`: significant and large enough to matter. Anything else is
  *no detectable change*. Timed iterations are not independent draws (a machine drifts within a run),
  so the intervals are narrower than the truth; the threshold is what absorbs the drift.
- Success on the seeds both runs share: McNemar's exact test (the exact binomial test on the discordant
  pairs), and an interval for the difference in success rate conditional on the number of discordant
  pairs (the Clopper-Pearson interval for "succeeds only now" among them), which excludes zero exactly
  when the exact test's own interval does.
- Success on unpaired seeds: Newcombe's hybrid score interval for a difference of two proportions (from
  the two Wilson intervals) and Fisher's exact test.
- Task time, jerk, chunk jump on shared seeds: the mean paired difference with its t interval.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.records import plain_fields

ALPHA = 0.05
CONFIDENCE = 0.95
N_RESAMPLES = 2000  # the interval's ends move by well under 1 % between seeds at this many
# Memory for the resamples drawn at once: scipy draws `batch` resamples of the whole sample per call, so
# 2000 at once of a 1e6-sample run would ask 16 GB; batches keep it here whatever the samples' count.
RESAMPLE_BYTES = 64 << 20

SLOWER, FASTER, NO_CHANGE, NOT_COMPARABLE = "slower", "faster", "no detectable change", "n/a"


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval."""

    estimate: float
    low: float
    high: float

    def excludes(self, value: float) -> bool:
        return self.low > value or self.high < value

    def to_dict(self) -> dict[str, float]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high}


def _samples(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).ravel()
    return x[np.isfinite(x)]


def _batch(*samples: np.ndarray) -> int:
    """Resamples per vectorized call so that their arrays (float64, each sample's size) fit RESAMPLE_BYTES."""
    per_resample = 8 * sum(x.size for x in samples)
    return max(1, min(N_RESAMPLES, RESAMPLE_BYTES // max(1, per_resample)))


def _rng(seed: int) -> dict[str, Any]:
    """scipy >= 1.15 takes `rng`; older versions `random_state` (the project allows scipy 1.11)."""
    import scipy.stats

    name = "rng" if "rng" in inspect.signature(scipy.stats.bootstrap).parameters else "random_state"
    return {name: np.random.default_rng(seed)}


def _bootstrap(
    samples: tuple[np.ndarray, ...],
    statistic: Callable[..., Any],
    estimate: float,
    seed: int,
    confidence: float,
    **options: Any,
) -> Interval:
    """`estimate` with the percentile-bootstrap interval of `statistic` (vectorized) over `samples`, resampled
    `N_RESAMPLES` times in batches that fit RESAMPLE_BYTES; `options`: scipy's, e.g. paired=False."""
    import scipy.stats

    res = scipy.stats.bootstrap(
        samples,
        statistic,
        vectorized=True,
        method="percentile",
        n_resamples=N_RESAMPLES,
        batch=_batch(*samples),
        confidence_level=confidence,
        **options,
        **_rng(seed),
    )
    return Interval(estimate, float(res.confidence_interval.low), float(res.confidence_interval.high))


def quantile_interval(
    samples: Sequence[float] | np.ndarray, q: float, *, seed: int = 0, confidence: float = CONFIDENCE
) -> Interval:
    """The q-quantile of one run's samples with its percentile-bootstrap interval (the bars of
    `hotloop history --plot`)."""
    x = _samples(samples)
    if x.size == 0:
        return Interval(math.nan, math.nan, math.nan)
    estimate = float(np.quantile(x, q))
    if x.size < 2 or np.all(x == x[0]):
        return Interval(estimate, estimate, estimate)
    return _bootstrap((x,), lambda a, axis=-1: np.quantile(a, q, axis=axis), estimate, seed, confidence)


def quantile_ratio(
    baseline: Sequence[float] | np.ndarray,
    current: Sequence[float] | np.ndarray,
    q: float,
    *,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Interval:
    """quantile_q(current) / quantile_q(baseline) (> 1: slower now), with a percentile-bootstrap interval
    from resampling the two runs independently. NaN when the baseline's quantile is not positive (a
    stage that did not run), which compares nothing."""
    x, y = _samples(baseline), _samples(current)
    if x.size == 0 or y.size == 0:
        return Interval(math.nan, math.nan, math.nan)
    base = float(np.quantile(x, q))
    if base <= 0:
        return Interval(math.nan, math.nan, math.nan)
    estimate = float(np.quantile(y, q)) / base
    if x.size < 2 or y.size < 2:
        return Interval(estimate, math.nan, math.nan)

    def ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(np.quantile(b, q, axis=axis) / np.quantile(a, q, axis=axis))

    return _bootstrap((x, y), ratio, estimate, seed, confidence, paired=False)


def rank_test(baseline: Sequence[float] | np.ndarray, current: Sequence[float] | np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value (1.0 when it is undefined: a sample empty, or every value tied)."""
    import scipy.stats

    x, y = _samples(baseline), _samples(current)
    if x.size == 0 or y.size == 0:
        return 1.0
    p = float(scipy.stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)
    return p if math.isfinite(p) else 1.0


@dataclass(frozen=True)
class LatencyChange:
    """One stage (or the total) of two bench runs compared."""

    p50: Interval  # ratio current / baseline
    p99: Interval
    p_value: float  # Mann-Whitney U, two-sided
    verdict: str  # SLOWER, FASTER, NO_CHANGE, or NOT_COMPARABLE
    tail: str  # the same rule on the p99 ratio (its interval, without the rank test)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ratio_p50": self.p50.to_dict(),
            "ratio_p99": self.p99.to_dict(),
            "mann_whitney_p": self.p_value,
            "verdict": self.verdict,
            "tail": self.tail,
        }


def verdict(ratio: Interval, threshold: float, p_value: float = 0.0, alpha: float = ALPHA) -> str:
    """SLOWER / FASTER when the change is detected (p < alpha and the interval excludes 1) and the
    estimate is beyond the threshold; NO_CHANGE otherwise; NOT_COMPARABLE without an interval."""
    if not all(math.isfinite(v) for v in (ratio.estimate, ratio.low, ratio.high)):
        return NOT_COMPARABLE
    if p_value >= alpha or not ratio.excludes(1.0):
        return NO_CHANGE
    if ratio.estimate > 1.0 + threshold:
        return SLOWER
    if ratio.estimate < 1.0 / (1.0 + threshold):
        return FASTER
    return NO_CHANGE


def latency_change(
    baseline: Sequence[float] | np.ndarray,
    current: Sequence[float] | np.ndarray,
    threshold: float,
    *,
    seed: int = 0,
    alpha: float = ALPHA,
) -> LatencyChange:
    """Compare two runs' latency samples (ms) of one stage; the verdict is read at the median."""
    p50 = quantile_ratio(baseline, current, 0.5, seed=seed)
    p99 = quantile_ratio(baseline, current, 0.99, seed=seed + 1)
    p = rank_test(baseline, current)
    return LatencyChange(p50, p99, p, verdict(p50, threshold, p, alpha), verdict(p99, threshold, 0.0, alpha))


def mcnemar_exact(only_baseline: int, only_now: int) -> float:
    """McNemar's exact test: the two-sided exact binomial test of the discordant pairs against 1/2."""
    import scipy.stats

    n = only_baseline + only_now
    return 1.0 if n == 0 else float(scipy.stats.binomtest(only_now, n, 0.5).pvalue)


@dataclass(frozen=True)
class PairedSuccess:
    """Success on the seeds both runs share."""

    pairs: int
    both: int
    only_baseline: int
    only_now: int
    neither: int
    difference: Interval  # success rate now - baseline, over the pairs
    p_value: float  # McNemar's exact test

    def to_dict(self) -> dict[str, Any]:
        return {
            **plain_fields(self, until="neither"),
            "difference": self.difference.to_dict(),
            "mcnemar_p": self.p_value,
        }


def paired_success(
    baseline: Sequence[bool], current: Sequence[bool], confidence: float = CONFIDENCE
) -> PairedSuccess:
    """`baseline[i]` and `current[i]`: the outcome of the same seed in each run."""
    import scipy.stats

    if len(baseline) != len(current):
        raise ValueError(f"paired outcomes differ in length ({len(baseline)} and {len(current)})")
    b = np.asarray(baseline, dtype=bool)
    c = np.asarray(current, dtype=bool)
    n = int(b.size)
    only_b, only_c = int(np.sum(b & ~c)), int(np.sum(~b & c))
    discordant = only_b + only_c
    if n == 0:
        diff = Interval(math.nan, math.nan, math.nan)
    elif discordant == 0:
        diff = Interval(0.0, 0.0, 0.0)  # the runs agree on every seed: nothing to tell them apart by
    else:
        # Given the discordant pairs, "succeeds only now" is binomial; the difference in success rate is
        # discordant / n * (2 pi - 1), so pi's exact interval maps onto the difference's.
        ci = scipy.stats.binomtest(only_c, discordant).proportion_ci(confidence, method="exact")
        scale = discordant / n
        diff = Interval((only_c - only_b) / n, scale * (2 * ci.low - 1), scale * (2 * ci.high - 1))
    return PairedSuccess(
        pairs=n,
        both=int(np.sum(b & c)),
        only_baseline=only_b,
        only_now=only_c,
        neither=int(np.sum(~b & ~c)),
        difference=diff,
        p_value=mcnemar_exact(only_b, only_c),
    )


@dataclass(frozen=True)
class TwoProportions:
    """Success on unpaired seeds: k of n in each run."""

    baseline: tuple[int, int]
    current: tuple[int, int]
    difference: Interval  # rate now - baseline
    p_value: float  # Fisher's exact test

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": list(self.baseline),
            "current": list(self.current),
            "difference": self.difference.to_dict(),
            "fisher_p": self.p_value,
        }


def two_proportions(
    k_baseline: int, n_baseline: int, k_current: int, n_current: int, confidence: float = CONFIDENCE
) -> TwoProportions:
    """Newcombe's hybrid score interval (his method 10) for p_current - p_baseline, built from scipy's
    Wilson intervals, and Fisher's exact p-value."""
    import scipy.stats

    if n_baseline <= 0 or n_current <= 0:
        nan = Interval(math.nan, math.nan, math.nan)
        return TwoProportions((k_baseline, n_baseline), (k_current, n_current), nan, 1.0)
    p1, p2 = k_baseline / n_baseline, k_current / n_current
    w1 = scipy.stats.binomtest(k_baseline, n_baseline).proportion_ci(confidence, method="wilson")
    w2 = scipy.stats.binomtest(k_current, n_current).proportion_ci(confidence, method="wilson")
    d = p2 - p1
    low = d - math.sqrt((p2 - w2.low) ** 2 + (w1.high - p1) ** 2)
    high = d + math.sqrt((w2.high - p2) ** 2 + (p1 - w1.low) ** 2)
    table = [[k_baseline, n_baseline - k_baseline], [k_current, n_current - k_current]]
    p = float(scipy.stats.fisher_exact(table).pvalue)
    return TwoProportions((k_baseline, n_baseline), (k_current, n_current), Interval(d, low, high), p)


@dataclass(frozen=True)
class PairedDifference:
    """A per-seed metric on the seeds both runs share: the mean of (now - baseline)."""

    pairs: int
    baseline_mean: float
    current_mean: float
    difference: Interval
    p_value: float  # paired t-test

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "baseline_mean": self.baseline_mean,
            "current_mean": self.current_mean,
            "difference": self.difference.to_dict(),
            "t_test_p": self.p_value,
        }


def paired_difference(
    baseline: Sequence[float], current: Sequence[float], confidence: float = CONFIDENCE
) -> PairedDifference | None:
    """None with fewer than two pairs (no interval to give)."""
    import scipy.stats

    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(current, dtype=np.float64)
    if b.shape != c.shape:
        raise ValueError(f"paired values differ in length ({b.size} and {c.size})")
    if b.size < 2:
        return None
    d = c - b
    mean = float(d.mean())
    if np.all(d == d[0]):  # no spread (a deterministic metric that moved by the same amount everywhere)
        interval, p = Interval(mean, mean, mean), (1.0 if mean == 0 else 0.0)
    else:
        res = scipy.stats.ttest_rel(c, b)
        ci = res.confidence_interval(confidence)
        interval, p = Interval(mean, float(ci.low), float(ci.high)), float(res.pvalue)
    return PairedDifference(int(b.size), float(b.mean()), float(c.mean()), interval, p)
