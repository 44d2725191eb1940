"""Do the 95 % intervals cover the truth about 95 % of the time at the sample sizes labelled runs have?
Shares: the exact coverage of every outcome of n Bernoulli(p) draws, weighted by its binomial probability
(the limit of infinitely many draws). Means: 4,000 seeded draws of n values from a normal, an exponential
(skewed) and a uniform distribution, the truth known. Below MIN_N the intervals are absent, by design.
Tolerances: the measured figures (bench/interval_coverage.py) with room for the draws' noise (+-0.7 pt)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from cosmos_reasoner_ros.bag.scores import MIN_N, interval_of

SIZES = (2, 5, 10, 30)
DRAWS = 4000


def _share_coverage(n: int, p: float) -> float:
    cover = 0.0
    for k in range(n + 1):
        i = interval_of(np.array([1.0] * k + [0.0] * (n - k)), "share")
        if i.low is not None and i.high is not None and i.low <= p <= i.high:
            cover += math.comb(n, k) * p**k * (1 - p) ** (n - k)
    return cover


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("p", (0.1, 0.5, 0.9))
def test_shares_are_covered_about_95_percent_of_the_time(n: int, p: float) -> None:
    cover = _share_coverage(n, p)
    if n < MIN_N:
        assert cover == 0.0  # no interval at all: nothing is claimed
    else:
        assert 0.92 <= cover <= 0.995, f"Wilson covers p={p} at n={n} {cover:.3f} of the time"


_DISTRIBUTIONS: dict[str, tuple[Callable[[np.random.Generator, int], np.ndarray], float, float]] = {
    # name: (draws, true mean, least coverage accepted at n >= MIN_N)
    "normal": (lambda g, n: g.normal(3.0, 2.0, (DRAWS, n)), 3.0, 0.935),
    "uniform": (lambda g, n: g.uniform(0.0, 1.0, (DRAWS, n)), 0.5, 0.93),
    "exponential": (lambda g, n: g.exponential(2.0, (DRAWS, n)), 2.0, 0.895),  # skewed: t's known shortfall
}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", sorted(_DISTRIBUTIONS))
def test_means_are_covered_about_95_percent_of_the_time(name: str, n: int) -> None:
    draw, truth, least = _DISTRIBUTIONS[name]
    samples = draw(np.random.default_rng([n, len(name)]), n)
    got = [interval_of(row, "mean") for row in samples]
    covered = [i.low is not None and i.high is not None and i.low <= truth <= i.high for i in got]
    cover = sum(covered) / DRAWS
    if n < MIN_N:
        assert cover == 0.0 and all(i.too_few for i in got)
    else:
        assert least <= cover <= 0.965, f"the t-interval covers the {name} mean at n={n} {cover:.3f}"


def test_the_percentile_bootstrap_this_replaced_fell_short() -> None:
    """Why the method changed: the percentile bootstrap's interval of a mean, at n = 10, normal draws."""
    g = np.random.default_rng(7)
    samples = g.normal(0.0, 1.0, (1000, 10))
    picks = g.integers(0, 10, (1000, 10))
    means = samples[:, picks].mean(axis=2)
    low, high = np.quantile(means, 0.025, axis=1), np.quantile(means, 0.975, axis=1)
    assert float(np.mean((low <= 0.0) & (high >= 0.0))) < 0.91
