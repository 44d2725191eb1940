"""The pace an answer must keep, without any I/O: the first-token bound, the progress floor over a window, and
the allowance for the whole answer that these imply, measured on a clock that stops while the watching process
itself stands still. The client feeds it what arrives and cuts the request when it names a problem.

Tokens are not visible in a stream, only text pieces: vLLM sends one token per piece, or several in one with
`--stream-interval`, so a piece counts as its whole characters at CHARS_PER_TOKEN, at least one token (" word"
is one token, as a tokenizer makes it, not two).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque

CHARS_PER_TOKEN = 4  # characters of English text per token, for pieces that carry several tokens
MAX_CLOCK_STEP_S = 1.0  # the most the pace clock advances between two looks: a process that stood still for
# longer (a loaded robot computer, a debugger) does not blame the server for its own stall


@dataclasses.dataclass(frozen=True)
class PaceBounds:
    """What every working server keeps. A real Reasoner streams 100+ tokens/s on a GPU, a CPU vLLM a few;
    the first token can take seconds behind a long prefill or a queue. 0 switches a bound off."""

    first_token_s: float = 30.0  # from sending to the first token (reasoning or content)
    min_tokens_per_s: float = 1.0  # after the first token, averaged over window_s
    window_s: float = 10.0

    def __post_init__(self) -> None:
        values = (self.first_token_s, self.min_tokens_per_s, self.window_s)
        if not all(math.isfinite(v) and v >= 0 for v in values) or self.window_s <= 0:
            raise ValueError(f"pace bounds must be finite and >= 0 (window_s > 0), got {self}")

    def allowance_s(self, max_tokens: int) -> float:
        """The longest a whole answer may take: the first-token bound, then max_tokens at the floor (plus one
        window of slack); inf without a floor. A server at or above the floor ends within it."""
        if self.min_tokens_per_s <= 0:
            return math.inf
        return self.first_token_s + max_tokens / self.min_tokens_per_s + self.window_s


def piece_tokens(chars: int) -> int:
    """The tokens a streamed text piece of `chars` characters stands for: at least one."""
    return max(1, chars // CHARS_PER_TOKEN)


class PaceWatch:
    """One answer's pace. `look(now)` advances the clock, `text(now, chars)` records a piece carrying text,
    `body_started(now)` an unstreamed body whose headers arrived; `problem()` names a broken bound, or
    None."""

    def __init__(
        self,
        bounds: PaceBounds,
        max_tokens: int,
        start: float,
        streamed: bool = True,
        headers_within_s: float = math.inf,
    ) -> None:
        self.bounds = bounds
        self.streamed = streamed
        # Unstreamed: a server that sends nothing until its answer is whole (vLLM) is bounded by the read
        # timeout; its headers must come within it even when a server trickles them.
        self.headers_within_s = headers_within_s
        self.allowance_s = bounds.allowance_s(max_tokens)
        self.max_tokens = max_tokens
        self.clock = 0.0  # seconds on the pace clock since the request was sent
        self.first_token_at: float | None = None  # on the pace clock
        self.body_started_at: float | None = None
        self.tokens = 0
        self._last = start
        self._window: deque[tuple[float, int]] = deque()  # (pace clock, tokens) of recent pieces
        self._in_window = 0

    def look(self, now: float) -> None:
        step = max(0.0, now - self._last)
        self._last = max(self._last, now)
        self.clock += min(step, MAX_CLOCK_STEP_S)

    def text(self, now: float, chars: int) -> None:
        self.look(now)
        tokens = piece_tokens(chars)
        self.tokens += tokens
        if self.first_token_at is None:
            self.first_token_at = self.clock
        self._window.append((self.clock, tokens))
        self._in_window += tokens

    def body_started(self, now: float) -> None:
        self.look(now)
        if self.body_started_at is None:
            self.body_started_at = self.clock

    def window_tokens(self) -> int:
        """Tokens of the pieces within the last window_s on the pace clock."""
        start = self.clock - self.bounds.window_s
        while self._window and self._window[0][0] <= start:
            self._in_window -= self._window.popleft()[1]
        return self._in_window

    def problem(self) -> PaceProblem | None:
        b = self.bounds
        if self.clock > self.allowance_s:
            return PaceProblem(
                "allowance",
                f"the answer did not end within {self.allowance_s:g} s, the first-token bound plus "
                f"max_tokens {self.max_tokens} at the floor of {b.min_tokens_per_s:g} tokens/s "
                f"({self.tokens} tokens had arrived)",
            )
        if not self.streamed:
            # An unstreamed answer shows no progress until it is whole; once its headers are in, its body
            # (sent at once by a working server) must follow within the first-token bound.
            started = self.body_started_at
            if started is None and self.clock > self.headers_within_s:
                return PaceProblem("read_timeout", f"no answer within {self.headers_within_s:g} s")
            if b.first_token_s > 0 and started is not None and self.clock - started > b.first_token_s:
                return PaceProblem(
                    "first_token",
                    f"the answer's body did not arrive within {b.first_token_s:g} s of its headers",
                )
            return None
        if self.first_token_at is None:
            if b.first_token_s > 0 and self.clock > b.first_token_s:
                return PaceProblem("first_token", f"no first token within {b.first_token_s:g} s")
            return None
        if b.min_tokens_per_s > 0 and self.clock - self.first_token_at >= b.window_s:
            seen = self.window_tokens()
            floor = b.min_tokens_per_s * b.window_s
            if seen < floor:
                return PaceProblem(
                    "floor",
                    f"{seen} tokens in the last {b.window_s:g} s, under the floor of "
                    f"{b.min_tokens_per_s:g} tokens/s ({floor:g} in {b.window_s:g} s)",
                )
        return None


@dataclasses.dataclass(frozen=True)
class PaceProblem:
    """A broken bound: `bound` is "first_token" (no first token; unstreamed: no body after the headers),
    "floor", "allowance" or "read_timeout" (unstreamed: no headers); `message` says by how much."""

    bound: str
    message: str

    def __str__(self) -> str:
        return self.message
