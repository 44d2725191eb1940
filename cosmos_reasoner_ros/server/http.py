"""HTTP to the supervisor's own vLLM server, with the standard library only (a GPU host needs none of the
node's client): /health, JSON POSTs, and POSTs that a stop does not wait for (a server that accepts the
connection and never answers, frozen or compiling, must not hold up SIGTERM)."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .settings import ServerSettings

__all__ = [
    "api_key",
    "get_text",
    "health_ok",
    "health_ok_unless_stopped",
    "post_json",
    "post_json_unless_stopped",
    "served_model",
]

_POLL_S = 0.05  # how often a waiting caller looks at its stop event
_T = TypeVar("_T")


def served_model(settings: ServerSettings) -> str:
    """The model name requests to the server carry."""
    return settings.served_model_name or settings.model


def api_key(settings: ServerSettings) -> str:
    """The server's API key (from the variable `api_key_env` names), sent as a bearer token; '' for none."""
    return os.environ.get(settings.api_key_env, "").strip() if settings.api_key_env else ""


def health_ok(url: str, timeout_s: float = 5.0) -> bool:
    """GET {url}/health answers 200 within timeout_s."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as resp:  # noqa: S310 (http(s) URL checked)
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def health_ok_unless_stopped(url: str, timeout_s: float, stop: threading.Event) -> bool | None:
    """health_ok on a thread of its own, waited for only until `stop` is set: None then."""
    return _unless_stopped(lambda: health_ok(url, timeout_s), stop)


def get_text(url: str, timeout_s: float) -> str | None:
    """The body of a GET answered 200 (vLLM's /metrics), None otherwise."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (the server's own URL)
            return resp.read().decode("utf-8", errors="replace") if resp.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def post_json(
    url: str,
    body: Mapping[str, Any],
    timeout_s: float,
    api_key: str = "",
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of a POST; status 0 with {"error": ...} when the server cannot be reached."""
    sent = {"Content-Type": "application/json", **(headers or {})}
    if api_key:
        sent["Authorization"] = f"Bearer {api_key}"
    # The URL is the supervisor's own server (http(s) only, from its settings).
    request = urllib.request.Request(url, json.dumps(body).encode(), sent, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            return int(response.status), _json(response.read())
    except urllib.error.HTTPError as err:
        return int(err.code), _json(err.read())
    except (OSError, ValueError) as err:  # refused, reset, timed out, a bad URL
        return 0, {"error": {"message": f"{type(err).__name__}: {err}"}}


def post_json_unless_stopped(
    url: str, body: Mapping[str, Any], timeout_s: float, api_key: str, stop: threading.Event
) -> tuple[int, dict[str, Any]] | None:
    """post_json on a thread of its own, waited for only until `stop` is set: None then (the supervisor stops
    the server next, which ends the abandoned request)."""
    return _unless_stopped(lambda: post_json(url, body, timeout_s, api_key), stop)


def _unless_stopped(call: Callable[[], _T], stop: threading.Event) -> _T | None:
    """call() on a thread of its own; its result, or None once `stop` is set before it returned."""
    done: list[_T] = []
    worker = threading.Thread(target=lambda: done.append(call()), name="vllm-http", daemon=True)
    worker.start()
    while worker.is_alive() and not stop.wait(_POLL_S):
        pass
    return done[0] if done else None


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data or b"{}")
    except ValueError:
        return {"error": {"message": data[:200].decode("utf-8", "replace")}}
    return value if isinstance(value, dict) else {"value": value}
