"""runs.capped: a summary shows the first items of a kind, then one line counting the rest."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cosmos_reasoner_ros.bag.runs.capped import capped


@given(lines=st.lists(st.text(max_size=8)), limit=st.integers(min_value=0, max_value=12))
def test_the_first_lines_then_how_many_more(lines: list[str], limit: int) -> None:
    shown = capped(lines, limit, "more (see x)")
    hidden = len(lines) - limit
    if hidden <= 0:
        assert shown == lines
    else:
        assert shown[:limit] == lines[:limit] and len(shown) == limit + 1
        assert shown[-1] == f"  ... and {hidden} more (see x)"
