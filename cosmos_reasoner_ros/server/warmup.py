"""The warm-up before READY: requests shaped like the node's, sent to a healthy server so that kernels and
grammars compile before a robot's first question (the chat template's check is template_check.py)."""

from __future__ import annotations

import base64
import contextlib
import os
import struct
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.schemas.structured_output import TaskGrammar, request_fields
from cosmos_reasoner_ros.vllm_releases import video_kwargs_mode

from .http import api_key, post_json_unless_stopped, served_model
from .settings import ServerSettings

__all__ = ["Warmup"]


CLIP = Path(__file__).resolve().parents[1] / "data" / "robotics_next_action.mp4"  # 26 frames, 644x476, 4 fps
_WARMUP_PREFIX = "cosmos-reasoner-warmup-"
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
        or a data: URL where the server reads no files. The file's name is new and made with O_EXCL
        (mkstemp): supervisors sharing a media directory do not take each other's clip, and a link planted
        under a known name is never written through."""
        url, path = "", None
        if self.settings.media_dir:
            media = Path(self.settings.media_dir).expanduser().resolve()
            try:
                fd, name = tempfile.mkstemp(prefix=_WARMUP_PREFIX, suffix=".mp4", dir=media)
            except OSError:
                fd = -1
            if fd >= 0:
                path = Path(name)
                try:
                    with os.fdopen(fd, "wb") as out:
                        out.write(CLIP.read_bytes())
                    url = path.as_uri()
                except OSError:
                    path.unlink(missing_ok=True)
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
        # A stop does not wait for the answer (the server is stopped next).
        url, key = f"{self.settings.url}/v1/chat/completions", api_key(self.settings)
        done = post_json_unless_stopped(url, body, left, key, self.stop)
        seconds = time.monotonic() - started
        if done is None:
            return 0, seconds, "stopped"
        status, answer = done
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
