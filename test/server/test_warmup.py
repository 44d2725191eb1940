"""server/warmup: before READY, the served chat template's thinking switch where a reasoning parser needs it
(against the scripted server's /tokenize)."""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from pathlib import Path

import pytest
from support.processes import free_port
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.server import errors, grammar_check, template_check, warmup
from cosmos_reasoner_ros.server.settings import ServerSettings


def _settings(url: str, **overrides: object) -> ServerSettings:
    values: dict[str, object] = {"mode": "qwen3vl", "server_url": url, "reasoning_parser": "qwen3"}
    values.update(overrides)
    return ServerSettings(**values)  # type: ignore[arg-type]


GRAMMARS = grammar_check.structured_tasks(ServerSettings())


def test_a_template_without_the_thinking_switch_is_refused_behind_a_reasoning_parser() -> None:
    with ScriptedServer() as server:
        server.thinking_switch = False
        with pytest.raises(errors.ConfigError) as info:
            template_check.check_thinking_switch(_settings(server.url), "0.26.0", GRAMMARS)
        message = str(info.value)
        assert message.startswith("vLLM 0.26.0 with reasoning_parser qwen3: the chat template of")
        assert "grounding_2d" in message and "trajectory" not in message.split("(tasks that")[0]
        assert "enable_in_reasoning: true" in message and "leave reasoning_parser empty" in message
        assert info.value.exit_code == errors.EXIT_CONFIG
        server.thinking_switch = True
        notes = template_check.check_thinking_switch(_settings(server.url), "0.26.0", GRAMMARS)
        assert notes == [
            "thinking switch: the chat template turns thinking off for grounding_2d, temporal_localization, "
            "temporal_localization_mmss, timestamp_query, region_captions"
        ]
        assert all("chat_template_kwargs" not in body for body in server.requests)  # /tokenize is not chat


def test_no_check_where_nothing_waits_for_the_end_of_reasoning() -> None:
    with ScriptedServer() as server:
        server.thinking_switch = False
        for settings in (
            _settings(server.url, reasoning_parser=""),  # no parser: the grammar applies from the first token
            _settings(server.url, structured_outputs={"backend": "xgrammar", "enable_in_reasoning": True}),
        ):
            assert template_check.check_thinking_switch(settings, "0.32.0", GRAMMARS) == []
        only_reasoning = {"trajectory": GRAMMARS["trajectory"]}
        assert template_check.check_thinking_switch(_settings(server.url), "0.32.0", only_reasoning) == []


def test_a_stop_during_the_check_is_not_held_up_by_a_server_that_never_answers() -> None:
    """Before: two blocking /tokenize POSTs of 30 s each, deaf to the supervisor's stop: a server that accepts
    the connection and never answers (frozen, compiling) held SIGTERM up for a minute, past launch's 30 s."""
    with socket.socket() as frozen:  # accepts connections (the kernel's backlog), never answers
        frozen.bind(("127.0.0.1", 0))
        frozen.listen()
        frozen.settimeout(60.0)
        url = f"http://127.0.0.1:{frozen.getsockname()[1]}"
        stop = threading.Event()
        notes: list[str] = []
        check = threading.Thread(
            target=lambda: notes.extend(
                template_check.check_thinking_switch(_settings(url), "0.32.0", GRAMMARS, stop)
            ),
            daemon=True,
        )
        check.start()
        connection, _ = frozen.accept()  # the check's request is in flight
        with connection:
            stop.set()
            check.join(timeout=20.0)  # far below the request's own timeout
            assert not check.is_alive(), "the check waited for the server's answer after the stop"
    assert notes == ["thinking switch: not checked, the supervisor is stopping"]


def test_a_server_whose_tokenize_does_not_answer_is_noted_not_refused() -> None:
    notes = template_check.check_thinking_switch(
        _settings(f"http://127.0.0.1:{free_port()}"), "0.32.0", GRAMMARS
    )
    assert notes == ["thinking switch: not checked, the server's /tokenize did not answer"]


# ---- warm-up requests ----


def _warm(server: ScriptedServer, tmp_path, version: str = "0.32.0", **kw):  # type: ignore[no-untyped-def]
    said: list[str] = []
    settings = ServerSettings(mode="qwen3vl", server_url=server.url, media_dir=str(tmp_path), model="/m/tiny")
    options = {"media_kwargs": True, "timeout_s": 30.0} | kw
    run = warmup.Warmup(
        settings, version, GRAMMARS, options["media_kwargs"], said.append, options["timeout_s"]
    )
    run.run()
    return run, said


def test_a_warm_up_sends_a_video_then_each_grammar_as_the_node_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from cosmos_reasoner_ros.reasoner import RequestSettings, TaskCatalog, build_request

    with ScriptedServer() as server:
        run, said = _warm(server, tmp_path)
    bodies = server.requests
    assert [what for what, _, _ in run.results] == ["video", *GRAMMARS]
    assert all(status == 200 for _, status, _ in run.results) and len(bodies) == 1 + len(GRAMMARS)
    video = bodies[0]["messages"][0]["content"][0]
    sent = Path(urllib.parse.urlparse(video["video_url"]["url"]).path)
    assert video["type"] == "video_url" and sent.parent == tmp_path and sent.suffix == ".mp4"
    assert not list(tmp_path.iterdir())  # removed afterwards
    assert bodies[0]["media_io_kwargs"] == {"video": {"num_frames": 256, "fps": 4.0}}  # vLLM 0.32's mode
    assert bodies[0]["model"] == "/m/tiny" and "structured_outputs" not in bodies[0]
    catalog = TaskCatalog.load()
    for body, name in zip(bodies[1:], GRAMMARS, strict=True):
        values = dict.fromkeys(catalog.spec(name).placeholders, "x")
        node = build_request(catalog.render(name, **values), [], RequestSettings(structured_output=True))
        extra = node.params["extra_body"]
        # The same text of the schema: vLLM's grammar cache finds the node's grammar compiled.
        assert json.dumps(body["structured_outputs"]) == json.dumps(extra["structured_outputs"]), name
        assert body.get("chat_template_kwargs") == extra.get("chat_template_kwargs"), name
        part = body["messages"][0]["content"][0]
        assert part["type"] == ("video_url" if catalog.spec(name).media == "video" else "image_url"), name
    assert said[-1].startswith(f"warm-up: {1 + len(GRAMMARS)}/{1 + len(GRAMMARS)} requests in ")


def test_the_warm_up_clip_has_a_name_of_its_own_and_follows_no_link(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Before: one fixed name in the shared media directory: two supervisors overwrote and removed each
    other's clip, and a link planted at that name was written through (shutil.copyfile follows it)."""
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    media = tmp_path / "media"
    media.mkdir()
    (media / "cosmos-reasoner-warmup.mp4").symlink_to(outside)
    with ScriptedServer() as server:
        settings = ServerSettings(mode="qwen3vl", server_url=server.url, media_dir=str(media))
        first = warmup.Warmup(settings, "0.32.0", {}, True, lambda _: None)
        second = warmup.Warmup(settings, "0.32.0", {}, True, lambda _: None)
        with first._video() as one, second._video() as two:  # two supervisors at once
            paths = [Path(urllib.parse.urlparse(v["video_url"]["url"]).path) for v in (one, two)]
            assert paths[0] != paths[1] and all(p.parent == media and p.is_file() for p in paths)
            assert all(p.read_bytes() == warmup.CLIP.read_bytes() for p in paths)
        assert not any(p.exists() for p in paths)
    assert outside.read_text() == "not yours"
    assert sorted(p.name for p in media.iterdir()) == ["cosmos-reasoner-warmup.mp4"]  # the link, left alone


def test_a_refused_warm_up_request_is_logged_and_the_next_one_sent(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with ScriptedServer(refuse_grammars="vllm-0.32") as server:
        run, said = _warm(server, tmp_path, version="0.21.0", media_kwargs=True)
    assert [status for _, status, _ in run.results] == [200] + [500] * len(GRAMMARS)
    assert "mm_processor_kwargs" in server.requests[0] and "media_io_kwargs" not in server.requests[0]
    assert said[0] == "warm-up: trajectory: HTTP 500: Internal server error (continuing)"
    assert said[-1].startswith(f"warm-up: 1/{1 + len(GRAMMARS)} requests in ")


def test_a_warm_up_never_holds_ready_longer_than_its_timeout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The server takes far longer than the budget: the first request always gives up with it, however busy
    # the machine (before: a 1.5 s answer against a 2.8 s budget raced the machine's load).
    with ScriptedServer(default=ScriptedReply(delay_s=60)) as server:
        run, said = _warm(server, tmp_path, media_kwargs=False, timeout_s=2.8)
    # The request in flight at the timeout gives up with it (status 0), the rest are not sent.
    assert run.results == [("video", 0, run.results[0][2])]
    assert "warm-up: stopped after 3 s (warmup_timeout_s), trajectory not sent" in said
    assert "media_io_kwargs" not in server.requests[0]  # a server that takes no per-request media kwargs


def test_a_stopping_supervisor_does_not_wait_for_the_warm_up(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGTERM while a warm-up request is in flight: the warm-up returns at once, sends nothing more, and the
    supervisor (which checks its stop event next) announces no READY."""
    import threading

    stop = threading.Event()
    said: list[str] = []
    with ScriptedServer(default=ScriptedReply(delay_s=120)) as server:
        settings = ServerSettings(mode="qwen3vl", server_url=server.url, media_dir=str(tmp_path))
        run = warmup.Warmup(settings, "0.32.0", GRAMMARS, True, said.append, 300.0, stop)
        # Stopped once the first warm-up request is at the server (a timer could fire before it is sent).
        threading.Thread(target=lambda: server.wait_requests(1, 60) and stop.set(), daemon=True).start()
        run.run()  # returns at once; how soon (goal: within 60 s of a 120 s answer) is bench/time_bounds.py's
        assert server.request_count == 1
    assert run.results == [("video", 0, run.results[0][2])]
    assert said == ["warm-up: stopped (the supervisor is stopping)"]
