"""A check of the served chat template before READY: behind a reasoning parser, the tasks that do not reason
need the template's thinking switch (asked through the server's /tokenize: the prompt with and without it)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from cosmos_reasoner_ros.schemas.structured_output import THINKING_OFF, TaskGrammar

from .errors import ConfigError
from .http import api_key, post_json_unless_stopped, served_model
from .settings import ServerSettings

__all__ = ["TOKENIZE_TIMEOUT_S", "check_thinking_switch", "thinking_switch"]

# /tokenize renders a template and tokenizes one short message: milliseconds. A server that takes longer is
# not answering (frozen, compiling): the check is then noted as not done rather than holding READY back.
TOKENIZE_TIMEOUT_S = 10.0


def thinking_switch(
    settings: ServerSettings, stop: threading.Event | None = None, timeout_s: float = TOKENIZE_TIMEOUT_S
) -> bool | None:
    """Whether the served chat template has the thinking switch: the prompt of one message differs with
    `enable_thinking: false` (vLLM drops the key where the template has no such variable). None when the
    server's /tokenize does not answer, or once `stop` is set (the supervisor is stopping: not waited for)."""
    stop = stop or threading.Event()
    prompts = []
    for kwargs in (None, THINKING_OFF):
        body: dict[str, Any] = {
            "model": served_model(settings),
            "messages": [{"role": "user", "content": "Is the gripper open?"}],
            "add_generation_prompt": True,
        }
        if kwargs is not None:
            body["chat_template_kwargs"] = dict(kwargs)
        answer = post_json_unless_stopped(
            f"{settings.url}/tokenize", body, timeout_s, api_key(settings), stop
        )
        if answer is None or answer[0] != 200 or not isinstance(answer[1].get("tokens"), list):
            return None
        prompts.append(answer[1]["tokens"])
    return bool(prompts[0] != prompts[1])


def check_thinking_switch(
    settings: ServerSettings,
    version: str,
    grammars: Mapping[str, TaskGrammar],
    stop: threading.Event | None = None,
) -> list[str]:
    """Behind a reasoning parser (without enable_in_reasoning) vLLM applies a grammar only once reasoning is
    over; a task that does not reason ends it in the prompt with the template's thinking switch. A template
    without the switch leaves those tasks' grammars waiting for a </think> that never comes, on every release:
    ConfigError naming the remedy. Returns notes for the log. A stop (`stop` set) ends the check at once."""
    if not settings.reasoning_parser or settings.structured_outputs.get("enable_in_reasoning"):
        return []
    plain = [name for name, grammar in grammars.items() if not grammar.reasoning]
    if not plain:
        return []
    found = thinking_switch(settings, stop)
    if found is None:
        if stop is not None and stop.is_set():
            return ["thinking switch: not checked, the supervisor is stopping"]
        return ["thinking switch: not checked, the server's /tokenize did not answer"]
    if found:
        return [f"thinking switch: the chat template turns thinking off for {', '.join(plain)}"]
    raise ConfigError(
        f"vLLM {version} with reasoning_parser {settings.reasoning_parser}: the chat template of "
        f"{settings.model} has no thinking switch (enable_thinking: false leaves its prompt as it is), so "
        f"the grammar of {', '.join(plain)} (tasks that do not reason) would wait for a </think> that never "
        "comes and their answers would not be constrained. Set structured_outputs.enable_in_reasoning: true "
        "(grammars from the first token; tasks that reason then answer without reasoning), or leave "
        "reasoning_parser empty (the node splits the reasoning itself)"
    )
