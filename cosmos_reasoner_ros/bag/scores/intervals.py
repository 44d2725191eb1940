"""Confidence intervals of a task's metrics over its labelled requests, each method chosen by its measured
coverage (bench/interval_coverage.py, test/bag/scores/test_coverage.py): the Wilson score interval for shares,
Student's t for means, distribution-free order statistics for percentiles. Deterministic (nothing is
resampled). Below MIN_N values there is no interval, and the leaderboard claims no difference."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from cosmos_reasoner_ros.bag.scores.student_t import t_quantile

__all__ = ["MIN_N", "TOO_FEW", "Interval", "interval_of", "intervals", "statistic"]

# The fewest values an interval is given from. Measured (bench/interval_coverage.py, 2,000 draws each):
# Student's t covers the mean of exponential draws 87 % of the time at n = 5 and 91 % at n = 10 (93 % at 30);
# Wilson's covers a Bernoulli(0.1) share 92 % at n = 5, 93 % at n = 10. At n = 10 both are within 4 points of
# 95 %; normal and uniform draws are within 1 point from n = 2 on.
MIN_N = 10
TOO_FEW = "too few labelled answers"
ALIKE = "scored alike"


@dataclass(frozen=True)
class Interval:
    """A metric's value over the requests and its confidence interval. value None: no request has it; low
    and high None: no interval (note says why). n: the values it came from (None: unknown, an old file)."""

    value: float | None
    low: float | None
    high: float | None
    n: int | None = None
    note: str = ""

    @property
    def too_few(self) -> bool:
        return self.n is not None and self.n < MIN_N

    def bounds(self) -> tuple[float, float] | None:
        """The interval; for enough answers that all scored alike, their one value (a run that is always
        exactly right differs from one whose interval lies away from it); None: nothing to compare with."""
        if self.low is not None and self.high is not None:
            return self.low, self.high
        if self.value is not None and not self.too_few and ALIKE in self.note:
            return self.value, self.value
        return None

    def overlaps(self, other: Interval) -> bool:
        mine, theirs = self.bounds(), other.bounds()
        if mine is None or theirs is None:
            return True  # nothing to tell them apart with
        return mine[0] <= theirs[1] and theirs[0] <= mine[1]


_QUANTILE = {"p50": 0.5, "p95": 0.95}


def statistic(values: np.ndarray, how: str) -> np.ndarray:
    """The statistic along the last axis, ignoring NaN: the mean (of a share too), or a nearest-rank
    percentile (the rule every figure of the bag tools uses); NaN where a row has no value."""
    finite = np.isfinite(values)
    count = finite.sum(axis=-1)
    if how in ("mean", "share"):
        total = np.where(finite, values, 0.0).sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)
    q = _QUANTILE[how]
    ordered = np.sort(np.where(finite, values, np.inf), axis=-1)
    rank = np.clip(np.ceil(q * count).astype(int) - 1, 0, max(values.shape[-1] - 1, 0))
    if not values.shape[-1]:
        return np.full(values.shape[:-1], np.nan)
    picked = np.take_along_axis(ordered, rank[..., None], axis=-1)[..., 0]
    return np.where(count > 0, picked, np.nan)


def wilson(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson's score interval of a share: never zero-width, inside [0, 1], good coverage at small n."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def _binomial_cdf(k: int, n: int, q: float) -> float:
    return sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k + 1)) if k >= 0 else 0.0


def order_interval(ordered: np.ndarray, q: float, confidence: float) -> tuple[float, float] | None:
    """The distribution-free interval [x_(l), x_(u)] of the q-quantile: it covers the true quantile with
    probability >= confidence whatever the distribution; None when n is too small to have one (for a p95,
    n < 72 at 95 %)."""
    n = len(ordered)
    tail = (1.0 - confidence) / 2.0
    low = max((k for k in range(1, n + 1) if _binomial_cdf(k - 1, n, q) <= tail), default=None)
    high = min((k for k in range(1, n + 1) if 1.0 - _binomial_cdf(k - 1, n, q) <= tail), default=None)
    if low is None or high is None:
        return None
    return float(ordered[low - 1]), float(ordered[high - 1])


def _is_share(finite: np.ndarray) -> bool:
    return bool(np.all((finite == 0.0) | (finite == 1.0)))


def interval_of(values: np.ndarray, how: str, confidence: float = 0.95) -> Interval:
    """values: one per request, NaN where undefined; how: mean | share | p50 | p95."""
    finite = np.sort(values[np.isfinite(values)])
    n = len(finite)
    if n == 0:
        return Interval(None, None, None, 0)
    value = float(statistic(finite, how))
    if n < MIN_N:
        return Interval(value, None, None, n, f"{TOO_FEW} for an interval (n = {n} < {MIN_N})")
    if how == "share" and _is_share(finite):
        low, high = wilson(int(finite.sum()), n, confidence)
        return Interval(value, min(low, value), max(high, value), n)
    alike = Interval(value, None, None, n, f"the {n} answers {ALIKE}: no spread to estimate from")
    if how in _QUANTILE:
        bounds = order_interval(finite, _QUANTILE[how], confidence)
        if bounds is None:
            return Interval(value, None, None, n, f"too few answers for an interval of a {how} (n = {n})")
        return alike if bounds[0] == bounds[1] else Interval(value, bounds[0], bounds[1], n)
    spread = float(finite.std(ddof=1))
    if spread == 0.0:
        return alike
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * spread / math.sqrt(n)
    return Interval(value, value - half, value + half, n)


def intervals(columns: Mapping[str, tuple[np.ndarray, str]], confidence: float = 0.95) -> dict[str, Interval]:
    """columns: metric -> (one value per request, NaN where undefined; statistic)."""
    return {metric: interval_of(values, how, confidence) for metric, (values, how) in columns.items()}
