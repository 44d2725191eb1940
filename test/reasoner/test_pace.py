"""The pace bounds without I/O: each bound, the clock that forgives the watcher's own stalls, and the watch
checked against a brute-force oracle over generated arrival sequences."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.reasoner.pace import (
    CHARS_PER_TOKEN,
    MAX_CLOCK_STEP_S,
    PaceBounds,
    PaceWatch,
    piece_tokens,
)

BOUNDS = PaceBounds(first_token_s=2.0, min_tokens_per_s=1.0, window_s=10.0)


def test_piece_tokens_count_characters_and_at_least_one() -> None:
    assert [piece_tokens(n) for n in (0, 1, 4, 5, 7, 8, 40)] == [1, 1, 1, 1, 1, 2, 10]


def test_no_first_token_within_the_bound() -> None:
    watch = PaceWatch(BOUNDS, 100, start=0.0)
    for t in range(1, 21):
        watch.look(t * 0.1)
    assert watch.problem() is None  # exactly 2 s
    watch.look(2.05)
    assert str(watch.problem()) == "no first token within 2 s"


def test_the_floor_counts_the_last_window_after_a_full_window() -> None:
    watch = PaceWatch(BOUNDS, 10_000, start=0.0)
    for t in range(11):  # the first token at 0 s, then one a second, the last at 10 s
        watch.text(float(t), 4)
    assert watch.problem() is None  # 10 tokens in (0, 10]: the floor exactly
    watch.look(10.5)
    assert watch.problem() is None
    watch.look(11.0)  # the token due at 11 s did not come
    assert str(watch.problem()) == "9 tokens in the last 10 s, under the floor of 1 tokens/s (10 in 10 s)"
    early = PaceWatch(BOUNDS, 10_000, start=0.0)
    early.text(0.0, 4)
    early.look(9.9)
    assert early.problem() is None  # no verdict before a whole window after the first token


def test_a_piece_of_many_characters_counts_as_many_tokens() -> None:
    """vLLM's --stream-interval sends several tokens in one piece: 40 characters every 5 s is 2 tokens/s."""
    watch = PaceWatch(BOUNDS, 10_000, start=0.0)
    for t in range(0, 31, 5):
        watch.text(float(t), 10 * CHARS_PER_TOKEN)
    assert watch.problem() is None


def test_the_allowance_ends_even_a_server_that_keeps_the_pace() -> None:
    bounds = PaceBounds(first_token_s=1.0, min_tokens_per_s=10.0, window_s=1.0)
    assert bounds.allowance_s(100) == pytest.approx(12.0)
    watch = PaceWatch(bounds, 100, start=0.0)
    t = 0.0
    while watch.problem() is None:
        t += 0.05
        watch.text(t, 100)  # 20 pieces/s of 25 tokens each: far above the floor, for ever
    assert t == pytest.approx(12.0, abs=0.06)
    assert str(watch.problem()).startswith("the answer did not end within 12 s")  # type: ignore[union-attr]


def test_an_unstreamed_body_must_follow_its_headers_within_the_first_token_bound() -> None:
    watch = PaceWatch(BOUNDS, 100, start=0.0, streamed=False)
    for t in range(1, 61):
        watch.look(t * 0.5)  # an unstreamed answer being generated: no token to see, no first-token bound
    assert watch.problem() is None
    watch.body_started(30.0)
    for t in range(1, 5):
        watch.look(30.0 + t * 0.5)
    assert watch.problem() is None  # 2 s
    watch.look(32.5)
    assert str(watch.problem()) == "the answer's body did not arrive within 2 s of its headers"


def test_an_unstreamed_answer_must_begin_within_the_read_timeout() -> None:
    """vLLM sends an unstreamed answer whole: nothing before it, so the read timeout bounds its start; headers
    trickled a byte at a time do not escape that any more."""
    watch = PaceWatch(BOUNDS, 4096, start=0.0, streamed=False, headers_within_s=5.0)
    for t in range(1, 11):
        watch.look(t * 0.5)
    assert watch.problem() is None  # 5 s
    watch.look(5.5)
    problem = watch.problem()
    assert problem is not None and (problem.bound, str(problem)) == ("read_timeout", "no answer within 5 s")


def test_bounds_switched_off() -> None:
    off = PaceBounds(first_token_s=0.0, min_tokens_per_s=0.0, window_s=1.0)
    assert off.allowance_s(4096) == math.inf
    watch = PaceWatch(off, 4096, start=0.0)
    watch.look(1e6)
    assert watch.problem() is None
    with pytest.raises(ValueError):
        PaceBounds(window_s=0.0)
    with pytest.raises(ValueError):
        PaceBounds(first_token_s=math.nan)


def test_a_stall_of_the_watching_process_is_not_held_against_the_server() -> None:
    """The process stood still 9 s (a loaded machine): the clock counts at most MAX_CLOCK_STEP_S of it."""
    watch = PaceWatch(BOUNDS, 100, start=0.0)
    watch.look(1.0)
    watch.look(10.0)
    assert watch.clock == pytest.approx(1.0 + MAX_CLOCK_STEP_S)
    assert watch.problem() is None


# A brute-force oracle: the same rules, written as directly as they are stated in the docs, recomputing the
# window from every piece at every look.


def _oracle(bounds: PaceBounds, max_tokens: int, streamed: bool, steps: list[tuple[float, int]]) -> list[str]:
    """For each step (a look after dt seconds; chars >= 0: a text piece, -1: nothing, -2: an unstreamed
    body's headers), which bound is broken: '', 'allowance', 'first', 'floor' or 'body'."""
    clock, pieces, first, body, out = 0.0, [], None, None, []
    allowance = (
        bounds.first_token_s + max_tokens / bounds.min_tokens_per_s + bounds.window_s
        if bounds.min_tokens_per_s > 0
        else math.inf
    )
    for dt, chars in steps:
        clock += min(dt, MAX_CLOCK_STEP_S)
        if chars >= 0:
            pieces.append((clock, max(1, math.floor(chars / CHARS_PER_TOKEN))))
            first = clock if first is None else first
        if chars == -2 and body is None:
            body = clock
        if clock > allowance:
            out.append("allowance")
        elif not streamed:
            late = body is not None and bounds.first_token_s > 0 and clock - body > bounds.first_token_s
            out.append("body" if late else "")
        elif first is None:
            out.append("first" if bounds.first_token_s > 0 and clock > bounds.first_token_s else "")
        elif bounds.min_tokens_per_s > 0 and clock - first >= bounds.window_s:
            seen = sum(t for c, t in pieces if c > clock - bounds.window_s)
            out.append("floor" if seen < bounds.min_tokens_per_s * bounds.window_s else "")
        else:
            out.append("")
    return out


_WORDS = {
    "allowance": "did not end",
    "first": "no first token",
    "floor": "under the floor",
    "body": "its headers",
}

steps = st.lists(
    st.tuples(
        st.sampled_from([0.0, 1 / 64, 0.125, 0.25, 0.5, 0.875, 2.0, 32.0]),  # exact in binary: no rounding
        st.sampled_from([-1, -1, -2, 0, 1, 3, 4, 5, 17, 400]),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(
    steps=steps,
    first=st.sampled_from([0.0, 0.5, 2.0]),
    floor=st.sampled_from([0.0, 0.5, 3.0, 20.0]),
    window=st.sampled_from([0.25, 1.0, 3.0]),
    max_tokens=st.sampled_from([1, 16, 64]),
    streamed=st.booleans(),
)
@example(steps=[(0.5, 4)] * 30 + [(2.0, -1)], first=2.0, floor=3.0, window=1.0, max_tokens=64, streamed=True)
def test_the_watch_agrees_with_the_brute_force_oracle(
    steps: list[tuple[float, int]], first: float, floor: float, window: float, max_tokens: int, streamed: bool
) -> None:
    bounds = PaceBounds(first_token_s=first, min_tokens_per_s=floor, window_s=window)
    watch = PaceWatch(bounds, max_tokens, start=100.0, streamed=streamed)
    now = 100.0
    expected = _oracle(bounds, max_tokens, streamed, steps)
    for (dt, chars), verdict in zip(steps, expected, strict=True):
        now += dt
        if chars >= 0:
            watch.text(now, chars)
        elif chars == -2:
            watch.body_started(now)
        else:
            watch.look(now)
        problem = watch.problem()
        if not verdict:
            assert problem is None
        else:
            assert problem is not None and _WORDS[verdict] in str(problem), (verdict, problem)
            assert problem.bound == {"first": "first_token", "body": "first_token"}.get(verdict, verdict)


def test_the_issues_trickle_is_cut_one_window_after_its_first_token_with_the_defaults() -> None:
    """One word (" word": one token, five characters) every 2 s, the default bounds: cut 10 s after the first
    token. Found by bench/request_bounds.py: counted at ceil(5 / 4) = 2 tokens a piece, the trickle sat on
    the floor and ran 46 s."""
    watch = PaceWatch(PaceBounds(), 4096, start=0.0)
    t = 0.0
    watch.text(t, 4)  # "word"
    while watch.problem() is None:
        t += 0.02
        if round(t / 0.02) % 100 == 0:  # every 2 s
            watch.text(t, 5)
        else:
            watch.look(t)
    assert t == pytest.approx(10.0, abs=0.05)
    assert str(watch.problem()) == "5 tokens in the last 10 s, under the floor of 1 tokens/s (10 in 10 s)"
