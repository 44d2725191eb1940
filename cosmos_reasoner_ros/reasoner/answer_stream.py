"""One chat completion as the client hands it on (Completion), and the accumulation of a streamed or whole
answer into it: text, reasoning split off by the server (`reasoning` or `reasoning_content`, whole or as
deltas), usage, finish reasons, time to first token, and the size bound of its text."""

from __future__ import annotations

import dataclasses
from typing import Any

from cosmos_reasoner_ros.errors import AnswerTooLarge, BadResponse, ServerUnavailable
from cosmos_reasoner_ros.reasoner.request_builder import ChatRequest

__all__ = ["Accumulator", "Completion", "max_tokens_of"]

_DEFAULT_MAX_TOKENS = 16384  # a request that does not say (the package's always do)


@dataclasses.dataclass(frozen=True)
class Completion:
    text: str  # full content (reasoning included when the server has no reasoning parser)
    reasoning: str | None  # message.reasoning when the server split it
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    ttft_s: float  # 0.0 when not streamed
    finish_reason: str
    attempts: int = 1
    # Prompt tokens the server served from its prefix cache (usage.prompt_tokens_details.cached_tokens: vLLM
    # reports it with --enable-prompt-tokens-details); 0 when not reported.
    cached_tokens: int = 0


class Accumulator:
    """Streamed chunks to one Completion: text, server-split reasoning, usage, finish reason, TTFT."""

    def __init__(self, model: str, max_chars: int, max_tokens: int) -> None:
        self.model = model
        self.max_chars = max_chars  # text (content and reasoning) kept at most; past it: AnswerTooLarge
        self.max_tokens = max_tokens
        self.chars = 0
        self.over = False
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.finish_reason: str | None = None
        self.ttft_s = 0.0
        self.started = False
        self.choices_seen = False
        self.usage_seen = False
        self.unfinished: set[Any] = set()  # the indices of choices seen without their finish reason yet
        self.closed: set[Any] = set()  # those with it

    @property
    def finished(self) -> bool:
        """Whether every choice seen has its finish reason: the answer is whole, whatever follows."""
        return self.finish_reason is not None and not self.unfinished

    def take_usage(self, chunk: Any) -> None:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage_seen = True
            self.prompt_tokens = _count(getattr(usage, "prompt_tokens", 0))
            self.completion_tokens = _count(getattr(usage, "completion_tokens", 0))
            self.cached_tokens = _cached_tokens(usage)

    def add(self, chunk: Any, elapsed: float) -> list[int]:
        """Take one chunk; the characters of each text piece it carried. AnswerTooLarge once the text passes
        max_chars: what came up to the bound is kept (partial_text), nothing beyond it."""
        if getattr(chunk, "model", None):
            self.model = chunk.model
        self.take_usage(chunk)
        pieces: list[int] = []
        for choice in getattr(chunk, "choices", None) or []:
            self.choices_seen = True
            index = getattr(choice, "index", 0)
            if index in self.closed:
                continue  # a finished choice takes nothing more
            self.unfinished.add(index)
            delta = getattr(choice, "delta", None)
            for text, kept in (
                (_reasoning_of(delta), self.reasoning),
                (getattr(delta, "content", None), self.content),
            ):
                if text is None or text == "":
                    continue
                if not isinstance(text, str):
                    raise BadResponse(f"a streamed chunk carries {type(text).__name__}, not text")
                room = self.max_chars - self.chars
                if len(text) > room:
                    text, self.over = text[:room], True
                if text:
                    kept.append(text)
                    self.chars += len(text)
                    pieces.append(len(text))
            finish = getattr(choice, "finish_reason", None)
            if finish:
                self.finish_reason = str(finish)
                self.unfinished.discard(index)
                self.closed.add(index)
        if pieces and not self.started:
            self.started = True
            self.ttft_s = elapsed
        if self.over:
            raise self.too_large()
        return pieces

    def too_large(self) -> AnswerTooLarge:
        return AnswerTooLarge(
            f"the answer passed {self.max_chars} characters, its bound for max_tokens {self.max_tokens}; it "
            f"was cut there and its connection closed (the partial answer holds the first {self.max_chars})"
        )

    def partial_text(self) -> str:
        """The text so far, shaped like an unsplit answer even when the server splits reasoning off."""
        content = "".join(self.content)
        if not self.reasoning:
            return content
        reasoning = "".join(self.reasoning)
        return f"<think>\n{reasoning}\n</think>\n\n{content}" if self.content else f"<think>\n{reasoning}"

    def finish(self, latency_s: float) -> Completion:
        if not self.choices_seen:
            # As an unstreamed answer without choices: a server that answers, but not a chat completion.
            raise BadResponse(
                "the server's stream carried no choice (empty choices, or not a chat completion)"
            )
        if self.finish_reason is None:
            raise ServerUnavailable(
                "the stream ended before the server sent a finish reason (connection lost?)"
            )
        return Completion(
            text="".join(self.content),
            reasoning="".join(self.reasoning) if self.reasoning else None,
            model=self.model,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            latency_s=latency_s,
            ttft_s=self.ttft_s,
            finish_reason=self.finish_reason,
            cached_tokens=self.cached_tokens,
        )

    def from_response(self, response: Any, latency_s: float) -> Completion:
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list):
            # The SDK hands over the body as text when it is not JSON (an HTML error page of a proxy, ...).
            preview = str(response)[:120] if isinstance(response, str) else type(response).__name__
            raise BadResponse(f"the server's answer is not a chat completion: {preview!r}")
        if not choices:
            raise BadResponse("the server answered without any choice")
        choice = choices[0]
        if getattr(choice, "message", None) is None:
            raise BadResponse("the server's choice has no message")
        text = choice.message.content or ""
        reasoning = _reasoning_of(choice.message)
        if not isinstance(text, str):
            raise BadResponse(f"the server's message content is {type(text).__name__}, not text")
        if len(text) + len(reasoning or "") > self.max_chars:
            raise self.too_large()
        usage = response.usage
        return Completion(
            text=text,
            reasoning=reasoning,
            model=response.model or self.model,
            prompt_tokens=_count(getattr(usage, "prompt_tokens", 0)) if usage else 0,
            completion_tokens=_count(getattr(usage, "completion_tokens", 0)) if usage else 0,
            latency_s=latency_s,
            ttft_s=0.0,
            finish_reason=str(choice.finish_reason or ""),
            cached_tokens=_cached_tokens(usage) if usage else 0,
        )


def _count(value: Any) -> int:
    """A token count from a server's usage: a non-negative int, else 0 (a server's garbage is no count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _cached_tokens(usage: Any) -> int:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return int(cached) if isinstance(cached, int) and cached > 0 else 0


def _reasoning_of(message: Any) -> str | None:
    """vLLM's split-off reasoning: `reasoning` in current versions, `reasoning_content` in older ones."""
    for name in ("reasoning", "reasoning_content"):
        value = getattr(message, name, None)
        if isinstance(value, str) and value:
            return value
    return None


def max_tokens_of(request: ChatRequest) -> int:
    """The answer's token bound: the request's max_tokens, else the default of a request without one."""
    value = request.params.get("max_tokens")
    return value if isinstance(value, int) and value > 0 else _DEFAULT_MAX_TOKENS
