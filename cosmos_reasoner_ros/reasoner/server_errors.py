"""What a failed call to the server means, as the errors.py kinds: unreachable or 502/503/504
server_unavailable (retried), other 5xx and error events in a stream server_error, a refused structured-output
grammar grammar, other 4xx rejected, an answer that is not a chat completion bad_response; with the server's
own message."""

from __future__ import annotations

import re
from collections.abc import Callable

import openai

from cosmos_reasoner_ros.errors import (
    BadResponse,
    GrammarError,
    ReasonerError,
    RequestRejected,
    RequestTimeout,
    ServerError,
    ServerUnavailable,
)
from cosmos_reasoner_ros.reasoner.request_builder import ChatRequest

__all__ = ["RetryableError", "classify", "grammar_failure", "server_message"]

_UNAVAILABLE_STATUS = (502, 503, 504)


class RetryableError(Exception):
    """An attempt failed in a way worth another attempt; `final` is raised when none is left."""

    def __init__(self, final: ReasonerError) -> None:
        super().__init__(str(final))
        self.final = final


def server_message(err: openai.APIStatusError) -> str:
    """The server's own error message from an OpenAI-style or vLLM-style error body."""
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if isinstance(body.get("message"), str):
            return str(body["message"])
    if isinstance(body, str) and body:
        return body
    try:
        return err.response.text or err.message
    except Exception:  # a streamed response that was never read
        return err.message


# Words of vLLM's own messages when its front end refuses a request's grammar (HTTP 400): "The provided JSON
# schema contains features not supported by xgrammar", "Invalid JSON grammar specification", "Failed to
# transform ... into a grammar", "Error in guidance grammar", "structural tag ...".
_GRAMMAR_WORDS = re.compile(r"grammar|json schema|xgrammar|guidance|structured output|structural.tag", re.I)


def grammar_failure(
    request: ChatRequest,
    failure: ReasonerError | RetryableError,
    started: bool,
    healthy: Callable[[], bool],
) -> GrammarError | None:
    """The failure as a GrammarError when it can only be the request's grammar: a request with structured
    output that failed before its first token with a server failure (HTTP 500, an error event, or a stream
    that ended without an answer or a finish reason: vLLM 0.26-0.31's way of ending a request whose grammar
    its engine could not compile) while the server stays healthy, or a 4xx whose message is about the
    grammar. A server failure while it is not healthy right after (`healthy`: ReasonerClient.health, /health
    or, on a server without it, /v1/models) is the server's own (an engine crash, an OOM, the watchdog
    restarting a frozen server): it keeps its kind and its retries."""
    if not request.structured or started:
        return None
    final = failure.final if isinstance(failure, RetryableError) else failure
    task = f"task {request.task}: " if request.task else ""
    if isinstance(final, RequestRejected):
        if _GRAMMAR_WORDS.search(str(final)):
            return GrammarError(f"{task}the server refused the request's structured output: {final}")
        return None
    server_failed = isinstance(final, ServerError) and final.status_code in (None, 500)
    ended_early = isinstance(final, ServerUnavailable) and "finish reason" in str(final)
    if not (server_failed or ended_early) or not healthy():
        return None
    if server_failed:
        return GrammarError(
            f"{task}the server failed on the request's structured output before its first token ({final}); "
            "vLLM logs the grammar backend's reason as 'Failed to compile grammar'"
        )
    return GrammarError(
        f"{task}the server ended the answer before its first token without a finish reason: how vLLM "
        "0.26-0.31 end a request whose grammar their engine could not compile (their log: 'Failed to "
        "compile grammar')"
    )


def classify(err: BaseException, where: str, mid_stream: bool = False) -> ReasonerError | RetryableError:
    """An SDK exception as one of ours; a RetryableError wraps those worth another attempt."""
    if isinstance(err, ReasonerError):
        return err
    if isinstance(err, openai.APITimeoutError):
        if type(err.__cause__).__name__ == "ConnectTimeout" and not mid_stream:
            return RetryableError(ServerUnavailable(f"connecting to {where} timed out"))
        return RequestTimeout("the server sent nothing within the read timeout")
    if isinstance(err, openai.APIConnectionError):
        if mid_stream:  # text already reached the caller: a fresh attempt would start it again
            return ServerUnavailable(f"connection to {where} lost during the answer")
        return RetryableError(ServerUnavailable(f"cannot reach {where}: {err.__cause__ or err}"))
    if isinstance(err, openai.APIStatusError):
        message = server_message(err)
        if err.status_code in _UNAVAILABLE_STATUS:
            return RetryableError(ServerUnavailable(f"HTTP {err.status_code}: {message}"))
        if err.status_code >= 500:
            return RetryableError(ServerError(f"HTTP {err.status_code}: {message}", err.status_code))
        return RequestRejected(message, err.status_code)
    if isinstance(err, openai.APIResponseValidationError):
        return BadResponse(f"the server's answer is not a chat completion: {err.message}")
    if isinstance(err, openai.APIError):  # an error event inside the stream: {"error": {"message", "code"}}
        body = err.body if isinstance(err.body, dict) else {}
        code = body.get("code")
        status = int(code) if isinstance(code, int) or (isinstance(code, str) and code.isdigit()) else None
        message = str(body.get("message") or err.message)
        if status is not None and 400 <= status < 500:
            return RequestRejected(message, status)
        return ServerError(f"HTTP {status}: {message}" if status else message, status)
    if isinstance(err, ValueError):  # json.JSONDecodeError, pydantic's ValidationError: a malformed body
        return BadResponse(f"the server's answer is not valid JSON: {err}")
    return ServerUnavailable(f"unexpected failure talking to {where}: {type(err).__name__}: {err}")
