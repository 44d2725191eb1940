"""A scripted OpenAI-compatible chat-completions server (stdlib only) for tests, benchmarks, bag evaluation.

It answers with chosen texts, errors, delays and dropped connections, streams SSE chunks like vLLM, and
records every request body so tests can assert on what the client sent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
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


@dataclass(frozen=True)
class ScriptedReply:
    text: str = "<think>\nscripted\n</think>\n\nscripted answer"
    status: int = 200  # != 200: an OpenAI-style error body {"error": {"message": error_message, ...}}
    error_message: str = ""
    delay_s: float = 0.0  # before the response starts
    chunk_delay_s: float = 0.0  # between streamed chunks
    finish_reason: str = "stop"
    prompt_tokens: int = 100
    drop_connection: bool = False  # close the socket without answering
    reasoning: str | None = None  # sent as message.reasoning, like vLLM's --reasoning-parser
    chunks: int = 0  # number of streamed content pieces; 0 = one per word
    drop_after_chunks: int = 0  # > 0: close the socket after this many streamed text chunks
    stream_error: str = ""  # sent as an error event in the stream after the text, like vLLM on a failure
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens (None: no details, as vLLM
    # without --enable-prompt-tokens-details)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptedReply:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown ScriptedReply fields: {sorted(unknown)}")
        return cls(**data)


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
    ) -> None:
        if refuse_grammars and refuse_grammars not in GRAMMAR_FAILURES:
            raise ValueError(
                f"refuse_grammars: one of {', '.join(GRAMMAR_FAILURES)}, got {refuse_grammars!r}"
            )
        self.refuse_grammars = refuse_grammars  # fail every request with structured output, as that release
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
        self.disconnects = 0  # streams the client closed before their end (cancellation reaches the server)
        self._chooser: Callable[[dict[str, Any]], ScriptedReply] | None = None
        self._queue: deque[ScriptedReply] = deque()
        if callable(replies):
            self._chooser = replies
        else:
            self._queue.extend(replies)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._stopping = threading.Event()
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
            self.request_count += 1
            if self.record:
                self.requests.append(body)
                self.headers.append(headers or {})
            self._arrived.notify_all()
            if self._chooser is not None:
                return self._chooser(body)
            return self._queue.popleft() if self._queue else self.default

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
        self._stopping.set()
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a storm of concurrent requests must not be refused


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
        if path == "/health":
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
        reply = self.scripted.next_reply(body, {k.lower(): v for k, v in self.headers.items()})
        if self.scripted.sleep(reply.delay_s):
            self._drop()
            return
        if reply.drop_connection:
            self._drop()
            return
        if self.scripted.refuse_grammars and (
            (body.get("structured_outputs") or {}).get("json") is not None or body.get("response_format")
        ):
            self._fail_grammar(bool(body.get("stream")))
            return
        if reply.status != 200:
            self._send_json(
                reply.status, _error_body(reply.status, reply.error_message or f"error {reply.status}")
            )
            return
        try:
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                self._stream(reply, include_usage)
            else:
                self._send_json(200, _completion_body(reply, self.scripted.model))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (cancellation): count it, nothing left to do
            with self.scripted._lock:
                self.scripted.disconnects += 1

    def _stream(self, reply: ScriptedReply, include_usage: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        texts = 0
        for event in _stream_events(reply, self.scripted.model, include_usage):
            if reply.stream_error and not event.get("choices"):
                break  # the error event replaces the usage chunk
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            self.wfile.flush()
            delta = event["choices"][0]["delta"] if event.get("choices") else {}
            texts += bool(delta.get("content") or delta.get("reasoning"))
            if reply.drop_after_chunks and texts >= reply.drop_after_chunks:
                self._drop()
                return
            if event.get("choices") and self.scripted.sleep(reply.chunk_delay_s):
                self._drop()
                return
        if reply.stream_error:
            error = _error_body(500, reply.stream_error)
            self.wfile.write(b"data: " + json.dumps(error).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

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
            self._send_json(500, _error_body(500, "Internal server error"))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        role = next(_stream_events(ScriptedReply(text=""), self.scripted.model, False))
        self.wfile.write(b"data: " + json.dumps(role).encode() + b"\n\n")
        if self.scripted.refuse_grammars == "vllm-0.32":
            error = _error_body(500, "Internal server error")
            self.wfile.write(b"data: " + json.dumps(error).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

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


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "Error")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _usage(reply: ScriptedReply) -> dict[str, Any]:
    completion = len(split_text(reply.text, reply.chunks)) + len(split_text(reply.reasoning or ""))
    usage: dict[str, Any] = {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": reply.prompt_tokens + completion,
    }
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    return usage


def _completion_body(reply: ScriptedReply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
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
    for piece in split_text(reply.text, reply.chunks):
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
    signal.signal(signal.SIGTERM, lambda *_: done.set())
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
