"""What a Reasoner client is configured with, checked: the server's URL (parameters.server_url's rule), the
model, the API key's variable, the timeouts and the pace every working server keeps, the size bound of an
answer, and the retries."""

from __future__ import annotations

import dataclasses
import math

from cosmos_reasoner_ros.parameters.server_url import DEFAULT_SERVER_URL, server_root, server_url_problem
from cosmos_reasoner_ros.reasoner.pace import PaceBounds

__all__ = ["ClientSettings"]


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    base_url: str = DEFAULT_SERVER_URL
    model: str = ""  # empty: the first model the server lists on /v1/models
    api_key_env: str = "OPENAI_API_KEY"  # the environment variable holding the key ("EMPTY" when unset)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 120.0  # longest silence between two bytes of the answer
    total_timeout_s: float | None = None  # longest whole request, retries included; None: no limit
    # The pace every working server keeps (pace.PaceBounds): the first token (reasoning or content) within
    # first_token_timeout_s of sending, and never later than read_timeout_s (0: read_timeout_s alone), then at
    # least min_tokens_per_s (0: no floor) averaged over progress_window_s; an unstreamed answer's body within
    # the first-token bound of its headers; the whole answer within the first-token bound plus max_tokens at
    # the floor. A vLLM server sends nothing before its first token, so the read timeout always bounded it:
    # the first-token bound extends that to servers that send bytes without a token (keep-alives, headers).
    # Here 0 (a caller's read_timeout_s keeps its meaning); the node's default is 30 s (node/parameters.py).
    first_token_timeout_s: float = 0.0
    min_tokens_per_s: float = 1.0
    progress_window_s: float = 10.0
    # An answer's text (reasoning included) is cut at the request's max_tokens times this many characters.
    max_chars_per_token: int = 32
    max_retries: int = 2  # extra attempts after connection errors and 5xx, never after 4xx, read timeouts,
    # malformed answers or anything that went wrong once text had reached the caller
    backoff_s: float = 0.5  # first wait between attempts, doubled each time
    backoff_max_s: float = 8.0
    health_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        # (credentials would go as Basic auth, not the key as a bearer token; file:// would open local files)
        if problem := server_url_problem(self.base_url):
            raise ValueError(f"base_url: {problem}")
        if (
            min(self.connect_timeout_s, self.read_timeout_s) <= 0
            or self.max_retries < 0
            or self.backoff_s < 0
        ):
            raise ValueError("timeouts must be > 0, max_retries and backoff_s >= 0")
        if not 0 <= self.first_token_timeout_s < math.inf:
            raise ValueError(
                f"first_token_timeout_s must be finite and >= 0, got {self.first_token_timeout_s}"
            )
        if self.total_timeout_s is not None and not self.total_timeout_s > 0:
            raise ValueError(f"total_timeout_s must be > 0 or None, got {self.total_timeout_s}")
        if self.max_chars_per_token < 1:
            raise ValueError(f"max_chars_per_token must be >= 1, got {self.max_chars_per_token}")
        self.pace  # noqa: B018 (checks the pace bounds)

    @property
    def pace(self) -> PaceBounds:
        return PaceBounds(self.first_token_bound_s, self.min_tokens_per_s, self.progress_window_s)

    @property
    def first_token_bound_s(self) -> float:
        first = self.first_token_timeout_s
        return min(first, self.read_timeout_s) if first > 0 else self.read_timeout_s

    @property
    def first_token_by_read_timeout(self) -> bool:
        """Whether the read timeout, not first_token_timeout_s, is the first-token bound: a server that says
        nothing ends as `timeout` either way, whichever of the two notices first."""
        return not 0 < self.first_token_timeout_s < self.read_timeout_s

    @property
    def server_url(self) -> str:
        """The server root (where vLLM's /health lives): base_url without its trailing /v1."""
        return server_root(self.base_url)
