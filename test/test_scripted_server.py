"""The scripted OpenAI-compatible server: routes, SSE streaming, usage, errors, recording, the CLI process."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import openai
import pytest
from support.scripted_server import ScriptedReply, ScriptedServer, load_reply_file, split_text


def _sdk(server: ScriptedServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)


def test_split_text_keeps_every_character() -> None:
    text = "<think>\nabc def\n</think>\n\n[1, 2]  end"
    pieces = split_text(text)
    assert "".join(pieces) == text
    assert len(pieces) >= 5
    assert "".join(split_text(text, 3)) == text
    assert len(split_text(text, 3)) == 3
    assert split_text("") == []


def test_health_models_and_404() -> None:
    with ScriptedServer(model="tiny") as server:
        with urllib.request.urlopen(server.url + "/health", timeout=5) as response:
            assert response.status == 200
        assert [m.id for m in _sdk(server).models.list().data] == ["tiny"]
        server.health_status = 503
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server.url + "/health", timeout=5)
        assert err.value.code == 503
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server.url + "/nothing", timeout=5)
        assert err.value.code == 404


def test_streams_chunks_with_usage_and_records_the_body() -> None:
    reply = ScriptedReply(text="one two three four", prompt_tokens=7, finish_reason="length")
    with ScriptedServer([reply]) as server:
        stream = _sdk(server).chat.completions.create(
            model="scripted",
            messages=[{"role": "user", "content": "hello"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"top_k": 20},
        )
        chunks = list(stream)
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts == ["one", " two", " three", " four"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "length"
    ]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (7, 4)
    assert server.requests[0]["top_k"] == 20
    assert server.requests[0]["messages"] == [{"role": "user", "content": "hello"}]


def test_non_streamed_answer_with_reasoning_then_default() -> None:
    with ScriptedServer(
        [ScriptedReply(text="B", reasoning="because")], default=ScriptedReply(text="dflt")
    ) as server:
        sdk = _sdk(server)
        first = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        second = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert first.choices[0].message.content == "B"
    assert getattr(first.choices[0].message, "reasoning", None) == "because"
    assert second.choices[0].message.content == "dflt"
    assert len(server.requests) == 2


def test_error_body_in_openai_format() -> None:
    server = ScriptedServer([ScriptedReply(status=400, error_message="video too long")])
    with server, pytest.raises(openai.BadRequestError) as err:
        _sdk(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert err.value.status_code == 400
    body = err.value.body
    assert isinstance(body, dict)
    assert (body.get("error") or body)["message"] == "video too long"


def test_dropped_connection_is_a_connection_error() -> None:
    server = ScriptedServer([ScriptedReply(drop_connection=True)])
    with server, pytest.raises(openai.APIConnectionError):
        _sdk(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])


def test_wait_requests() -> None:
    with ScriptedServer() as server:
        assert server.wait_requests(1, 0.05) is False
        sender = threading.Thread(
            target=lambda: _sdk(server).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}]
            )
        )
        sender.start()
        assert server.wait_requests(1, 5.0) is True
        sender.join(5)
        assert len(server.requests) == 1


def test_callable_replies_see_the_body() -> None:
    def choose(body: dict) -> ScriptedReply:
        return ScriptedReply(text=f"{len(body['messages'])} messages")

    with ScriptedServer(choose) as server:
        answer = _sdk(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert answer.choices[0].message.content == "1 messages"


def test_reply_file_forms(tmp_path) -> None:
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([{"text": "a"}, {"status": 500, "error_message": "x"}]))
    replies, default, rules = load_reply_file(listed)
    assert replies[0].text == "a"
    assert replies[1].status == 500
    assert default is None and rules == []
    full = tmp_path / "full.json"
    full.write_text(
        json.dumps({"default": {"text": "d"}, "rules": [{"match": "cup", "reply": {"text": "c"}}]})
    )
    replies, default, rules = load_reply_file(full)
    assert default == ScriptedReply(text="d") and rules == [("cup", ScriptedReply(text="c"))]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"txt": "typo"}]))
    with pytest.raises(ValueError, match="txt"):
        load_reply_file(bad)


def test_command_line_server_prints_its_url_and_answers(tmp_path) -> None:
    reply_file = tmp_path / "replies.json"
    reply_file.write_text(
        json.dumps({"rules": [{"match": "cup", "reply": {"text": "the cup"}}], "default": {"text": "other"}})
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "support.scripted_server",
            "--port",
            "0",
            "--reply-file",
            str(reply_file),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="test", max_retries=0)
        about_cup = sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "where is the cup"}]
        )
        other = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
        assert about_cup.choices[0].message.content == "the cup"
        assert other.choices[0].message.content == "other"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


# The behaviours of a broken or slow server, each as the openai SDK sees it.

MESSAGES = [{"role": "user", "content": "q"}]


def _ask(server: ScriptedServer, stream: bool, timeout_s: float = 10.0) -> tuple[str, str | None]:
    """The answer's content and finish reason, through the SDK."""
    sdk = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=timeout_s)
    if not stream:
        answer = sdk.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        return answer.choices[0].message.content or "", answer.choices[0].finish_reason
    text, finish = [], None
    for chunk in sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True):  # type: ignore[arg-type]
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return "".join(text), finish


def _in_thread(call: Callable[[], object]) -> tuple[threading.Thread, dict[str, object]]:
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["result"] = call()
        except Exception as err:  # what the SDK raised, for the test to look at
            out["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("stream", [True, False])
def test_slow_first_token_sends_the_headers_then_waits(stream: bool) -> None:
    with ScriptedServer(default=ScriptedReply(text="a b c", first_token_delay_s=3.0)) as server:
        sdk = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=10)
        start = time.monotonic()
        with sdk.chat.completions.with_streaming_response.create(
            model="m",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=stream,
        ) as response:
            headers_at = time.monotonic() - start
            assert response.status_code == 200
            body = b"".join(response.iter_bytes())
        done_at = time.monotonic() - start
    assert done_at - headers_at >= 2.0  # the 3 s wait came after the headers (and the role chunk)
    assert b"a b c" in body if not stream else b'"content": " c"' in body


@pytest.mark.parametrize("stream", [True, False])
def test_slow_first_token_beyond_the_read_timeout_is_a_read_timeout(stream: bool) -> None:
    server = ScriptedServer(default=ScriptedReply(first_token_delay_s=5.0))
    with server, pytest.raises(openai.APITimeoutError):
        _ask(server, stream, timeout_s=0.3)


def test_trickle_sends_one_token_per_chunk_delay() -> None:
    with ScriptedServer(default=ScriptedReply(text="a b c d", chunk_delay_s=0.2)) as server:
        sdk = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=10)
        start = time.monotonic()
        arrivals = [
            time.monotonic()
            for chunk in sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
            if chunk.choices and chunk.choices[0].delta.content
        ]
    # One event per token; the server waits 0.2 s between them. What the client sees between two arrivals is
    # not a bound (a client busy elsewhere reads two events at once: CI saw it), the last one's time is.
    assert len(arrivals) == 4
    assert arrivals[-1] - start >= 3 * 0.2


@pytest.mark.parametrize("stream", [True, False])
def test_keepalive_comments_keep_a_short_read_timeout_from_firing_then_the_answer_comes(stream: bool) -> None:
    reply = ScriptedReply(text="after the comments", keepalive_s=4.0, keepalive_interval_s=0.1)
    with ScriptedServer(default=reply) as server:
        start = time.monotonic()
        text, finish = _ask(server, stream, timeout_s=2.0)  # 2 s read timeout, 4 s of keep-alives
    assert time.monotonic() - start >= 4.0
    assert (text, finish) == ("after the comments", "stop")


def test_keepalive_sends_sse_comments_and_nothing_else() -> None:
    reply = ScriptedReply(keepalive_s=60.0, keepalive_interval_s=0.05)
    with ScriptedServer(default=reply) as server:
        request = urllib.request.Request(
            server.base_url + "/chat/completions",
            data=json.dumps({"model": "m", "messages": MESSAGES, "stream": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["Content-Type"] == "text/event-stream"
            lines = [response.readline() for _ in range(10)]
    assert set(lines) == {b": keep-alive\n", b"\n"}


@pytest.mark.parametrize("stream", [True, False])
def test_slow_headers_arrive_one_byte_at_a_time(stream: bool) -> None:
    with (
        ScriptedServer(default=ScriptedReply(text="ok", header_byte_delay_s=1.0)) as server,
        socket.create_connection((server.host, server.port), timeout=10) as sock,
    ):
        body = json.dumps({"model": "m", "messages": MESSAGES, "stream": stream}).encode()
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        first = sock.recv(100)
        time.sleep(1.5)
        second = sock.recv(100)
    assert first == b"H"  # one byte, then 1 s before the next (a stall of the reader shorter than that)
    assert 1 <= len(second) <= 2 and (first + second) == b"HTTP/1.1"[: 1 + len(second)]


@pytest.mark.parametrize("stream", [True, False])
def test_slow_headers_never_trip_a_read_timeout(stream: bool) -> None:
    with ScriptedServer(default=ScriptedReply(text="ok", header_byte_delay_s=0.01)) as server:
        start = time.monotonic()
        assert _ask(server, stream, timeout_s=0.5) == ("ok", "stop")
    assert time.monotonic() - start >= 0.01 * len("HTTP/1.1 200 OK\r\n\r\n")


@pytest.mark.parametrize("stream", [True, False])
def test_a_byte_trickle_delivers_the_answer_slowly(stream: bool) -> None:
    with ScriptedServer(default=ScriptedReply(text="ok", body_byte_delay_s=0.002)) as server:
        start = time.monotonic()
        assert _ask(server, stream, timeout_s=0.5) == ("ok", "stop")
    assert time.monotonic() - start >= 0.002 * 200  # every answer's body has more than 200 bytes


@pytest.mark.parametrize("stream", [True, False])
def test_a_huge_answer_is_generated_at_the_size_asked(stream: bool) -> None:
    size = 3 * 1024 * 1024 + 5
    with ScriptedServer(default=ScriptedReply(huge_answer_bytes=size)) as server:
        text, finish = _ask(server, stream)
    assert len(text) == size and finish == "stop"
    assert text.startswith("lorem ipsum ")


def test_a_truncated_unstreamed_body_is_a_connection_error() -> None:
    server = ScriptedServer(default=ScriptedReply(cut_after_bytes=100))
    with server, pytest.raises(openai.APIConnectionError):
        _ask(server, stream=False)


def test_a_truncated_stream_ends_inside_an_event_without_a_finish_reason() -> None:
    reply = ScriptedReply(text="one two three four five six", cut_after_bytes=700)
    with ScriptedServer(default=reply) as server:
        text, finish = _ask(server, stream=True)
    assert finish is None
    assert 0 < len(text) < len(reply.text) and reply.text.startswith(text)


def test_disconnect_before_and_during_the_answer() -> None:
    with (
        ScriptedServer(default=ScriptedReply(drop_connection=True)) as server,
        pytest.raises(openai.APIConnectionError),
    ):
        _ask(server, stream=True)
    with ScriptedServer(default=ScriptedReply(text="a b c d e", drop_after_chunks=2)) as server:
        assert _ask(server, stream=True) == ("a b", None)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
@pytest.mark.parametrize("stream", [True, False])
def test_5xx_is_an_sdk_status_error(status: int, stream: bool) -> None:
    with (
        ScriptedServer(default=ScriptedReply(status=status, error_message="engine dead")) as server,
        pytest.raises(openai.APIStatusError) as err,
    ):
        _ask(server, stream)
    assert err.value.status_code == status
    assert "engine dead" in str(err.value.body)


@pytest.mark.parametrize("stream", [True, False])
def test_garbage_instead_of_an_answer(stream: bool) -> None:
    with (
        ScriptedServer(default=ScriptedReply(garbage="data: {not json\n\n")) as server,
        pytest.raises(ValueError),
    ):  # json.JSONDecodeError from the SDK, streamed or not
        _ask(server, stream)
    with ScriptedServer(default=ScriptedReply(garbage="<html>no SSE</html>")) as server:
        if stream:
            assert _ask(server, stream) == ("", None)  # no event at all
        else:
            with pytest.raises(ValueError):
                _ask(server, stream)
    with (
        ScriptedServer(default=ScriptedReply(garbage="<html>Bad Gateway</html>", status=502)) as server,
        pytest.raises(openai.APIStatusError) as err,
    ):
        _ask(server, stream)
    assert err.value.status_code == 502


@pytest.mark.parametrize("stream", [True, False])
def test_hang_says_nothing_until_the_read_timeout(stream: bool) -> None:
    with ScriptedServer(default=ScriptedReply(hang=True)) as server:
        with pytest.raises(openai.APITimeoutError):
            _ask(server, stream, timeout_s=0.3)
        assert server.wait_requests(1, 5)
        deadline = time.monotonic() + 10
        while server.disconnects == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.disconnects == 1  # the hang noticed the client leave


# Behaviours that would go on for an hour or more. A huge answer blocks the server's writes once the client
# stops reading (streamed: the client below reads one chunk, then waits); unstreamed, the SDK reads it all.
FOREVER = [
    *(
        (name, ScriptedReply(**{field: value}), stream)  # type: ignore[arg-type]
        for name, field, value in [
            ("hang", "hang", True),
            ("delay", "delay_s", 3600),
            ("first_token", "first_token_delay_s", 3600),
            ("keepalive", "keepalive_s", 3600),
            ("slow_headers", "header_byte_delay_s", 3600),
            ("byte_trickle", "body_byte_delay_s", 3600),
        ]
        for stream in (True, False)
    ),
    ("trickle", ScriptedReply(text="a " * 1000, chunk_delay_s=3600), True),
    ("huge", ScriptedReply(huge_answer_bytes=1 << 40), True),
]


@pytest.mark.parametrize(
    ("reply", "stream"), [c[1:] for c in FOREVER], ids=[f"{c[0]}-{c[2]}" for c in FOREVER]
)
def test_every_behaviour_ends_when_the_server_stops(reply: ScriptedReply, stream: bool) -> None:
    server = ScriptedServer(default=reply).start()
    sdk = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=3600)
    gate = threading.Event()

    def call() -> object:
        answer = sdk.chat.completions.create(model="m", messages=MESSAGES, stream=stream)  # type: ignore[call-overload]
        if stream:
            for _ in answer:
                gate.wait()  # reads one chunk, then stops reading: the server's writes fill the socket
        return answer

    thread, _ = _in_thread(call)
    try:
        assert server.wait_requests(1, 10)
        time.sleep(0.3)  # the behaviour is under way
        assert thread.is_alive()
    finally:
        stopper, _ = _in_thread(server.stop)
        stopper.join(10)
        gate.set()
    assert not stopper.is_alive(), "stop() waited for an answer under way"
    thread.join(10)
    assert not thread.is_alive(), "the client still waits after the server stopped"


def test_every_behaviour_can_be_set_from_a_reply_file(tmp_path) -> None:
    behaviours = {
        "first_token_delay_s": 1.5,
        "keepalive_s": 30.0,
        "keepalive_interval_s": 2.0,
        "header_byte_delay_s": 0.5,
        "body_byte_delay_s": 0.25,
        "hang": True,
        "huge_answer_bytes": 41943040,
        "garbage": "<html>",
        "cut_after_bytes": 10,
        "chunk_delay_s": 2.0,
        "drop_after_chunks": 3,
        "status": 503,
    }
    reply_file = tmp_path / "replies.json"
    reply_file.write_text(json.dumps({"rules": [{"match": "x", "reply": behaviours}], "default": behaviours}))
    _, default, rules = load_reply_file(reply_file)
    assert default == ScriptedReply(**behaviours) == rules[0][1]  # type: ignore[arg-type]
    for bad in ({"keepalive_interval_s": 0}, {"body_byte_delay_s": -1}, {"huge_answer_bytes": -1}):
        with pytest.raises(ValueError):
            ScriptedReply.from_dict(bad)


def test_command_line_server_stops_on_sigterm_with_a_hung_request_in_flight(tmp_path) -> None:
    reply_file = tmp_path / "replies.json"
    reply_file.write_text(json.dumps({"default": {"hang": True}}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "support.scripted_server", "--reply-file", str(reply_file)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="test", max_retries=0, timeout=3600)
        thread, out = _in_thread(lambda: sdk.chat.completions.create(model="m", messages=MESSAGES))  # type: ignore[arg-type]
        time.sleep(0.3)
        assert thread.is_alive()  # the request hangs
        proc.terminate()
        assert proc.wait(timeout=20) == 0
        thread.join(10)
        assert isinstance(out.get("error"), openai.APIConnectionError)
    finally:
        proc.kill()
        proc.wait()


def test_command_line_server_stops_on_sigint_also_when_it_came_ignored() -> None:
    """A suite run as a shell's background job starts its processes with SIGINT ignored: the server relied on
    KeyboardInterrupt, and launch's SIGINT left it running until launch escalated to SIGTERM 20 s later."""
    import signal

    # A shell ignoring SIGINT, then the server in its place: the server starts with SIGINT ignored.
    command = f"trap '' INT; exec {shlex.quote(sys.executable)} -m support.scripted_server"
    proc = subprocess.Popen(["sh", "-c", command], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("http://127.0.0.1:")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()
