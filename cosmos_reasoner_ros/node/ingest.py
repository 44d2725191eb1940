"""One camera's messages to buffered frames, without ROS (messages are duck-typed): the stamp checked against
the receive time, decimation before decoding, conversion with the size and kind limits, the buffer, and
pre-encoding of kept frames; every refusal counted by kind and reported, throttled. Never raises: a bad frame
must not stop the camera stream.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from cosmos_reasoner_ros.clips import ClipBuffer, Frame, PreEncoder, message_stamp_ns, message_to_array
from cosmos_reasoner_ros.errors import FrameError, FrameTooLarge, ImplausibleStamp, NonColourImage
from cosmos_reasoner_ros.node.diagnostics import CameraStats, ProblemLog

__all__ = ["CameraIngest"]


class CameraIngest:
    """Call with each image message and its receive time; `frame_id` is the override or the images' own."""

    def __init__(
        self,
        camera: str,
        buffer: ClipBuffer,
        problems: ProblemLog,
        *,
        use_receive_time: bool,
        max_stamp_ahead_s: float,
        max_pixels: int,
        frame_id: str = "",
        pre_encoder: PreEncoder | None = None,
        pre_encoding: Callable[[], bool] = lambda: True,
    ) -> None:
        self.camera, self.buffer, self._problems = camera, buffer, problems
        self._use_receive_time, self._max_ahead_s, self._max_pixels = (
            use_receive_time,
            max_stamp_ahead_s,
            max_pixels,
        )
        self._frame_id_override = frame_id
        self.frame_id = frame_id
        self._pre_encoder, self._pre_encoding = pre_encoder, pre_encoding
        self.stats = CameraStats()

    def refusals(self) -> str:
        """What this camera's refused frames were, by kind, with the newest reason ("" when none was)."""
        s = self.stats
        if not s.invalid:
            return ""
        kinds = {"too large": s.too_large, "bad stamp": s.bad_stamp, "not colour": s.not_colour}
        other = s.invalid - sum(kinds.values())
        listed = ", ".join(f"{k} {n}" for k, n in (*kinds.items(), ("undecodable", other)) if n)
        return f"camera {self.camera}: {s.invalid} frame(s) refused ({listed}); last: {s.last_error[:200]}"

    def __call__(self, msg: Any, receive_ns: int) -> None:
        stats = self.stats
        stats.received += 1
        stats.last_receive = time.monotonic()
        try:
            stamp = message_stamp_ns(msg, receive_ns, self._use_receive_time, max_ahead_s=self._max_ahead_s)
            if not self.buffer.wants(stamp):  # decimate before paying for decoding
                stats.skipped += 1
                return
            # add() resizes or copies: no second copy here.
            image = message_to_array(msg, copy=False, max_pixels=self._max_pixels, colour_only=True)
            frame_id = self._frame_id_override or msg.header.frame_id
            kept = self.buffer.add(Frame(camera=self.camera, stamp_ns=stamp, image=image, frame_id=frame_id))
            if kept is None:
                stats.dropped += 1
                return
            stats.added += 1
            if self._pre_encoder is not None and self._pre_encoding():
                self._pre_encoder.submit(kept)
            self.frame_id = self.frame_id or frame_id
        except FrameError as exc:
            stats.invalid += 1
            stats.too_large += isinstance(exc, FrameTooLarge)
            stats.bad_stamp += isinstance(exc, ImplausibleStamp)
            stats.not_colour += isinstance(exc, NonColourImage)
            stats.last_error = str(exc)
            # Numbers vary between frames of one problem (sizes, stamps): one key per kind of message.
            key = re.sub(r"\d+", "#", str(exc))
            self._problems.report(
                f"frame:{self.camera}:{key}", f"camera {self.camera}: dropped a frame: {exc}"
            )
        except Exception as exc:  # a bug must not stop the camera stream
            stats.invalid += 1
            stats.last_error = f"{type(exc).__name__}: {exc}"
            self._problems.report(
                f"frame-bug:{self.camera}:{type(exc).__name__}", f"camera {self.camera}: {exc!r}"
            )
