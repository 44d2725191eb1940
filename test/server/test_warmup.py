"""server/warmup: before READY, the served chat template's thinking switch where a reasoning parser needs it
(against the scripted server's /tokenize)."""

from __future__ import annotations

import pytest
from support.processes import free_port
from support.scripted_server import ScriptedServer

from cosmos_reasoner_ros.server import errors, grammar_check, warmup
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
            warmup.check_thinking_switch(_settings(server.url), "0.26.0", GRAMMARS)
        message = str(info.value)
        assert message.startswith("vLLM 0.26.0 with reasoning_parser qwen3: the chat template of")
        assert "grounding_2d" in message and "trajectory" not in message.split("(tasks that")[0]
        assert "enable_in_reasoning: true" in message and "leave reasoning_parser empty" in message
        assert info.value.exit_code == errors.EXIT_CONFIG
        server.thinking_switch = True
        notes = warmup.check_thinking_switch(_settings(server.url), "0.26.0", GRAMMARS)
        assert notes == [
            "thinking switch: the chat template turns thinking off for grounding_2d, temporal_localization, "
            "temporal_localization_mmss, timestamp_query"
        ]
        assert all("chat_template_kwargs" not in body for body in server.requests)  # /tokenize is not chat


def test_no_check_where_nothing_waits_for_the_end_of_reasoning() -> None:
    with ScriptedServer() as server:
        server.thinking_switch = False
        for settings in (
            _settings(server.url, reasoning_parser=""),  # no parser: the grammar applies from the first token
            _settings(server.url, structured_outputs={"backend": "xgrammar", "enable_in_reasoning": True}),
        ):
            assert warmup.check_thinking_switch(settings, "0.32.0", GRAMMARS) == []
        only_reasoning = {"trajectory": GRAMMARS["trajectory"]}
        assert warmup.check_thinking_switch(_settings(server.url), "0.32.0", only_reasoning) == []


def test_a_server_whose_tokenize_does_not_answer_is_noted_not_refused() -> None:
    notes = warmup.check_thinking_switch(_settings(f"http://127.0.0.1:{free_port()}"), "0.32.0", GRAMMARS)
    assert notes == ["thinking switch: not checked, the server's /tokenize did not answer"]
