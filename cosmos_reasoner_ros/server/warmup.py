"""What the supervisor does with a healthy server before it announces READY: checks that the served chat
template can turn thinking off where the node's requests need it (behind a reasoning parser), then warm-up
requests shaped like the node's, so that kernels and grammars compile before a robot's first question.

Talks to vLLM over HTTP with the standard library only (a GPU host needs none of the node's core)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import struct
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.structured_output import THINKING_OFF, TaskGrammar, request_fields

from .errors import ConfigError
from .settings import ServerSettings
from .versions import video_kwargs_mode

__all__ = ["Warmup", "check_thinking_switch", "post_json", "thinking_switch"]


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


# ---- warm-up requests ----

CLIP = Path(__file__).resolve().parents[1] / "data" / "robotics_next_action.mp4"  # 26 frames, 644x476, 4 fps
_WARMUP_FILE = "cosmos-reasoner-warmup.mp4"
# Shaped like the node's requests: its default video sampling (sample_fps 4, max_frames 256) and the shipped
# reasoning profile (the sampler's top-k/top-p path); answers cut short: what compiles is on the way there.
_FPS, _FRAMES, _MAX_TOKENS = 4.0, 256, 16
_SAMPLING = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}


@dataclass
class Warmup:
    """The warm-up of one start: a video request, then one request per structured task (its grammar, as the
    node sends it: vLLM caches compiled grammars by the schema's text), within `timeout_s` in all. A request
    the server refuses or fails is logged and the next one sent: READY is never held longer than timeout_s."""

    settings: ServerSettings
    version: str
    grammars: Mapping[str, TaskGrammar]
    media_kwargs: bool  # the server takes per-request media kwargs (before 0.31, or with the trust flag)
    say: Callable[[str], None] = print
    timeout_s: float = 120.0
    stop: threading.Event = field(default_factory=threading.Event)  # set: the supervisor is stopping
    results: list[tuple[str, int, float]] = field(default_factory=list)  # (what, HTTP status, seconds)

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        started = time.monotonic()
        with self._video() as video:
            image = {"type": "image_url", "image_url": {"url": _png_data_url()}}
            requests: list[tuple[str, list[dict[str, Any]], dict[str, Any] | None, bool]] = [
                ("video", [video], None, True)
            ]
            for name, grammar in self.grammars.items():
                part = video if grammar.media == "video" else image
                requests.append((name, [part], grammar.json_schema, grammar.reasoning))
            for what, parts, schema, reasoning in requests:
                left = deadline - time.monotonic()
                if self.stop.is_set():
                    self.say("warm-up: stopped (the supervisor is stopping)")
                    return
                if left <= 1.0:
                    self.say(
                        f"warm-up: stopped after {self.timeout_s:.0f} s (warmup_timeout_s), {what} not sent"
                    )
                    break
                status, seconds, problem = self._send(parts, schema, reasoning, video is parts[0], left)
                self.results.append((what, status, seconds))
                if self.stop.is_set():
                    self.say("warm-up: stopped (the supervisor is stopping)")
                    return
                if problem:
                    self.say(f"warm-up: {what}: {problem} (continuing)")
        ok = sum(1 for _, status, _ in self.results if status == 200)
        detail = ", ".join(f"{what} {seconds:.2f} s" for what, _, seconds in self.results)
        self.say(
            f"warm-up: {ok}/{len(self.results)} requests in {time.monotonic() - started:.1f} s ({detail})"
        )

    @contextlib.contextmanager
    def _video(self) -> Iterator[dict[str, Any]]:
        """The shipped robot clip as the node sends clips: a file in the media directory (removed afterwards),
        or a data: URL where the server reads no files."""
        url, path = "", None
        if self.settings.media_dir:
            path = Path(self.settings.media_dir).expanduser().resolve() / _WARMUP_FILE
            try:
                shutil.copyfile(CLIP, path)
                url = path.as_uri()
            except OSError:
                path = None
        if not url:
            url = "data:video/mp4;base64," + base64.b64encode(CLIP.read_bytes()).decode()
        try:
            yield {"type": "video_url", "video_url": {"url": url}}
        finally:
            if path is not None:
                path.unlink(missing_ok=True)

    def _send(
        self,
        parts: list[dict[str, Any]],
        schema: dict[str, Any] | None,
        reasoning: bool,
        video: bool,
        left: float,
    ) -> tuple[int, float, str]:
        body: dict[str, Any] = {
            "model": served_model(self.settings),
            "messages": [
                {"role": "user", "content": [*parts, {"type": "text", "text": "What happens next?"}]}
            ],
            "max_tokens": _MAX_TOKENS,
            **_SAMPLING,
            **request_fields(schema, reasoning),
        }
        if video and self.media_kwargs:
            if video_kwargs_mode(self.version) == "media_io_kwargs":
                body["media_io_kwargs"] = {"video": {"num_frames": _FRAMES, "fps": _FPS}}
            else:
                body["mm_processor_kwargs"] = {"fps": _FPS, "do_sample_frames": True}
        started = time.monotonic()
        # On a thread of its own, so that a stop does not wait for the answer (the server is stopped next).
        done: list[tuple[int, dict[str, Any]]] = []
        url, key = f"{self.settings.url}/v1/chat/completions", api_key(self.settings)
        worker = threading.Thread(target=lambda: done.append(post_json(url, body, left, key)), daemon=True)
        worker.start()
        while worker.is_alive() and not self.stop.wait(0.05):
            pass
        seconds = time.monotonic() - started
        if not done:
            return 0, seconds, "stopped"
        status, answer = done[0]
        if status == 200:
            return status, seconds, ""
        error = answer.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return status, seconds, f"HTTP {status}: {str(message)[:200]}" if status else str(message)[:200]


def _png_data_url(width: int = 224, height: int = 224) -> str:
    """A small grey gradient as a PNG data: URL (the image path of the image tasks), made without imaging
    libraries (a GPU host needs none)."""
    rows = b"".join(b"\0" + bytes((x + y) % 256 for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()
