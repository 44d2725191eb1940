"""Every request ends within a bound whatever the server does: the first-token bound, the progress floor, the
allowance of a whole answer, the total limit, and the size bound, against the scripted server's slow and
hostile behaviours; the connection is closed and no thread is left reading."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.processes import wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.errors import AnswerTooLarge, RequestTimeout, ServerTooSlow
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.request_builder import ChatRequest

MAX_TOKENS = 64
REQUEST = ChatRequest(
    messages=[{"role": "user", "content": [{"type": "text", "text": "What next?"}]}],
    params={"max_tokens": MAX_TOKENS},
)
BOUND_CHARS = MAX_TOKENS * ClientSettings().max_chars_per_token
WORDS = "word " * 400


def _client(server: ScriptedServer, **kwargs: object) -> ReasonerClient:
    settings: dict[str, object] = {
        "base_url": server.base_url,
        "max_retries": 0,
        "connect_timeout_s": 2.0,
        "read_timeout_s": 60.0,  # longer than every bound below: silence is not what ends these requests
        "first_token_timeout_s": 1.0,
        "min_tokens_per_s": 5.0,
        "progress_window_s": 1.0,
    }
    settings.update(kwargs)
    return ReasonerClient(ClientSettings(**settings))  # type: ignore[arg-type]


def _request_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in ("reasoner-request", "reasoner-models")]


def _ends_cut(server: ScriptedServer, reply: ScriptedReply, stream: bool, **kwargs: object) -> BaseException:
    """Ask once; the error it ends in, after checking that its connection was closed and no thread is left."""
    server.default = reply
    before = server.disconnects
    with _client(server, **kwargs) as client:
        client.model_id()
        with pytest.raises(Exception) as caught:
            client.complete(REQUEST, stream=stream)
    wait_until(lambda: server.disconnects > before, 10, "the server to see the connection closed")
    wait_until(lambda: not _request_threads(), 10, "the request's worker thread to end")
    return caught.value


@pytest.fixture
def server() -> ScriptedServer:
    with ScriptedServer() as s:
        yield s


def test_a_trickle_is_cut_by_the_progress_floor(server: ScriptedServer) -> None:
    """One token every 0.4 s (2.5 tokens/s) against a floor of 5: cut one window after the first token, not
    after the 160 s the trickle would take."""
    partial: list[str] = []
    server.default = ScriptedReply(text=WORDS, chunk_delay_s=0.4)
    with _client(server) as client, pytest.raises(ServerTooSlow) as err:
        client.complete(REQUEST, on_text=partial.append)
    assert "tokens in the last 1 s, under the floor of 5 tokens/s" in str(err.value)
    assert err.value.kind == "too_slow"
    assert 1 <= len(partial[-1].split()) < 20  # what had come is kept for the partial answer
    wait_until(lambda: server.disconnects == 1, 10, "the server to see the stream closed")


@pytest.mark.parametrize(
    ("name", "reply"),
    [
        ("keep-alive comments only", ScriptedReply(keepalive_s=3600, keepalive_interval_s=0.05)),
        ("headers a byte at a time", ScriptedReply(header_byte_delay_s=0.05)),
        ("a hang", ScriptedReply(hang=True)),
        ("a slow first token", ScriptedReply(first_token_delay_s=3600)),
        ("a byte trickle", ScriptedReply(body_byte_delay_s=0.05)),
    ],
)
def test_no_first_token_within_the_bound_is_cut_even_when_bytes_keep_coming(
    server: ScriptedServer, name: str, reply: ScriptedReply
) -> None:
    error = _ends_cut(server, reply, stream=True)
    assert isinstance(error, ServerTooSlow), (name, error)
    assert "no first token within 1 s" in str(error)
    assert "connection closed" in str(error)


@pytest.mark.parametrize("first_token_timeout_s", [30.0, 0.0])
def test_the_read_timeout_bounds_the_first_token_too(
    server: ScriptedServer, first_token_timeout_s: float
) -> None:
    """vLLM says nothing before its first token, so request_timeout_s always bounded a silent server's first
    token; it bounds keep-alive comments the same way now (before: a comments-only stream ran until the
    server closed it, 36 s with request_timeout_s 5). The kind is the read timeout's: timeout."""
    reply = ScriptedReply(keepalive_s=3600, keepalive_interval_s=0.05)
    error = _ends_cut(
        server, reply, stream=True, read_timeout_s=1.0, first_token_timeout_s=first_token_timeout_s
    )
    assert isinstance(error, RequestTimeout) and error.kind == "timeout", error
    assert "no first token within 1 s (request_timeout_s" in str(error)


def test_the_read_timeout_bounds_an_unstreamed_answer_whose_headers_trickle(server: ScriptedServer) -> None:
    """vLLM sends an unstreamed answer whole, nothing before: it always had to begin within the read timeout.
    Headers trickled a byte at a time kept the read timeout from firing (36 s at a byte every 0.5 s)."""
    reply = ScriptedReply(header_byte_delay_s=0.05)
    error = _ends_cut(server, reply, stream=False, read_timeout_s=1.0, first_token_timeout_s=30.0)
    assert isinstance(error, RequestTimeout) and error.kind == "timeout", error
    assert "no answer within 1 s (request_timeout_s" in str(error)


def test_a_slow_first_token_within_the_bound_is_a_success(server: ScriptedServer) -> None:
    server.default = ScriptedReply(text="fine", first_token_delay_s=0.3, keepalive_s=0.3)
    with _client(server) as client:
        assert client.complete(REQUEST).text == "fine"


@pytest.mark.parametrize(
    ("name", "reply", "said"),
    [
        ("spaces before the body", ScriptedReply(keepalive_s=3600, keepalive_interval_s=0.05), "its headers"),
        ("a byte trickle", ScriptedReply(body_byte_delay_s=0.05), "its headers"),
        ("a slow body", ScriptedReply(first_token_delay_s=3600), "its headers"),
        ("headers a byte at a time", ScriptedReply(header_byte_delay_s=0.1), "did not end within 2.64 s"),
        ("a hang", ScriptedReply(hang=True), "did not end within 2.64 s"),
    ],
)
def test_an_unstreamed_answer_is_bounded_by_its_headers_and_its_allowance(
    server: ScriptedServer, name: str, reply: ScriptedReply, said: str
) -> None:
    """An unstreamed answer shows no progress until whole: its body within the first-token bound of its
    headers, and the whole within the first-token bound + max_tokens at the floor + a window (with a floor of
    100 tokens/s: 1 + 0.64 + 1 s)."""
    error = _ends_cut(server, reply, stream=False, min_tokens_per_s=100.0)
    assert isinstance(error, ServerTooSlow), (name, error)
    assert said in str(error)


def test_the_total_limit_ends_a_request_that_keeps_the_pace(server: ScriptedServer) -> None:
    error = _ends_cut(server, ScriptedReply(text=WORDS, chunk_delay_s=0.05), stream=True, total_timeout_s=0.8)
    assert isinstance(error, RequestTimeout) and error.kind == "timeout"
    assert "within 0.8 s, the request's total limit" in str(error)


def test_model_discovery_is_bounded_too() -> None:
    """The first request asks /v1/models: a server that says nothing there is cut as well."""
    with ScriptedServer() as server:
        asked = _silent_models(server)
        with (
            _client(server) as client,
            pytest.raises(ServerTooSlow, match="models did not answer within 1 s"),
        ):
            client.complete(REQUEST)
        assert asked.is_set()


def _silent_models(server: ScriptedServer) -> threading.Event:
    """Make GET /v1/models say nothing until the server stops; the event is set once it was asked."""
    asked = threading.Event()
    handler = server._httpd.RequestHandlerClass  # this server's own handler class: one route changed
    original = handler.do_GET

    def do_get(self: object) -> None:
        if getattr(self, "path", "").startswith("/v1/models"):
            asked.set()
            server._stopping.wait()
            return
        original(self)  # type: ignore[arg-type]

    handler.do_GET = do_get  # type: ignore[method-assign]
    return asked


def test_a_server_above_the_floor_is_never_cut(server: ScriptedServer) -> None:
    """20 tokens/s against a floor of 5 over 2 s windows, for 3 s: the whole answer arrives (the margin is
    for the server's thread, which shares this busy machine: a run at twice the floor over 1 s windows was
    once cut while a build ran beside it)."""
    server.default = ScriptedReply(text="word " * 60, chunk_delay_s=0.05)
    with _client(server, progress_window_s=2.0) as client:
        completion = client.complete(REQUEST)
    assert completion.text == "word " * 60 and completion.finish_reason == "stop"


# -- size ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_an_answer_at_its_bound_passes_one_character_more_is_cut(
    server: ScriptedServer, stream: bool
) -> None:
    server.default = ScriptedReply(text="x" * BOUND_CHARS, chunks=7)
    with _client(server) as client:
        assert len(client.complete(REQUEST, stream=stream).text) == BOUND_CHARS
        server.default = ScriptedReply(text="x" * (BOUND_CHARS + 1), chunks=7)
        partial: list[str] = []
        with pytest.raises(AnswerTooLarge, match=f"passed {BOUND_CHARS} characters") as err:
            client.complete(REQUEST, stream=stream, on_text=partial.append)
    assert err.value.kind == "answer_too_large"
    if stream:
        assert len(partial[-1]) == BOUND_CHARS  # the text up to the bound, nothing beyond


def test_reasoning_counts_toward_the_bound(server: ScriptedServer) -> None:
    half = BOUND_CHARS // 2 + 1
    server.default = ScriptedReply(text="y" * half, reasoning="r" * half, chunks=3)
    with _client(server) as client:
        for stream in (True, False):
            with pytest.raises(AnswerTooLarge):
                client.complete(REQUEST, stream=stream)


@pytest.mark.parametrize("stream", [True, False])
def test_a_huge_answer_is_cut_at_its_bound_and_its_connection_closed(
    server: ScriptedServer, stream: bool
) -> None:
    error = _ends_cut(server, ScriptedReply(huge_answer_bytes=64 << 20), stream=stream)
    assert isinstance(error, AnswerTooLarge), error
    # Streamed: the text bound in characters; unstreamed: the body's bytes, read no further.
    assert ("characters" if stream else "bytes on the wire") in str(error)


def _peak_rss_growth(action: object) -> int:
    """Bytes by which this process's peak RSS grew while `action()` ran (Linux: VmHWM, reset first)."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS

    def field(name: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(name)

    before = field("VmRSS")
    action()  # type: ignore[operator]
    return field("VmHWM") - before


@pytest.mark.parametrize("stream", [True, False])
def test_a_40_mib_answer_never_grows_memory_by_its_size(tmp_path: Path, stream: bool) -> None:
    """The scripted server in a process of its own sends 40 MiB; this process's peak RSS grows by far less
    (the bound is 64 tokens x 32 characters), the error says so."""
    size = 40 << 20
    replies = tmp_path / "huge.json"
    replies.write_text(json.dumps({"default": {"huge_answer_bytes": size}}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "support.scripted_server", "--reply-file", str(replies)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        client = ReasonerClient(ClientSettings(base_url=url + "/v1", max_retries=0, model="scripted"))
        errors: list[BaseException] = []

        def ask() -> None:
            try:
                client.complete(REQUEST, stream=stream)
            except AnswerTooLarge as err:
                errors.append(err)

        with client:
            ask()  # the first request sets up what every later one reuses (model id, SDK machinery)
            growth = _peak_rss_growth(ask)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        proc.stdout.close()  # not left to the garbage collector
    assert len(errors) == 2
    assert growth < size // 4, f"peak RSS grew {growth / 2**20:.1f} MiB for a {size >> 20} MiB answer"
