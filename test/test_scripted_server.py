"""The scripted OpenAI-compatible server: routes, SSE streaming, usage, errors, recording, the CLI process."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

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
