"""A scripted OpenAI-compatible chat-completions server (stdlib only) for tests, benchmarks, bag evaluation.

It answers with chosen texts, errors, delays and dropped connections, streams SSE chunks like vLLM, and
records every request body so tests can assert on what the client sent. Server-wide behaviours (constructor
arguments): `refuse_grammars` (fail structured output as a vLLM release does), `mm_limits` (media items per
prompt, as vLLM's --limit-mm-per-prompt: more is refused with HTTP 400 and vLLM's message).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import select
import signal
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}
_POLL_S = 0.05  # how often a waiting answer looks at the server stopping and the client leaving
_HUGE_PIECE = 16 * 1024  # bytes per streamed piece of a huge answer
_HUGE_TEXT = ("lorem ipsum dolor sit amet " * (_HUGE_PIECE // 27 + 1))[:_HUGE_PIECE]
_HUGE_MARK = "@@huge-answer@@"  # where a huge unstreamed answer's generated content goes in its body


@dataclass(frozen=True)
class ScriptedReply:
    """One scripted answer. Defaults answer at once; each field below adds one behaviour of a real or broken
    server, streamed and unstreamed alike unless it says otherwise. Every wait ends as soon as the server
    stops or the client goes away (counted in `ScriptedServer.disconnects`): no behaviour blocks `stop()`.

    Timing:
    - `delay_s`: nothing at all for this long, then the answer (a prefill or a queue behind a silent server).
    - `first_token_delay_s` (slow first token): the headers (and, streamed, the role chunk, which carries no
      token) go out at once, then this wait before the first token (unstreamed: before the body).
    - `chunk_delay_s` (trickle): between streamed chunks: one token every N s with a text of many words.
    - `keepalive_s` (comments only): after the headers, only SSE comment lines (`: keep-alive`) for this
      long, one every `keepalive_interval_s`, then the answer; unstreamed, a space (whitespace JSON allows
      before the body) each interval, the body then delimited by closing the connection.
    - `header_byte_delay_s` (slow headers): the status line and headers written one byte at a time, this
      long between bytes.
    - `body_byte_delay_s` (byte trickle): every byte of the body written alone, this long between bytes.
    - `hang`: read the request, then send nothing until the client leaves or the server stops.
    Size and shape:
    - `huge_answer_bytes` (huge answer): the content is this many bytes of generated words (never held in
      the script, nor whole in the server's memory), streamed in 16 KiB pieces or sent as one body; replaces
      `text`.
    - `chunks`: the number of streamed content pieces of `text`; 0: one per word.
    Failures:
    - `status` != 200 (4xx, 5xx): an OpenAI-style error body {"error": {"message": error_message, ...}}.
    - `garbage` (non-empty): these bytes (UTF-8) instead of the answer, with `status`, as
      `text/event-stream` to a streamed request and `application/json` to an unstreamed one; then closed.
    - `drop_connection` (disconnect): the connection closed without a byte of answer.
    - `drop_after_chunks`: streamed, the connection closed after this many text chunks.
    - `cut_after_bytes` (truncated): the connection closed after this many bytes of the body (an unstreamed
      body's Content-Length still announces all of it; a stream may be cut inside an event).
    - `stream_error`: an error event in the stream after the text, in place of its finish chunk (and usage
      chunk), then `[DONE]`: how vLLM ends a streamed answer that failed during generation.
    After the finish chunk (streamed):
    - `after_finish`: what follows the finish chunk, in place of vLLM's usage chunk (when asked) and `[DONE]`;
      steps in order, each after `after_finish_delay_s`, then the connection closed: "usage" (the usage
      chunk), "done" (`[DONE]`), "text" (one more content chunk, which no client should take), "garbage" (a
      data line that is not JSON), "error" (an error event), "hang" (nothing more until the client leaves).
      None: as vLLM; () closes the connection right after the finish chunk.
    """

    text: str = "<think>\nscripted\n</think>\n\nscripted answer"
    status: int = 200
    error_message: str = ""
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    finish_reason: str = "stop"
    prompt_tokens: int = 100
    drop_connection: bool = False
    reasoning: str | None = None  # sent as message.reasoning, like vLLM's --reasoning-parser
    chunks: int = 0
    drop_after_chunks: int = 0
    stream_error: str = ""
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens (None: no details, as vLLM
    # without --enable-prompt-tokens-details)
    first_token_delay_s: float = 0.0
    keepalive_s: float = 0.0
    keepalive_interval_s: float = 0.5
    header_byte_delay_s: float = 0.0
    body_byte_delay_s: float = 0.0
    hang: bool = False
    huge_answer_bytes: int = 0
    garbage: str = ""
    cut_after_bytes: int = 0
    after_finish: tuple[str, ...] | None = None
    after_finish_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.after_finish is not None:  # a reply file's list
            object.__setattr__(self, "after_finish", tuple(self.after_finish))
            unknown = set(self.after_finish) - set(AFTER_FINISH_STEPS)
            if unknown:
                steps = ", ".join(AFTER_FINISH_STEPS)
                raise ValueError(f"after_finish steps: {steps}; got {sorted(unknown)}")
        if self.keepalive_interval_s <= 0:
            raise ValueError(f"keepalive_interval_s must be > 0, got {self.keepalive_interval_s}")
        waits = (self.delay_s, self.chunk_delay_s, self.first_token_delay_s, self.keepalive_s)
        waits += (self.after_finish_delay_s,)
        if min(*waits, self.header_byte_delay_s, self.body_byte_delay_s) < 0:
            raise ValueError("delays must be >= 0")
        if min(self.huge_answer_bytes, self.cut_after_bytes, self.chunks, self.drop_after_chunks) < 0:
            raise ValueError("sizes and counts must be >= 0")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptedReply:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown ScriptedReply fields: {sorted(unknown)}")
        return cls(**data)


AFTER_FINISH_STEPS = ("usage", "done", "text", "garbage", "error", "hang")
ReplySource = Sequence[ScriptedReply] | Callable[[dict[str, Any]], ScriptedReply]
# How a vLLM release fails a request whose grammar its engine cannot compile (vLLM accepts it first):
# 0.26-0.31 stream a role chunk and `[DONE]` (no finish reason, no error event), 0.32 and later a role chunk,
# an error event and `[DONE]`; both answer an unstreamed request with HTTP 500 "Internal server error".
GRAMMAR_FAILURES = ("vllm-0.26", "vllm-0.32")


def split_text(text: str, pieces: int = 0) -> list[str]:
    """Cut text into streamed pieces: one per word (whitespace kept with the word) or `pieces` equal parts."""
    if not text:
        return []
    if pieces > 0:
        size = max(1, -(-len(text) // pieces))
        return [text[i : i + size] for i in range(0, len(text), size)]
    out: list[str] = []
    start = 0
    for i in range(1, len(text)):
        if text[i].isspace() and not text[i - 1].isspace():
            out.append(text[start:i])
            start = i
    out.append(text[start:])
    return out


def media_counts(body: dict[str, Any]) -> dict[str, int]:
    """A request's media items by modality: its video_url parts as "video", its image_url parts as "image"."""
    counts: dict[str, int] = {}
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("video_url", "image_url"):
                modality = kind.removesuffix("_url")
                counts[modality] = counts.get(modality, 0) + 1
    return counts


def request_text(body: dict[str, Any]) -> str:
    """All text parts of a request's messages, joined: what rules in a reply file match against."""
    parts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(
                p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
            )
    return "\n".join(parts)


class ScriptedServer:
    """Threading HTTP server on 127.0.0.1 (port 0 = any free port) answering from a script of replies."""

    def __init__(
        self,
        replies: ReplySource = (),
        default: ScriptedReply | None = None,
        model: str = "scripted",
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
        refuse_grammars: str = "",
        mm_limits: dict[str, int] | None = None,
    ) -> None:
        if refuse_grammars and refuse_grammars not in GRAMMAR_FAILURES:
            raise ValueError(
                f"refuse_grammars: one of {', '.join(GRAMMAR_FAILURES)}, got {refuse_grammars!r}"
            )
        self.refuse_grammars = refuse_grammars  # fail every request with structured output, as that release
        # Most media items per prompt by modality ("video", "image"), as vLLM's --limit-mm-per-prompt
        # (NVIDIA's Nano on Thor: {"image": 1, "video": 0}): a request with more is recorded, consumes no
        # scripted reply and is answered HTTP 400 with vLLM's message. Tests may change it while it runs.
        self.mm_limits = dict(mm_limits or {})
        self.mm_refused = 0  # requests refused for their media
        # POST /tokenize: the prompt's tokens (one per character); with the thinking switch, a prompt rendered
        # with chat_template_kwargs enable_thinking false ends in an empty think block, as Qwen3's template.
        self.thinking_switch = True
        self.version = ""  # GET /version answers {"version": ...} when set, like vLLM; 404 otherwise
        self.model = model
        self.record = record  # False: count requests without keeping their bodies (long soaks)
        self.request_count = 0
        self.default = default or ScriptedReply()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # the HTTP headers of each recorded request
        self.health_status = 200  # tests flip it to 503 to exercise readiness waits
        # A server with the OpenAI endpoints only: no /health route, answered with this status (404, 405,
        # 501); 0: /health as vLLM's. Readiness is then /v1/models: models_status (not 200: not ready).
        self.no_health = 0
        self.models_status = 200
        self.get_paths: list[str] = []  # the path of every GET, in order (when record)
        self.disconnects = 0  # answers the client closed before their end (cancellation reaches the server)
        self._chooser: Callable[[dict[str, Any]], ScriptedReply] | None = None
        self._queue: deque[ScriptedReply] = deque()
        if callable(replies):
            self._chooser = replies
        else:
            self._queue.extend(replies)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._answering: set[socket.socket] = set()  # connections with an answer under way: cut at stop()
        self._httpd = _Server((host, port), _make_handler(self))
        self._thread: threading.Thread | None = None
        bound_host, bound_port = self._httpd.server_address[:2]
        self.host = str(bound_host)
        self.port = int(bound_port)
        self.url = f"http://{self.host}:{self.port}"
        self.base_url = self.url + "/v1"

    def push(self, *replies: ScriptedReply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def next_reply(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> ScriptedReply:
        with self._lock:
            self._arrival(body, headers)
            if self._chooser is not None:
                return self._chooser(body)
            return self._queue.popleft() if self._queue else self.default

    def media_refusal(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> str:
        """vLLM's message refusing the request for its media items (mm_limits), recorded as a request; "" when
        the request is within the limits (then not recorded here: next_reply does)."""
        counts = media_counts(body)
        with self._lock:
            for modality, limit in self.mm_limits.items():
                if counts.get(modality, 0) > limit:
                    self._arrival(body, headers)
                    self.mm_refused += 1
                    # vllm/multimodal/processing (0.19-0.34): the model takes more than the server allows.
                    return (
                        f"At most {limit} {modality}(s) may be provided in one prompt. Set "
                        "`--limit-mm-per-prompt` to increase this limit."
                    )
        return ""

    def _arrival(self, body: dict[str, Any], headers: dict[str, str] | None) -> None:
        self.request_count += 1  # the caller holds the lock
        if self.record:
            self.requests.append(body)
            self.headers.append(headers or {})
        self._arrived.notify_all()

    def wait_requests(self, count: int, timeout_s: float) -> bool:
        """Block until at least `count` chat requests arrived (True) or the timeout passed (False)."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self.request_count >= count, timeout_s)

    def start(self) -> ScriptedServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="scripted-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; every answer under way ends at once (its connection shut, whatever it was doing)."""
        self._stopping.set()
        with self._lock:
            answering = list(self._answering)
        for conn in answering:  # unblocks a write to a client that does not read
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sleep(self, seconds: float) -> bool:
        """Sleep unless the server stops first; True when the server is stopping."""
        if seconds > 0:
            return self._stopping.wait(seconds)
        return self._stopping.is_set()

    def _answer_started(self, conn: socket.socket) -> None:
        with self._lock:
            self._answering.add(conn)
        if self._stopping.is_set():  # stop() may have looked before this connection was added
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _answer_ended(self, conn: socket.socket, client_left: bool) -> None:
        with self._lock:
            self._answering.discard(conn)
            self.disconnects += client_left


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a storm of concurrent requests must not be refused
    clients_gone = 0  # connections a client closed or reset under a request (a node stopped or killed)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that leaves mid-request (a node process that exited, a cancelled stream) is a client's
        # right, not a server fault: counted, without socketserver's traceback on stderr (a test of a CLI that
        # reads its own stderr for "Traceback" would read the server's). Anything else is printed as before.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            self.clients_gone += 1
            return
        super().handle_error(request, client_address)


def _make_handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        scripted = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    scripted: ScriptedServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY, Nagle plus delayed ACKs add 40 ms to
    # every keep-alive answer.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if self.scripted.record:
            self.scripted.get_paths.append(path)
        if path == "/health" and self.scripted.no_health:
            self._send_json(self.scripted.no_health, _error_body(self.scripted.no_health, f"no route {path}"))
        elif path == "/v1/models" and self.scripted.models_status != 200:
            self._send_json(self.scripted.models_status, _error_body(self.scripted.models_status, "loading"))
        elif path == "/health":
            self._send_json(
                self.scripted.health_status,
                {}
                if self.scripted.health_status == 200
                else _error_body(self.scripted.health_status, "not ready"),
            )
        elif path == "/version" and self.scripted.version:
            self._send_json(200, {"version": self.scripted.version})
        elif path == "/v1/models":
            model = {
                "id": self.scripted.model,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "scripted",
                "root": self.scripted.model,
                "max_model_len": 4096,
            }
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_json(404, _error_body(404, f"no route {path}"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path == "/tokenize":
            self._tokenize(raw)
            return
        if path != "/v1/chat/completions":
            self._send_json(404, _error_body(404, f"no route {path}"))
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as err:
            self._send_json(400, _error_body(400, f"invalid JSON body: {err}"))
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        refusal = self.scripted.media_refusal(body, headers)
        if refusal:
            self._send_json(400, _error_body(400, refusal))
            return
        reply = self.scripted.next_reply(body, headers)
        self._reply = reply
        self._sent = 0
        self.scripted._answer_started(self.connection)
        client_left = False
        try:
            self._answer(reply, body)
        except _Ended as ended:
            client_left = ended.client_left
            self._drop()
        except OSError:  # BrokenPipeError, ConnectionResetError: the client went away (cancellation)
            client_left = not self.scripted._stopping.is_set()  # else stop() shut the connection
            self._drop()
        finally:
            self.scripted._answer_ended(self.connection, client_left)

    def _answer(self, reply: ScriptedReply, body: dict[str, Any]) -> None:
        self._wait(reply.delay_s)
        if reply.hang:
            self._wait(math.inf)
        if reply.drop_connection:
            raise _Ended()
        stream = bool(body.get("stream"))
        if self.scripted.refuse_grammars and (
            (body.get("structured_outputs") or {}).get("json") is not None or body.get("response_format")
        ):
            self._fail_grammar(stream)
        elif reply.garbage:
            self._garbage(reply, stream)
        elif reply.status != 200:
            payload = json.dumps(
                _error_body(reply.status, reply.error_message or f"error {reply.status}")
            ).encode()
            self._head(
                reply.status, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
            )
            self._body(payload)
        elif stream:
            self._stream(reply, bool((body.get("stream_options") or {}).get("include_usage")))
        else:
            self._unstreamed(reply)

    def _stream(self, reply: ScriptedReply, include_usage: bool) -> None:
        self._head(
            200,
            [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("Connection", "close")],
        )
        self.close_connection = True
        self._keepalive(reply, b": keep-alive\n\n")
        texts = 0
        usage: dict[str, Any] = {}
        for index, event in enumerate(_stream_events(reply, self.scripted.model, True)):
            finished = bool(event.get("choices")) and event["choices"][0]["finish_reason"] is not None
            if reply.stream_error and (finished or not event.get("choices")):
                break  # the error event replaces the finish and usage chunks
            if not event.get("choices"):
                usage = event  # the last event
                if not include_usage or reply.after_finish is not None:
                    break
            self._body(b"data: " + json.dumps(event).encode() + b"\n\n")
            delta = event["choices"][0]["delta"] if event.get("choices") else {}
            texts += bool(delta.get("content") or delta.get("reasoning"))
            if reply.drop_after_chunks and texts >= reply.drop_after_chunks:
                raise _Ended()
            if index == 0:  # the role chunk: no token yet
                self._wait(reply.first_token_delay_s)
            if event.get("choices"):
                self._wait(reply.chunk_delay_s)
        if reply.stream_error:
            self._body(b"data: " + json.dumps(_error_body(500, reply.stream_error)).encode() + b"\n\n")
        if reply.after_finish is None or reply.stream_error:
            self._body(b"data: [DONE]\n\n")
            return
        for step in reply.after_finish:
            self._wait(reply.after_finish_delay_s)
            self._after_finish(step, usage)

    def _after_finish(self, step: str, usage: dict[str, Any]) -> None:
        """One step of `after_finish`; `usage` is the usage chunk vLLM would send."""
        if step == "hang":
            self._wait(math.inf)
        more = {"index": 0, "delta": {"content": " more"}, "finish_reason": None}
        event: Any = {
            "usage": usage,
            "done": "[DONE]",
            "text": {**{k: v for k, v in usage.items() if k != "usage"}, "choices": [more]},
            "garbage": "{not json",
            "error": _error_body(500, "an error after the finish"),
        }[step]
        data = event if isinstance(event, str) else json.dumps(event)
        self._body(b"data: " + data.encode() + b"\n\n")

    def _unstreamed(self, reply: ScriptedReply) -> None:
        huge = reply.huge_answer_bytes
        payload = json.dumps(_completion_body(reply, self.scripted.model, _HUGE_MARK if huge else None))
        before, _, after = (
            payload.encode().partition(_HUGE_MARK.encode()) if huge else (payload.encode(), b"", b"")
        )
        headers = [("Content-Type", "application/json")]
        if reply.keepalive_s > 0:  # spaces of unknown number first: the body ends when the connection closes
            headers.append(("Connection", "close"))
            self.close_connection = True
        else:
            headers.append(("Content-Length", str(len(before) + huge + len(after))))
        self._head(200, headers)
        self._keepalive(reply, b" ")
        self._wait(reply.first_token_delay_s)
        self._body(before)
        for piece in _huge_pieces(huge):
            self._body(piece.encode())
        self._body(after)

    def _garbage(self, reply: ScriptedReply, stream: bool) -> None:
        data = reply.garbage.encode("utf-8", "surrogatepass")
        kind = "text/event-stream" if stream else "application/json"
        self._head(
            reply.status,
            [("Content-Type", kind), ("Content-Length", str(len(data))), ("Connection", "close")],
        )
        self.close_connection = True
        self._body(data)

    def _keepalive(self, reply: ScriptedReply, beat: bytes) -> None:
        end = time.monotonic() + reply.keepalive_s
        while (left := end - time.monotonic()) > 0:
            self._body(beat)
            self._wait(min(reply.keepalive_interval_s, left))

    def _head(self, status: int, headers: list[tuple[str, str]]) -> None:
        """The status line and headers, at once or one byte at a time (header_byte_delay_s)."""
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Scripted"
        lines = [f"HTTP/1.1 {status} {phrase}", *(f"{name}: {value}" for name, value in headers)]
        self._write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), self._reply.header_byte_delay_s)

    def _body(self, data: bytes) -> None:
        """Bytes of the body, at once or one at a time (body_byte_delay_s), cut at cut_after_bytes."""
        cut = self._reply.cut_after_bytes
        if cut and self._sent + len(data) > cut:
            self._write(data[: cut - self._sent], self._reply.body_byte_delay_s)
            self._sent = cut
            raise _Ended()
        self._write(data, self._reply.body_byte_delay_s)
        self._sent += len(data)

    def _write(self, data: bytes, byte_delay_s: float) -> None:
        if byte_delay_s <= 0:
            self.wfile.write(data)
            self.wfile.flush()
            return
        for i in range(len(data)):
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            self._wait(byte_delay_s)

    def _wait(self, seconds: float) -> None:
        """Wait `seconds` (inf: for ever); _Ended at once when the server stops or the client goes away."""
        end = time.monotonic() + seconds
        while True:
            if self.scripted._stopping.is_set():
                raise _Ended()
            left = end - time.monotonic()
            if left <= 0:
                return
            if self._client_left(min(_POLL_S, left)):
                raise _Ended(client_left=not self.scripted._stopping.is_set())

    def _client_left(self, timeout_s: float) -> bool:
        """Whether the client closed its end, looking for up to timeout_s (stop()'s shutdown wakes it)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], timeout_s)
            if not readable:
                return False
            if self.connection.recv(1, socket.MSG_PEEK) == b"":
                return True
        except (OSError, ValueError):
            return True
        self.scripted.sleep(timeout_s)  # bytes of a next request wait their turn: no busy loop on them
        return False

    def _tokenize(self, raw: bytes) -> None:
        body = json.loads(raw or b"{}")
        text = request_text(body) + ("<|im_start|>assistant\n" if body.get("add_generation_prompt") else "")
        if (
            self.scripted.thinking_switch
            and (body.get("chat_template_kwargs") or {}).get("enable_thinking") is False
        ):
            text += "<think>\n\n</think>\n\n"
        tokens = [ord(c) for c in text]
        self._send_json(200, {"count": len(tokens), "max_model_len": 4096, "tokens": tokens})

    def _fail_grammar(self, stream: bool) -> None:
        """As vLLM fails a request whose grammar its engine could not compile (GRAMMAR_FAILURES)."""
        if not stream:
            payload = json.dumps(_error_body(500, "Internal server error")).encode()
            self._head(500, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
            self._body(payload)
            return
        self._head(200, [("Content-Type", "text/event-stream"), ("Connection", "close")])
        self.close_connection = True
        role = next(_stream_events(ScriptedReply(text=""), self.scripted.model, False))
        self._body(b"data: " + json.dumps(role).encode() + b"\n\n")
        if self.scripted.refuse_grammars == "vllm-0.32":
            self._body(b"data: " + json.dumps(_error_body(500, "Internal server error")).encode() + b"\n\n")
        self._body(b"data: [DONE]\n\n")

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class _Ended(Exception):
    """The answer ends here, its connection closed: the server stops, the client left, or the script cuts."""

    def __init__(self, client_left: bool = False) -> None:
        super().__init__()
        self.client_left = client_left


def _huge_pieces(total: int) -> Iterator[str]:
    """`total` bytes of generated words in pieces of _HUGE_PIECE (ASCII: one byte per character)."""
    sent = 0
    while sent < total:
        piece = _HUGE_TEXT[: min(_HUGE_PIECE, total - sent)]
        sent += len(piece)
        yield piece


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "Error")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _usage(reply: ScriptedReply) -> dict[str, Any]:
    content = (
        reply.huge_answer_bytes // 4 if reply.huge_answer_bytes else len(split_text(reply.text, reply.chunks))
    )
    completion = content + len(split_text(reply.reasoning or ""))
    usage: dict[str, Any] = {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": reply.prompt_tokens + completion,
    }
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    return usage


def _completion_body(reply: ScriptedReply, model: str, content: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text if content is None else content}
    if reply.reasoning is not None:
        message["reasoning"] = reply.reasoning
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}],
        "usage": _usage(reply),
    }


def _stream_events(reply: ScriptedReply, model: str, include_usage: bool) -> Iterator[dict[str, Any]]:
    ident = f"chatcmpl-{uuid.uuid4().hex[:16]}"
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    yield chunk({"role": "assistant", "content": ""})
    for piece in split_text(reply.reasoning or ""):
        yield chunk({"reasoning": piece})
    pieces = (
        _huge_pieces(reply.huge_answer_bytes)
        if reply.huge_answer_bytes
        else split_text(reply.text, reply.chunks)
    )
    for piece in pieces:
        yield chunk({"content": piece})
    yield chunk({}, reply.finish_reason)
    if include_usage:
        yield {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": _usage(reply),
        }


def load_reply_file(
    path: Path,
) -> tuple[list[ScriptedReply], ScriptedReply | None, list[tuple[str, ScriptedReply]]]:
    """A reply file: a JSON list of ScriptedReply objects (answered in order, then the default), or an object
    {"replies": [...], "default": {...}, "rules": [{"match": "text in the prompt", "reply": {...}}]}."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, list):
        data = {"replies": data}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON list or object")
    replies = [ScriptedReply.from_dict(r) for r in data.get("replies", [])]
    default = ScriptedReply.from_dict(data["default"]) if "default" in data else None
    rules = [(str(r["match"]), ScriptedReply.from_dict(r["reply"])) for r in data.get("rules", [])]
    return replies, default, rules


def _rule_chooser(
    replies: list[ScriptedReply], default: ScriptedReply, rules: list[tuple[str, ScriptedReply]]
) -> Callable[[dict[str, Any]], ScriptedReply]:
    queue = deque(replies)

    def choose(body: dict[str, Any]) -> ScriptedReply:
        text = request_text(body)
        for needle, reply in rules:
            if needle in text:
                return reply
        return queue.popleft() if queue else default

    return choose


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m support.scripted_server",
        description="Scripted OpenAI-compatible server on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, default=0, help="port (0: any free port)")
    parser.add_argument(
        "--reply-file", type=Path, help="JSON: a list of ScriptedReply objects, or replies/default/rules"
    )
    parser.add_argument("--model", default="scripted", help="model id served on /v1/models")
    parser.add_argument("--text", help="text of the default reply")
    args = parser.parse_args(argv)

    replies: list[ScriptedReply] = []
    default = ScriptedReply(text=args.text) if args.text is not None else None
    rules: list[tuple[str, ScriptedReply]] = []
    if args.reply_file is not None:
        replies, file_default, rules = load_reply_file(args.reply_file)
        default = file_default or default
    source: ReplySource = _rule_chooser(replies, default or ScriptedReply(), rules) if rules else replies
    server = ScriptedServer(source, default=default, model=args.model, port=args.port)
    done = threading.Event()
    # SIGINT too, whatever the process inherited: started by a suite run as a shell's background job it comes
    # ignored, and launch's SIGINT then left it running until launch escalated to SIGTERM 20 s later.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    server.start()
    print(server.url, flush=True)
    try:
        while not done.is_set():  # not done.wait(): the handler's set() would wait for the lock wait() holds
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
