"""What the supervisor does with a healthy server before it announces READY: checks that the served chat
template can turn thinking off where the node's requests need it (behind a reasoning parser), then warm-up
requests shaped like the node's, so that kernels and grammars compile before a robot's first question.

Talks to vLLM over HTTP with the standard library only (a GPU host needs none of the node's core)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from cosmos_reasoner_ros.structured_output import THINKING_OFF, TaskGrammar

from .errors import ConfigError
from .settings import ServerSettings

__all__ = ["check_thinking_switch", "post_json", "thinking_switch"]


def post_json(
    url: str, body: Mapping[str, Any], timeout_s: float, api_key: str = ""
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of a POST; status 0 with {"error": ...} when the server cannot be reached."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    # The URL is the supervisor's own server (http(s) only, from its settings).
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            return int(response.status), _json(response.read())
    except urllib.error.HTTPError as err:
        return int(err.code), _json(err.read())
    except (OSError, ValueError) as err:  # refused, reset, timed out, a bad URL
        return 0, {"error": {"message": f"{type(err).__name__}: {err}"}}


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data or b"{}")
    except ValueError:
        return {"error": {"message": data[:200].decode("utf-8", "replace")}}
    return value if isinstance(value, dict) else {"value": value}


def served_model(settings: ServerSettings) -> str:
    return settings.served_model_name or settings.model


def api_key(settings: ServerSettings) -> str:
    return os.environ.get(settings.api_key_env, "").strip() if settings.api_key_env else ""


def thinking_switch(settings: ServerSettings, timeout_s: float = 30.0) -> bool | None:
    """Whether the served chat template has the thinking switch: the prompt of one message differs with
    `enable_thinking: false` (vLLM drops the key where the template has no such variable). None when the
    server's /tokenize does not answer."""
    prompts = []
    for kwargs in (None, THINKING_OFF):
        body: dict[str, Any] = {
            "model": served_model(settings),
            "messages": [{"role": "user", "content": "Is the gripper open?"}],
            "add_generation_prompt": True,
        }
        if kwargs is not None:
            body["chat_template_kwargs"] = dict(kwargs)
        status, answer = post_json(f"{settings.url}/tokenize", body, timeout_s, api_key(settings))
        if status != 200 or not isinstance(answer.get("tokens"), list):
            return None
        prompts.append(answer["tokens"])
    return bool(prompts[0] != prompts[1])


def check_thinking_switch(
    settings: ServerSettings, version: str, grammars: Mapping[str, TaskGrammar]
) -> list[str]:
    """Behind a reasoning parser (without enable_in_reasoning) vLLM applies a grammar only once reasoning is
    over; a task that does not reason ends it in the prompt with the template's thinking switch. A template
    without the switch leaves those tasks' grammars waiting for a </think> that never comes, on every release:
    ConfigError naming the remedy. Returns notes for the log."""
    if not settings.reasoning_parser or settings.structured_outputs.get("enable_in_reasoning"):
        return []
    plain = [name for name, grammar in grammars.items() if not grammar.reasoning]
    if not plain:
        return []
    found = thinking_switch(settings)
    if found is None:
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
