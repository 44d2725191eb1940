"""The greedy pairing the kinds grade and compare by (reasoner/kinds/base.py): greedy_mean and greedy_min_mean
against a pairing worked out here cell by cell on the score matrix."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cosmos_reasoner_ros.reasoner.kinds.base import greedy_mean, greedy_min_mean

_MATRICES = st.integers(0, 5).flatmap(
    lambda n: st.integers(0, 5).flatmap(
        lambda m: st.lists(
            st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=m, max_size=m), min_size=n, max_size=n
        ).map(lambda rows: (n, m, rows))
    )
)


def _oracle(n: int, m: int, rows: list[list[float]]) -> list[float]:
    """Take the best remaining cell (ties: the later row, then the later column) until a side runs out; every
    item left unpaired scores 0."""
    free_a, free_b = set(range(n)), set(range(m))
    taken = []
    while free_a and free_b:
        s, i, j = max((rows[i][j], i, j) for i in free_a for j in free_b)
        taken.append(s)
        free_a.discard(i)
        free_b.discard(j)
    return taken + [0.0] * (len(free_a) + len(free_b))


@given(_MATRICES)
def test_greedy_mean_is_the_mean_over_every_item(case: tuple[int, int, list[list[float]]]) -> None:
    n, m, rows = case
    expected = _oracle(n, m, rows)
    got = greedy_mean(n, m, lambda i, j: rows[i][j])
    assert got == pytest.approx(sum(expected) / len(expected) if expected else 0.0, abs=1e-12)


@given(_MATRICES)
def test_greedy_min_mean_gives_the_worst_item_and_the_mean(case: tuple[int, int, list[list[float]]]) -> None:
    n, m, rows = case
    expected = _oracle(n, m, rows)
    if not expected:
        with pytest.raises(ValueError):
            greedy_min_mean(n, m, lambda i, j: rows[i][j])
        return
    low, mean = greedy_min_mean(n, m, lambda i, j: rows[i][j])
    assert low == min(expected)
    assert math.isclose(mean, sum(expected) / len(expected), abs_tol=1e-12)
    assert low <= mean + 1e-12


def test_unpaired_items_pull_the_mean_down() -> None:
    # one perfect pair and one item of the longer side left over: (1 + 0) / 2
    assert greedy_mean(1, 2, lambda i, j: 1.0 if j == 0 else 0.5) == 0.5
    assert greedy_min_mean(1, 2, lambda i, j: 1.0 if j == 0 else 0.5) == (0.0, 0.5)
