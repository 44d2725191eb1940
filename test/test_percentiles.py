"""The package's one percentile (percentiles.py) against its definition, on generated samples: the nearest
rank is a value of the sample, at least a share q of the sample lies at or below it, and no smaller value of
the sample has that property. At 20 samples the p95 is the 19th, not the largest (one of the benchmarks'
former definitions)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from cosmos_reasoner_ros.percentiles import percentile

samples = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60)
shares = st.floats(0.0, 1.0, exclude_min=True)


@given(samples, shares)
def test_the_nearest_rank_by_its_definition(values: list[float], q: float) -> None:
    p = percentile(values, q)
    assert p in values
    n = len(values)
    assert sum(v <= p for v in values) >= math.ceil(q * n)
    smaller = [v for v in values if v < p]
    assert all(sum(w <= v for w in values) < math.ceil(q * n) for v in smaller)


def test_twenty_samples_and_none() -> None:
    values = [float(i) for i in range(1, 21)]
    assert percentile(values, 0.95) == 19.0
    assert percentile(values, 0.5) == 10.0
    assert percentile([], 0.95) == 0.0
