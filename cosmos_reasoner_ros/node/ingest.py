"""One camera's messages to buffered frames, without ROS (messages are duck-typed): the stamp checked against
the receive time, decimation before decoding, conversion with the size and kind limits, the buffer, and
pre-encoding of kept frames; every refusal counted by kind and reported, throttled; every arrival, with its
stamp and publisher sequence number, counted against what the camera sent (clips.Arrivals). Never raises: a
bad frame must not stop the camera stream.
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

_KINDS = ("too large", "bad stamp", "not colour", "undecodable")  # in the order a refusal message lists them


def _kind(exc: FrameError) -> str:
    if isinstance(exc, FrameTooLarge):
        return "too large"
    if isinstance(exc, ImplausibleStamp):
        return "bad stamp"
    return "not colour" if isinstance(exc, NonColourImage) else "undecodable"


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
        # Refusals since the camera's last buffered frame, by kind, and the newest reason: what a request
        # without frames is told. The cumulative counts (stats) would blame bad frames of an hour ago on a
        # camera that has simply stopped. A plain dict: copied whole (atomically) by the reader.
        self._refused: dict[str, int] = {}
        self._last_refusal = ""

    def refusals(self) -> str:
        """What this camera's frames refused since its last buffered one were, by kind, with the newest reason
        ("" when none was refused since)."""
        refused = dict(self._refused)  # the camera's callback may add to it meanwhile
        total = sum(refused.values())
        if not total:
            return ""
        listed = ", ".join(f"{k} {n}" for k in _KINDS if (n := refused.get(k, 0)))
        since = " since its last buffered frame" if self.stats.added else ""
        last = self._last_refusal[:200]
        return f"camera {self.camera}: {total} frame(s) refused{since} ({listed}); last: {last}"

    def _refuse(self, kind: str, error: str) -> None:
        self.stats.invalid += 1
        self.stats.last_error = error
        self._refused[kind] = self._refused.get(kind, 0) + 1
        self._last_refusal = error

    def __call__(self, msg: Any, receive_ns: int, sequence: int | None = None) -> None:
        """One message, received at receive_ns (the node's clock); `sequence`: its publisher's sequence number
        where the middleware gives it (frames lost before this callback are then counted exactly)."""
        stats = self.stats
        stats.received += 1
        stats.last_receive = time.monotonic()
        stamp: int | None = None
        try:
            try:
                stamp = message_stamp_ns(msg, receive_ns, self._use_receive_time, self._max_ahead_s)
            finally:  # refused for its stamp or not, it arrived: counted against what the camera sent
                stats.arrivals.observe(stats.last_receive, stamp, sequence)
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
            self._refused.clear()
            if self._pre_encoder is not None and self._pre_encoding():
                self._pre_encoder.submit(kept)
            self.frame_id = self.frame_id or frame_id
        except FrameError as exc:
            stats.too_large += isinstance(exc, FrameTooLarge)
            stats.bad_stamp += isinstance(exc, ImplausibleStamp)
            stats.not_colour += isinstance(exc, NonColourImage)
            self._refuse(_kind(exc), str(exc))
            # Numbers vary between frames of one problem (sizes, stamps): one key per kind of message.
            key = re.sub(r"\d+", "#", str(exc))
            self._problems.report(
                f"frame:{self.camera}:{key}", f"camera {self.camera}: dropped a frame: {exc}"
            )
        except Exception as exc:  # a bug must not stop the camera stream
            self._refuse("undecodable", f"{type(exc).__name__}: {exc}")
            self._problems.report(
                f"frame-bug:{self.camera}:{type(exc).__name__}", f"camera {self.camera}: {exc!r}"
            )
