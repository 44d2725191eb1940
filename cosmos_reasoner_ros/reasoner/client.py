"""The Reasoner client on the OpenAI SDK: health, model discovery, timeouts, bounded retries, streaming with
time to first token, and cancellation of a request in flight. Failures come out as the errors.py types only,
one kind per failure whether the answer is streamed or not: unreachable or 502/503/504 server_unavailable,
other 5xx (and error events in a stream) server_error, 4xx rejected, an answer that is not a chat completion
bad_response, silence or the total limit timeout, a pace below the bounds (pace.py) too_slow, an answer past
its size bound answer_too_large. Reasoning split off by the server (`reasoning` or `reasoning_content`, whole
or as deltas) is kept apart from the content.

Every request ends within a bound whatever the server does: the thread that waits for it watches its pace and
size and, when one is broken, cuts its connection (connections.py), so that no blocking read outlives it.
A stream ends when its answer does: once every choice has its finish reason, the rest of the stream (the usage
chunk, `[DONE]`) is waited for at most STREAM_TAIL_S, then dropped with its connection; nothing in it (more
text, garbage, an error event, silence) can discard the finished answer.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import openai

from cosmos_reasoner_ros.errors import (
    ReasonerError,
    RequestCancelled,
    RequestTimeout,
    ServerTooSlow,
    ServerUnavailable,
)
from cosmos_reasoner_ros.parameters.server_url import (
    normalise_server_url,
    shown_url,
)
from cosmos_reasoner_ros.reasoner import connections
from cosmos_reasoner_ros.reasoner.answer_stream import Accumulator, Completion, max_tokens_of
from cosmos_reasoner_ros.reasoner.client_settings import ClientSettings
from cosmos_reasoner_ros.reasoner.pace import PaceWatch
from cosmos_reasoner_ros.reasoner.request_builder import ChatRequest
from cosmos_reasoner_ros.reasoner.server_errors import (
    RetryableError,
    classify,
    grammar_failure,
)

# ClientSettings (client_settings.py) and Completion (answer_stream.py) are imported from here too.
__all__ = ["NO_HEALTH_ROUTE", "STREAM_TAIL_S", "ClientSettings", "Completion", "ReasonerClient"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_POLL_S = 0.02  # how often a waiting caller looks at its cancel event, the pace and the size
_UNAVAILABLE_STATUS = (502, 503, 504)
_QUEUE_CHUNKS = 256  # streamed chunks parsed ahead of the waiting thread at most (the worker then waits)
# The size bound of an answer's bytes on the wire, beside its text's (max_tokens x max_chars_per_token): a
# streamed token comes in an SSE event of 150-300 bytes of JSON; an unstreamed body escapes each character of
# the text in at most 6 bytes (\uXXXX). Both plus a slack for the envelope.
_STREAM_BYTES_PER_TOKEN = 1024
_BODY_BYTES_PER_CHAR = 6
_WIRE_SLACK_BYTES = 1 << 20
_DISCOVERY_BYTES = 1 << 20  # /v1/models: a list of model cards
# What a server without a /health route answers there (one with the OpenAI endpoints only: TensorRT
# Edge-LLM's, a proxy): its readiness is then read from /v1/models instead (ReasonerClient.health).
NO_HEALTH_ROUTE = (404, 405, 501)
# How long a finished stream's rest is waited for: vLLM sends its usage chunk and `[DONE]` right after the
# finish chunk, in the same write or the next; a server that sends neither (nor closes) costs this much, and
# the answer then carries no token counts (0: unknown, as from a server that never sends usage).
STREAM_TAIL_S = 0.5


class ReasonerClient:
    """One server, one model. Thread-safe: several requests may run at once from different threads."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._model = settings.model
        self._model_lock = threading.Lock()
        # Where readiness is read: "/health" (vLLM) until the server answers there as one without that route,
        # then "/models" under base_url until that fails once (health()).
        self._readiness = "/health"
        # The SDK's own retries are off: this class retries itself so that it can tell 4xx from 5xx, stop on
        # cancellation, and keep to total_timeout_s.
        self._sdk = openai.OpenAI(
            base_url=settings.base_url,
            api_key=os.environ.get(settings.api_key_env) or "EMPTY",
            timeout=openai.Timeout(settings.read_timeout_s, connect=settings.connect_timeout_s),
            max_retries=0,
            http_client=connections.http_client(),
        )

    def close(self) -> None:
        self._sdk.close()

    def __enter__(self) -> ReasonerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def readiness_url(self) -> str:
        """The URL health() reads now: {server}/health, or {base_url}/models on a server without /health."""
        if self._readiness == "/health":
            return self.settings.server_url + "/health"
        return normalise_server_url(self.settings.base_url) + "/models"

    def health(self) -> bool:
        """Whether the server is ready, each probe within health_timeout_s: GET {server}/health answers 200
        (vLLM's readiness); on a server without that route (404, 405 or 501 there: only the OpenAI endpoints)
        GET {base_url}/models answers 200 with at least one model, and once it has, /v1/models alone is asked
        from then on. Once /v1/models fails, /health is asked first again: the server that comes back may be
        another (a vLLM)."""
        if self._readiness == "/models":
            if self._models_ready():
                return True
            self._readiness = "/health"
            return False
        status = self._health_status()
        if status not in NO_HEALTH_ROUTE:
            return status == 200
        ready = self._models_ready()
        if ready:
            self._readiness = "/models"
            _log.info(
                "%s/health answered %d: readiness is read from /v1/models",
                shown_url(self.settings.server_url),
                status,
            )
        return ready

    def _health_status(self) -> int | None:
        """GET {server}/health's status; None when it did not answer (refused, timed out, not HTTP)."""
        url = self.settings.server_url + "/health"
        try:
            # The scheme is checked in ClientSettings (http/https only), so urlopen cannot open local files.
            with urllib.request.urlopen(url, timeout=self.settings.health_timeout_s) as response:  # noqa: S310
                return int(response.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except (OSError, ValueError):  # URLError, timeouts and refused connections are OSErrors
            return None

    def _models_ready(self) -> bool:
        """GET {base_url}/models (with the API key, as the SDK sends it) answers 200 with a model list that is
        not empty (a server still loading lists none or refuses)."""
        url = (
            normalise_server_url(self.settings.base_url) + "/models"
        )  # http(s) only: checked in ClientSettings
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self._sdk.api_key}"})  # noqa: S310
        timeout = self.settings.health_timeout_s
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                if int(response.status) != 200:
                    return False
                models = json.loads(response.read(_DISCOVERY_BYTES)).get("data")
        except (OSError, ValueError, AttributeError):  # HTTPError is an OSError; a body that is not a list
            return False
        return isinstance(models, list) and len(models) > 0

    def server_version(self, timeout_s: float | None = None) -> str | None:
        """The server's vLLM version (GET {server}/version, which every vLLM release 0.19-0.34 serves), or
        None when it does not answer with one (down, another kind of server)."""
        url = self.settings.server_url + "/version"
        try:
            timeout = self.settings.health_timeout_s if timeout_s is None else timeout_s
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (http(s), checked)
                version = json.loads(response.read(4096)).get("version")
        except (OSError, ValueError, AttributeError):
            return None
        return version if isinstance(version, str) and 0 < len(version) <= 64 else None

    def wait_ready(
        self, timeout_s: float, poll_s: float = 0.5, cancel: threading.Event | None = None
    ) -> None:
        """Return once the server is ready (health()); ServerUnavailable after timeout_s, RequestCancelled as
        soon as `cancel` is set (a request's deadline or cancellation must not wait for the server to come
        back)."""
        deadline = time.monotonic() + timeout_s
        stop = cancel or threading.Event()
        while not self.health():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServerUnavailable(
                    f"{self.settings.server_url} not healthy after {timeout_s:.1f} s "
                    f"({shown_url(self.readiness_url)} did not answer as ready)"
                )
            if stop.wait(min(poll_s, remaining)):
                raise RequestCancelled("cancelled while waiting for the server to become healthy")

    def model_id(self) -> str:
        """The configured model, else the first one on /v1/models (asked once, then remembered)."""
        with self._model_lock:
            if not self._model:
                models = self._retrying(lambda _: self._discover(), None, time.monotonic())
                ids = [m.id for m in models.data]
                if not ids:
                    raise ServerUnavailable(f"{self.settings.base_url}/models lists no model")
                self._model = ids[0]
            return self._model

    def complete(
        self,
        request: ChatRequest,
        *,
        stream: bool = True,
        on_text: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Completion:
        """Send one chat request. on_text gets the accumulated partial text (streaming only), in the caller's
        thread; setting `cancel` makes this return RequestCancelled within a few tens of milliseconds."""
        model = self.model_id()  # before the clock starts: latency and TTFT are the request's own
        start = time.monotonic()
        attempts = 0

        def attempt(number: int) -> Completion:
            nonlocal attempts
            attempts = number
            return self._attempt(request, model, stream, on_text, cancel, start)

        completion = self._retrying(attempt, cancel, start)
        return dataclasses.replace(completion, attempts=attempts)

    def _deadline_left(self, start: float) -> float:
        if self.settings.total_timeout_s is None:
            return math.inf
        return self.settings.total_timeout_s - (time.monotonic() - start)

    def _retrying(self, call: Callable[[int], _T], cancel: threading.Event | None, start: float) -> _T:
        attempt = 0
        while True:
            if cancel is not None and cancel.is_set():
                raise RequestCancelled("cancelled before the request was sent")
            attempt += 1
            try:
                return call(attempt)
            except RetryableError as retry:
                failure = retry.final
            except openai.OpenAIError as err:  # calls made in this thread (model discovery)
                classified = classify(err, self.settings.base_url)
                if not isinstance(classified, RetryableError):
                    raise classified from err
                failure = classified.final
            if attempt > self.settings.max_retries:
                raise failure
            delay = min(self.settings.backoff_s * 2 ** (attempt - 1), self.settings.backoff_max_s)
            if delay >= self._deadline_left(start):
                raise failure
            _log.warning("attempt %d failed (%s); retrying in %.2f s", attempt, failure, delay)
            if cancel is not None and cancel.wait(delay):
                raise RequestCancelled("cancelled while waiting to retry")
            if cancel is None:
                time.sleep(delay)

    def _discover(self) -> Any:
        """GET /v1/models on a line of its own, cut when it has not answered within the first-token bound (the
        read timeout when that is off): a server that trickles its headers must not hold the first request."""
        line = connections.Line(_DISCOVERY_BYTES, "model list")
        done: queue.Queue[tuple[str, Any]] = queue.Queue()

        def work() -> None:
            try:
                with connections.using(line):
                    done.put(("models", self._sdk.models.list()))
            except Exception as err:  # handed to the caller's thread
                done.put(("error", err))

        threading.Thread(target=work, name="reasoner-models", daemon=True).start()
        limit = self.settings.first_token_bound_s
        try:
            kind, payload = done.get(timeout=limit)
        except queue.Empty:
            raise ServerTooSlow(
                f"{self.settings.base_url}/models did not answer within {limit:g} s; its connection was cut"
            ) from None
        finally:
            line.cut()
        if kind == "error":
            raise payload
        return payload

    def _attempt(
        self,
        request: ChatRequest,
        model: str,
        stream: bool,
        on_text: Callable[[str], None] | None,
        cancel: threading.Event | None,
        start: float,
    ) -> Completion:
        # The SDK call blocks in socket reads, so it runs in a worker that hands chunks over a queue; this
        # thread stays free to notice cancellation, deadlines, the pace and the size, and ends the request by
        # cutting its connection (the worker's read returns at once, and a streaming server stops generating).
        events: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=_QUEUE_CHUNKS)
        abort = threading.Event()
        max_tokens = max_tokens_of(request)
        max_chars = max_tokens * self.settings.max_chars_per_token
        wire = (
            max_tokens * _STREAM_BYTES_PER_TOKEN if stream else max_chars * _BODY_BYTES_PER_CHAR
        ) + _WIRE_SLACK_BYTES
        line = connections.Line(wire)
        pace = PaceWatch(
            self.settings.pace,
            max_tokens,
            time.monotonic(),
            streamed=stream,
            headers_within_s=self.settings.read_timeout_s,
        )
        worker = threading.Thread(
            target=self._work,
            args=(_request_kwargs(request, model, stream), stream, events, abort, line),
            name="reasoner-request",
            daemon=True,
        )
        worker.start()
        acc = Accumulator(model, max_chars, max_tokens)
        finished_at: float | None = None  # when every choice had its finish reason: the answer is whole
        try:
            while True:
                kind, payload = self._next_event(events, cancel, start, finished_at)
                now = time.monotonic()
                if finished_at is not None:  # the answer is whole: only its usage is waited for
                    if kind == "chunk":
                        acc.take_usage(payload)
                    over = now >= finished_at + STREAM_TAIL_S or self._deadline_left(start) <= 0
                    if over or acc.usage_seen or kind in ("end", "error"):
                        return acc.finish(now - start)  # the rest is dropped with the connection (finally)
                    continue
                pace.look(now)
                if kind == "chunk":
                    _take_chunk(acc, pace, payload, now, now - start, on_text)
                    if acc.finished:
                        finished_at = now
                        if acc.usage_seen:  # the finish chunk carried the usage: nothing more to wait for
                            return acc.finish(now - start)
                        continue  # its pace no longer matters
                elif kind:
                    return self._last_event(kind, payload, acc, request, now - start)
                self._check_pace(pace, line, now)
        finally:
            abort.set()
            line.cut()

    def _next_event(
        self,
        events: queue.Queue[tuple[str, Any]],
        cancel: threading.Event | None,
        start: float,
        finished_at: float | None,
    ) -> tuple[str, Any]:
        """The worker's next event, ("", None) when none came within the poll; raises when the request was
        cancelled or ran past its total limit before its answer was whole."""
        if cancel is not None and cancel.is_set():
            raise RequestCancelled("cancelled while the request was in flight")
        left = self._deadline_left(start)
        if left <= 0 and finished_at is None:
            limit = self.settings.total_timeout_s
            raise RequestTimeout(f"no complete answer within {limit:g} s, the request's total limit")
        tail_ends = math.inf if finished_at is None else finished_at + STREAM_TAIL_S
        tail_left = tail_ends - time.monotonic()
        try:  # what is queued is taken first, also past a bound (a stalled watcher loses nothing)
            return events.get(timeout=max(0.0, min(_POLL_S, left, tail_left)))
        except queue.Empty:
            return "", None

    def _last_event(
        self, kind: str, payload: Any, acc: Accumulator, request: ChatRequest, elapsed_s: float
    ) -> Completion:
        """The answer from the worker's last event (a whole response, or the stream's end); raises the
        failure the event carries."""
        if kind == "response":
            return acc.from_response(payload, elapsed_s)
        if kind == "end":
            try:
                return acc.finish(elapsed_s)
            except ServerUnavailable as ended:
                raise (grammar_failure(request, ended, acc.started, self.health) or ended) from None
        if isinstance(payload, ReasonerError):  # kind == "error": the line's byte limit
            raise payload
        failure = classify(payload, self.settings.base_url, mid_stream=acc.started)
        raise grammar_failure(request, failure, acc.started, self.health) or failure from payload

    def _check_pace(self, pace: PaceWatch, line: connections.Line, now: float) -> None:
        """Raises when the server keeps no working pace: RequestTimeout for the read timeout's bound,
        ServerTooSlow for the others."""
        if line.headers_received:
            pace.body_started(now)
        problem = pace.problem()
        if problem is None:
            return
        by_read_timeout = problem.bound == "first_token" and self.settings.first_token_by_read_timeout
        if by_read_timeout or problem.bound == "read_timeout":
            raise RequestTimeout(
                f"{problem} (request_timeout_s; {line.received} bytes of answer received, "
                "none a token); the request was cut and its connection closed"
            )
        raise ServerTooSlow(
            f"the server is too slow: {problem} ({line.received} bytes of answer received); "
            "the request was cut and its connection closed"
        )

    def _work(
        self,
        kwargs: dict[str, Any],
        stream: bool,
        events: queue.Queue[tuple[str, Any]],
        abort: threading.Event,
        line: connections.Line,
    ) -> None:
        sdk: Any = self._sdk  # the overloads of create() do not help with keyword arguments built at run time
        try:
            with connections.using(line):
                result = sdk.chat.completions.create(**kwargs)
                if not stream:
                    _hand(events, ("response", result), abort)
                    return
                with result:
                    for chunk in result:
                        if not _hand(events, ("chunk", chunk), abort):
                            return
            _hand(events, ("end", None), abort)
        except Exception as err:  # handed to the caller's thread, which classifies it
            _hand(events, ("error", err), abort)


def _hand(events: queue.Queue[tuple[str, Any]], item: tuple[str, Any], abort: threading.Event) -> bool:
    """Put an item for the waiting thread, waiting while the queue is full; False once it stopped waiting."""
    while not abort.is_set():
        try:
            events.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _request_kwargs(request: ChatRequest, model: str, stream: bool) -> dict[str, Any]:
    """The SDK call's arguments: the request's messages and parameters, and the stream's usage asked for."""
    kwargs: dict[str, Any] = {"model": model, "messages": request.messages, **request.params}
    if stream:
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
    return kwargs


def _take_chunk(
    acc: Accumulator,
    pace: PaceWatch,
    payload: Any,
    now: float,
    elapsed_s: float,
    on_text: Callable[[str], None] | None,
) -> None:
    """One streamed chunk into the answer and the pace, the partial text handed to on_text when it grew."""
    # The text is copied for on_text once a chunk: quadratic in the chunks, which the line's byte limit
    # bounds (about 1 s of copying for the worst a server can send under it).
    grew = False
    try:
        for chars in acc.add(payload, elapsed_s):
            pace.text(now, chars)
            grew = True
    finally:  # past the size bound too: the text up to the bound is the partial answer
        if (grew or acc.over) and on_text is not None:
            on_text(acc.partial_text())
