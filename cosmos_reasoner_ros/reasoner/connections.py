"""The HTTP client under the OpenAI SDK, made so that a request can always be ended from outside its thread.

A blocking socket read (headers a byte at a time, a server that says nothing, keep-alive comments) never
returns to the code that watches the request, and another thread cannot interrupt it safely, except by
shutting the socket down. So each request gets a fresh connection (no keep-alive: a pooled connection would
be shared with requests the watcher does not own), its socket is handed to the request's `Line` through
httpcore's documented `trace` extension, and `Line.cut()` shuts it, which ends the read at once. Each
answer's body is counted as it is read and stops at the line's byte limit.

The thread that sends a request marks it with `using(line)`; requests sent without a line (model discovery)
are plain ones.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import openai

from cosmos_reasoner_ros.errors import AnswerTooLarge

_MAX_CONNECTIONS = 1000  # the SDK's own default
_current = threading.local()


class Line:
    """One request's connection as its watcher sees it: cut it from any thread; its body's bytes counted."""

    def __init__(self, max_bytes: int, what: str = "answer") -> None:
        self.max_bytes = max_bytes
        self.what = what  # for the error: "answer" or what the limit protects
        self.received = 0  # bytes of the response body read so far
        self.headers_received = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._cut = False

    @property
    def was_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """Shut the request's connection: a read blocked on it returns at once; later ones fail."""
        with self._lock:
            self._cut = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            cut = self._cut
        if cut:  # cut before the connection was made
            _shut(sock)

    def count(self, size: int) -> None:
        self.received += size
        if self.received > self.max_bytes:
            raise AnswerTooLarge(
                f"the {self.what} passed {self.max_bytes} bytes on the wire, its bound from max_tokens; "
                "it was read no further and its connection closed"
            )

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's trace callback: keeps the socket of each connection made for the request."""
        if name.endswith((".connect_tcp.complete", ".start_tls.complete", ".connect_unix_socket.complete")):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                self.attach(sock)


def _shut(sock: socket.socket) -> None:
    # Linger 0: when the reader then closes the socket, the server gets a reset at once. A plain close after
    # shutdown leaves an orphan that can advertise a zero window for a minute (tcp_fin_timeout), during which
    # a server blocked writing to it never learns that nobody reads.
    with contextlib.suppress(OSError):  # already closed: nothing left to end
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def using(line: Line) -> Iterator[Line]:
    """Requests sent by this thread inside the block belong to `line`."""
    _current.line = line
    try:
        yield line
    finally:
        _current.line = None


def http_client() -> httpx2.Client:
    """The SDK's default client (its timeouts and redirects), without keep-alive, with the line hooks."""
    return openai.DefaultHttpxClient(
        limits=httpx2.Limits(max_connections=_MAX_CONNECTIONS, max_keepalive_connections=0),
        event_hooks={"request": [_on_request], "response": [_on_response]},
    )


def _on_request(request: httpx2.Request) -> None:
    line = getattr(_current, "line", None)
    if line is not None:
        request.extensions["trace"] = line.trace


def _on_response(response: httpx2.Response) -> None:
    line = getattr(_current, "line", None)
    if line is not None:
        line.headers_received = True
        response.stream = _CountedStream(response.stream, line)


class _CountedStream(httpx2.SyncByteStream):
    """A response body that counts its bytes into its line and stops past the line's limit."""

    def __init__(self, inner: Any, line: Line) -> None:
        self._inner = inner
        self._line = line

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._line.count(len(chunk))
            yield chunk

    def close(self) -> None:
        self._inner.close()
