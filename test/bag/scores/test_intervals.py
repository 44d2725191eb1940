"""Confidence intervals: deterministic, none below MIN_N values, never zero-width presented as certainty, each
method against an independent figure (Student's t against the printed table, Wilson against its closed form
worked by hand, order statistics against brute-force binomial sums); the statistics agree with the
nearest-rank percentile every figure of the bag tools uses."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.bag.judge.metrics import percentile
from cosmos_reasoner_ros.bag.scores import MIN_N, Interval, interval_of, intervals, statistic
from cosmos_reasoner_ros.bag.scores.intervals import order_interval, wilson
from cosmos_reasoner_ros.bag.scores.student_t import t_quantile

# Student's t 97.5 % quantiles as printed in any table (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2).
_T_TABLE = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262, 19: 2.093, 29: 2.045, 100: 1.984}


@pytest.mark.parametrize(("df", "printed"), sorted(_T_TABLE.items()))
def test_t_quantiles_match_the_printed_table(df: int, printed: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(printed, abs=6e-4)
    assert t_quantile(0.025, df) == pytest.approx(-printed, abs=6e-4)


def test_wilson_matches_its_worked_example() -> None:
    # 0 of 10 at 95 %: [0, z^2/(n+z^2)] = [0, 0.2775]; 10 of 10 mirrors it; 5 of 10: 0.5 -+ 0.2634
    assert wilson(0, 10, 0.95) == pytest.approx((0.0, 0.27753), abs=1e-5)
    assert wilson(10, 10, 0.95) == pytest.approx((0.72247, 1.0), abs=1e-5)
    assert wilson(5, 10, 0.95) == pytest.approx((0.23659, 0.76341), abs=1e-5)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 120), st.sampled_from([0.5, 0.95]))
@example(71, 0.95)
@example(72, 0.95)
@example(5, 0.5)
@example(6, 0.5)
def test_order_statistic_intervals_hold_their_coverage(n: int, q: float) -> None:
    """The oracle: the probability that x_(l) <= quantile < x_(u), summed term by term."""
    got = order_interval(np.arange(1.0, n + 1), q, 0.95)
    if got is None:  # then no pair of order statistics with tails <= 2.5 % each exists
        pmf = [math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(n + 1)]
        assert pmf[0] > 0.025 or pmf[n] > 0.025
        return
    low, high = int(got[0]), int(got[1])
    cover = sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(low, high))
    assert cover >= 0.95 - 1e-12


def test_a_p95_needs_72_answers_and_a_median_6_before_it_has_an_interval() -> None:
    rng = np.random.default_rng(1)
    assert interval_of(rng.random(71), "p95").low is None
    assert interval_of(rng.random(72), "p95").low is not None
    many = interval_of(rng.random(200), "p50")
    assert many.low is not None and many.high is not None and many.low < 0.5 < many.high


def test_nothing_is_random_the_same_values_give_the_same_intervals() -> None:
    rng = np.random.default_rng(3)
    columns = {"match": (rng.integers(0, 2, 200).astype(float), "share"), "lat": (rng.random(200), "p95")}
    assert intervals(columns) == intervals(columns)


def test_a_share_is_about_as_uncertain_as_the_normal_approximation_says() -> None:
    i = interval_of(np.array([1.0] * 200 + [0.0] * 200), "share")
    half = 1.96 * math.sqrt(0.25 / 400)  # 0.049
    assert i.value == 0.5 and i.low is not None and i.high is not None
    assert (i.high - 0.5, 0.5 - i.low) == pytest.approx((half, half), abs=0.002)


def test_below_min_n_there_is_a_value_and_no_interval() -> None:
    """Issue 38, finding 4: two answers gave [0.600, 0.684], the two values themselves."""
    for n in range(1, MIN_N):
        for how in ("mean", "share", "p50"):
            i = interval_of(np.array([0.6, 0.684] * n)[:n], how)
            assert i.low is None and i.high is None and i.n == n and i.too_few
            assert "too few labelled answers" in i.note
    assert interval_of(np.array([math.nan] * 3), "mean") == Interval(None, None, None, 0)
    assert interval_of(np.array([]), "mean") == Interval(None, None, None, 0)


def test_answers_that_all_score_alike_get_no_zero_width_interval() -> None:
    """Issue 38, finding 4: ADE 8.8 [8.8, 8.8] at n = 4 was presented as certainty."""
    exact = interval_of(np.full(MIN_N, 8.8), "mean")
    assert exact.value == pytest.approx(8.8) and exact.low is None and "scored alike" in exact.note
    perfect = interval_of(np.ones(MIN_N), "share")  # a share of 1.0: Wilson still says how sure
    assert perfect.value == 1.0 and perfect.low is not None and perfect.low < 0.75 and perfect.high == 1.0


def test_a_mean_gets_the_t_interval() -> None:
    values = np.arange(1.0, 11.0)  # mean 5.5, sd 3.0277
    i = interval_of(values, "mean")
    half = 2.262157 * 3.0276504 / math.sqrt(10)
    assert (i.low, i.high) == pytest.approx((5.5 - half, 5.5 + half), abs=1e-5)
    # a "share" that is not 0/1 values is a mean
    assert interval_of(values / 10, "share").low == pytest.approx((5.5 - half) / 10, abs=1e-6)


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
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=MIN_N, max_size=40))
def test_an_interval_holds_its_value(values: list[float]) -> None:
    for how in ("mean", "p50", "share"):
        i = interval_of(np.array(values), how)
        assert i.value is not None
        if i.low is not None and i.high is not None:
            assert i.low <= i.value <= i.high and i.low < i.high


def test_overlap() -> None:
    assert Interval(0.5, 0.4, 0.6).overlaps(Interval(0.65, 0.6, 0.7))
    assert not Interval(0.5, 0.4, 0.6).overlaps(Interval(0.8, 0.7, 0.9))
    assert Interval(None, None, None).overlaps(Interval(0.8, 0.7, 0.9))
    # enough answers all alike: their value against the other's interval; too few: nothing to compare
    exact = interval_of(np.zeros(MIN_N), "mean")
    assert not exact.overlaps(Interval(5.0, 4.0, 6.0)) and exact.overlaps(Interval(0.5, -0.5, 1.5))
    assert interval_of(np.zeros(MIN_N - 1), "mean").overlaps(Interval(5.0, 4.0, 6.0))
    assert all(
        Interval(a, a - 0.1, a + 0.1).overlaps(Interval(b, b - 0.1, b + 0.1)) == (abs(a - b) <= 0.2 + 1e-12)
        for a, b in itertools.product((0.1, 0.3, 0.5), repeat=2)
    )
