"""Bootstrap intervals: seeded and deterministic, containing the value, collapsing where every request agrees,
about as wide as the normal approximation says for a share; the statistics agree with the nearest-rank
percentile every figure of the bag tools uses."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.bag.judge.metrics import percentile
from cosmos_reasoner_ros.bag.scores import Interval, bootstrap, statistic


def test_the_same_seed_gives_the_same_intervals_and_another_seed_others() -> None:
    rng = np.random.default_rng(3)
    columns = {"match": (rng.integers(0, 2, 200).astype(float), "mean"), "lat": (rng.random(200), "p95")}
    first = bootstrap(columns, "next_action", 1000, seed=0)
    assert first == bootstrap(columns, "next_action", 1000, seed=0)
    assert first != bootstrap(columns, "next_action", 1000, seed=1)
    assert first != bootstrap(columns, "caption", 1000, seed=0)  # each task its own stream


def test_a_share_is_about_as_uncertain_as_the_normal_approximation_says() -> None:
    values = np.array([1.0] * 200 + [0.0] * 200)
    i = bootstrap({"match": (values, "mean")}, "t", 4000)["match"]
    half = 1.96 * math.sqrt(0.25 / 400)  # 0.049
    assert i.value == 0.5
    assert i.low is not None and i.high is not None
    assert i.high - i.value == pytest.approx(half, abs=0.01) and i.value - i.low == pytest.approx(
        half, abs=0.01
    )


def test_agreeing_requests_single_requests_and_no_values() -> None:
    out = bootstrap(
        {
            "same": (np.array([0.7, 0.7, 0.7]), "mean"),
            "undefined": (np.array([math.nan, math.nan, math.nan]), "mean"),
            "some": (np.array([1.0, math.nan, 3.0]), "mean"),
        },
        "t",
    )
    same = out["same"]
    assert (same.value, same.low, same.high) == pytest.approx((0.7, 0.7, 0.7))
    assert same.low == same.value == same.high
    assert out["undefined"] == Interval(None, None, None)
    assert out["some"].value == 2.0 and out["some"].low == 1.0 and out["some"].high == 3.0
    # one request says nothing of the uncertainty: a value without an interval
    assert bootstrap({"one": (np.array([0.25]), "p50")}, "t")["one"] == Interval(0.25, None, None)
    assert bootstrap({"one": (np.array([0.25, math.nan]), "mean")}, "t")["one"] == Interval(0.25, None, None)
    assert bootstrap({"x": (np.array([1.0, 2.0]), "mean")}, "t", rounds=0)["x"] == Interval(1.5, 1.5, 1.5)
    assert bootstrap({"x": (np.array([]), "mean")}, "t")["x"] == Interval(None, None, None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 100, allow_nan=False), st.just(math.nan)), min_size=1, max_size=30))
def test_statistics_agree_with_the_nearest_rank_percentile(values: list[float]) -> None:
    finite = [v for v in values if not math.isnan(v)]
    array = np.array(values)
    for how, q in (("p50", 0.5), ("p95", 0.95)):
        got = float(statistic(array, how))
        assert (math.isnan(got) and not finite) or got == percentile(finite, q)
    mean = float(statistic(array, "mean"))
    assert (math.isnan(mean) and not finite) or mean == pytest.approx(sum(finite) / len(finite))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=2, max_size=40), st.integers(0, 5))
def test_an_interval_holds_its_value_and_stays_within_the_data(values: list[float], seed: int) -> None:
    i = bootstrap({"m": (np.array(values), "mean"), "p": (np.array(values), "p95")}, "t", 300, seed=seed)
    for interval in i.values():
        assert interval.low is not None and interval.high is not None and interval.value is not None
        assert min(values) - 1e-12 <= interval.low <= interval.value <= interval.high <= max(values) + 1e-12


def test_overlap() -> None:
    assert Interval(0.5, 0.4, 0.6).overlaps(Interval(0.65, 0.6, 0.7))
    assert not Interval(0.5, 0.4, 0.6).overlaps(Interval(0.8, 0.7, 0.9))
    assert Interval(None, None, None).overlaps(Interval(0.8, 0.7, 0.9))
