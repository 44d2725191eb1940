"""Percentile-bootstrap confidence intervals over a task's labelled requests, seeded and deterministic: the
same records give the same intervals on any machine. All of a task's metrics share the resampled request sets
(paired resampling), done with numpy at once rather than round by round."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "bootstrap", "statistic"]


@dataclass(frozen=True)
class Interval:
    """A metric's value over the requests and its bootstrap interval; None where no request has the value
    (the interval: where fewer than two have it)."""

    value: float | None
    low: float | None
    high: float | None

    def overlaps(self, other: Interval) -> bool:
        if None in (self.low, self.high, other.low, other.high):
            return True  # nothing to tell them apart with
        assert self.low is not None and self.high is not None and other.low is not None
        assert other.high is not None
        return self.low <= other.high and other.low <= self.high


_QUANTILE = {"p50": 0.5, "p95": 0.95}


def statistic(values: np.ndarray, how: str) -> np.ndarray:
    """The statistic along the last axis, ignoring NaN: the mean, or a nearest-rank percentile (the rule every
    figure of the bag tools uses); NaN where a row has no value."""
    finite = np.isfinite(values)
    if values.shape[-1] and finite.all():  # the common case, without the per-row counts
        if how == "mean":
            return np.asarray(values.mean(axis=-1))
        k = max(0, math.ceil(_QUANTILE[how] * values.shape[-1]) - 1)
        return np.asarray(np.partition(values, k, axis=-1)[..., k])
    count = finite.sum(axis=-1)
    if how == "mean":
        total = np.where(finite, values, 0.0).sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)
    q = _QUANTILE[how]
    ordered = np.sort(np.where(finite, values, np.inf), axis=-1)
    rank = np.clip(np.ceil(q * count).astype(int) - 1, 0, values.shape[-1] - 1)
    picked = np.take_along_axis(ordered, rank[..., None], axis=-1)[..., 0]
    return np.where(count > 0, picked, np.nan)


def _seed(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])


def bootstrap(
    columns: Mapping[str, tuple[np.ndarray, str]],
    name: str,
    rounds: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Interval]:
    """columns: metric -> (one value per request, NaN where undefined; statistic). The same request sets for
    every metric; the generator is seeded by `seed` and `name` (the task), so a task's intervals do not depend
    on which other tasks the run asked."""
    if not columns:
        return {}
    n = len(next(iter(columns.values()))[0])
    if n == 0:
        return {metric: Interval(None, None, None) for metric in columns}
    picks = _seed(seed, name).integers(0, n, size=(rounds, n)) if rounds > 0 else None
    alpha = (1.0 - confidence) / 2.0
    out: dict[str, Interval] = {}
    for metric, (values, how) in columns.items():
        value = float(statistic(values, how))
        if math.isnan(value):
            out[metric] = Interval(None, None, None)
            continue
        finite = values[np.isfinite(values)]
        if len(finite) < 2:  # one request says nothing of how far to trust it: no interval
            out[metric] = Interval(value, None, None)
            continue
        if picks is None or finite.min() == finite.max():  # every request agrees: nothing to resample
            out[metric] = Interval(value, value, value)
            continue
        stats = statistic(values[picks], how)
        stats = stats[np.isfinite(stats)]
        low, high = np.quantile(stats, [alpha, 1.0 - alpha]) if len(stats) else (value, value)
        out[metric] = Interval(value, float(min(low, value)), float(max(high, value)))
    return out
