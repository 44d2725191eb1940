"""Per-camera frame buffers: decimated to the clip sampling rate before decoding, bounded, time-indexed.

A clip is the frames in [end - seconds, end] with their true stamps; several cameras share one time window.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from cosmos_reasoner_ros.errors import NoFramesError
from cosmos_reasoner_ros.image_conversion import Frame

__all__ = ["BufferStats", "Clip", "ClipBuffer", "MultiCameraBuffer", "fit_long_side"]

_NS = 1_000_000_000


@dataclass(frozen=True)
class Clip:
    """Frames of one camera in a time window, oldest first, with their true stamps.

    start_ns/end_ns are the stamps of the first and last frame (not the requested window's bounds).
    """

    camera: str
    frames: tuple[Frame, ...]
    start_ns: int
    end_ns: int
    fps: float  # the buffer's sampling rate; the true rate follows from the stamps
    width: int  # [px] size of the frames in the clip (downscaled to the buffer's max_long_side)
    height: int
    source_width: int = 0  # [px] size of the camera's own images (newest frame); 0: width / height
    source_height: int = 0

    @property
    def source_size(self) -> tuple[int, int]:
        """(width, height) of the camera's images: the pixel space answers are reported in."""
        return (self.source_width or self.width, self.source_height or self.height)

    @property
    def duration_s(self) -> float:
        """Time covered by the frames' stamps (0 for a single frame)."""
        return (self.end_ns - self.start_ns) / _NS


@dataclass(frozen=True)
class BufferStats:
    """Counters and fill level of one camera buffer, for diagnostics."""

    camera: str
    received: int  # stamps offered to wants()
    decimated: int  # refused by wants(): not due at the sampling rate (never decoded)
    added: int  # frames kept by add()
    dropped: int  # refused by add(): duplicate, out of order, or larger than the byte bound
    resets: int  # backward jumps of the stamps (a looping bag) that cleared the buffer
    frames: int
    fill_bytes: int
    fill_seconds: float
    max_bytes: int
    max_seconds: float
    latest_stamp_ns: int | None


def fit_long_side(image: np.ndarray, max_long_side: int) -> np.ndarray:
    """Shrink so the long side is at most max_long_side (even sizes, for yuv420p video); never enlarges."""
    height, width = image.shape[:2]
    long_side = max(height, width)
    if max_long_side <= 0 or long_side <= max_long_side:
        return image
    scale = max_long_side / long_side
    size = (max(2, round(width * scale / 2) * 2), max(2, round(height * scale / 2) * 2))
    if image.ndim == 2 and image.dtype != np.uint8:
        # Depth must not be averaged across object edges.
        return cv2.resize(image, size, interpolation=cv2.INTER_NEAREST)
    # Colour is area-averaged against aliasing, but OpenCV's INTER_AREA is fast only for halving
    # (1080p to 960: 0.8 ms; to 1280: 12 ms; to 640: 4.6 ms). So: halve with INTER_AREA while that stays
    # above the target, then linear for the remaining factor below 2 (1080p to 1280: 3 ms, to 640: 1 ms).
    while max(image.shape[:2]) // 2 >= max_long_side:
        half = (image.shape[1] // 2, image.shape[0] // 2)
        image = cv2.resize(image, half, interpolation=cv2.INTER_AREA)
    if image.shape[1] == size[0] and image.shape[0] == size[1]:
        return image
    return cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)


class ClipBuffer:
    """One camera's frames: decimated on a grid of 1/sample_fps, bounded by duration and by bytes.

    Thread-safe: image callbacks call wants()/add() while request threads call clip(). Decimation keeps the
    frame nearest each grid point (within half the input interval), so a 30 Hz camera sampled at 4 fps gives
    exactly 4 frames per second on average. A stamp more than jump_back_s behind the newest one (a looping
    bag, a restarted driver) clears the buffer, so clips never mix two timelines.
    """

    def __init__(
        self,
        camera: str,
        sample_fps: float,
        max_seconds: float,
        max_bytes: int,
        max_long_side: int,
        jump_back_s: float = 1.0,
    ) -> None:
        if not sample_fps > 0:
            raise ValueError(f"sample_fps must be > 0, got {sample_fps}")
        if not max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        if not jump_back_s > 0:
            raise ValueError(f"jump_back_s must be > 0, got {jump_back_s}")
        self.camera = camera
        self.sample_fps = float(sample_fps)
        self.max_seconds = float(max_seconds)
        self.max_bytes = int(max_bytes)
        self.max_long_side = int(max_long_side)
        self._period_ns = round(_NS / sample_fps)
        self._max_span_ns = round(max_seconds * _NS)
        self._jump_back_ns = round(jump_back_s * _NS)
        self._lock = threading.Lock()
        self._stamps: list[int] = []
        self._frames: list[Frame] = []
        self._bytes = 0
        self._next_ns: int | None = None  # the next grid point of the sampling rate
        self._last_kept_ns: int | None = None
        self._last_seen_ns: int | None = None
        self._interval_ns: float | None = None  # moving average of the input interval
        self._received = self._decimated = self._added = self._dropped = self._resets = 0

    # -- ingest --------------------------------------------------------------------------------------------

    def wants(self, stamp_ns: int) -> bool:
        """Whether a frame with this stamp would be kept: call before decoding it. Cheap."""
        with self._lock:
            self._received += 1
            self._observe(stamp_ns)
            due = self._due(stamp_ns)
            if not due:
                self._decimated += 1
            return due

    def add(self, frame: Frame) -> Frame | None:
        """Keep a frame if it is due (resized to max_long_side): the frame as kept, None when dropped."""
        image = fit_long_side(frame.image, self.max_long_side)
        if image is frame.image and image.base is not None:
            # A view (of a message buffer, or of a larger array) would pin memory the bound does not count.
            image = image.copy()
        if image is not frame.image:
            height, width = frame.image.shape[:2]
            frame = dataclasses.replace(frame, image=image, source_size=frame.source_size or (width, height))
        nbytes = int(image.nbytes)
        stamp = frame.stamp_ns
        with self._lock:
            self._check_jump(stamp)
            if nbytes > self.max_bytes or not self._due(stamp):
                self._dropped += 1
                return None
            index = bisect.bisect_left(self._stamps, stamp)
            if index < len(self._stamps) and self._stamps[index] == stamp:
                self._dropped += 1
                return None
            self._stamps.insert(index, stamp)
            self._frames.insert(index, frame)
            self._bytes += nbytes
            self._added += 1
            self._advance_grid(stamp)
            self._evict()
            return frame

    def _observe(self, stamp: int) -> None:
        if self._last_seen_ns is not None:
            delta = stamp - self._last_seen_ns
            # A gap (dropped messages, a paused bag) says nothing about the camera's rate.
            if 0 < delta <= 2 * self._period_ns:
                self._interval_ns = (
                    delta if self._interval_ns is None else 0.9 * self._interval_ns + 0.1 * delta
                )
        self._last_seen_ns = stamp
        self._check_jump(stamp)

    def _check_jump(self, stamp: int) -> None:
        newest = self._stamps[-1] if self._stamps else self._last_kept_ns
        if newest is not None and stamp < newest - self._jump_back_ns:
            self._stamps.clear()
            self._frames.clear()
            self._bytes = 0
            self._next_ns = self._last_kept_ns = None
            self._resets += 1

    def _slack_ns(self) -> float:
        # Accept a frame up to half an input interval before its grid point: with input near the sampling
        # rate, jitter must not drop frames; with dense input, the frame nearest the grid point wins.
        half_period = self._period_ns / 2
        if self._interval_ns is None:
            return half_period
        return min(half_period, self._interval_ns / 2)

    def _due(self, stamp: int) -> bool:
        if self._next_ns is None or self._last_kept_ns is None:
            return True
        if stamp - self._last_kept_ns < self._period_ns / 2:  # duplicates, older stamps, bursts
            return False
        return stamp >= self._next_ns - self._slack_ns()

    def _advance_grid(self, stamp: int) -> None:
        if self._next_ns is None or stamp >= self._next_ns + self._period_ns - self._slack_ns():
            self._next_ns = stamp + self._period_ns  # first frame or after a gap: start a new grid here
        else:
            self._next_ns += self._period_ns
        self._last_kept_ns = stamp if self._last_kept_ns is None else max(self._last_kept_ns, stamp)

    def _evict(self) -> None:
        drop = bisect.bisect_left(self._stamps, self._stamps[-1] - self._max_span_ns)
        freed = sum(int(f.image.nbytes) for f in self._frames[:drop])
        # The newest frame always stays: add() refused frames larger than the whole bound.
        while self._bytes - freed > self.max_bytes and drop < len(self._frames) - 1:
            freed += int(self._frames[drop].image.nbytes)
            drop += 1
        if drop:
            del self._stamps[:drop]
            del self._frames[:drop]
            self._bytes -= freed

    # -- queries -------------------------------------------------------------------------------------------

    def latest_stamp_ns(self) -> int | None:
        with self._lock:
            return self._stamps[-1] if self._stamps else None

    def latest(self, end_ns: int | None = None) -> Frame:
        """The newest frame at or before end_ns (for image tasks); raises NoFramesError."""
        with self._lock:
            if not self._stamps:
                raise NoFramesError(f"camera {self.camera!r}: no frames buffered yet")
            index = len(self._stamps) if end_ns is None else bisect.bisect_right(self._stamps, end_ns)
            if index == 0:
                raise NoFramesError(
                    f"camera {self.camera!r}: no frame at or before {end_ns} ns "
                    f"(oldest buffered {self._stamps[0]} ns)"
                )
            return self._frames[index - 1]

    def clip(self, seconds: float, end_ns: int | None = None) -> Clip:
        """The frames in [end - seconds, end] (end defaults to the newest stamp); raises NoFramesError."""
        if not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        with self._lock:
            if not self._stamps:
                raise NoFramesError(f"camera {self.camera!r}: no frames buffered yet")
            end = self._stamps[-1] if end_ns is None else end_ns
            start = end - round(seconds * _NS)
            lo = bisect.bisect_left(self._stamps, start)
            hi = bisect.bisect_right(self._stamps, end)
            frames = tuple(self._frames[lo:hi])
            held = (self._stamps[0], self._stamps[-1])
        if not frames:
            raise NoFramesError(
                f"camera {self.camera!r}: no frames in [{start}, {end}] ns "
                f"(buffer holds {held[0]}..{held[1]} ns)"
            )
        height, width = frames[-1].image.shape[:2]
        if any(f.image.shape[:2] != (height, width) for f in frames):
            # The camera changed resolution inside the window: a video needs one size, the newest wins.
            frames = tuple(
                f
                if f.image.shape[:2] == (height, width)
                else dataclasses.replace(
                    f, image=cv2.resize(f.image, (width, height), interpolation=cv2.INTER_AREA)
                )
                for f in frames
            )
        source_width, source_height = frames[-1].source_size or (width, height)
        return Clip(
            camera=self.camera,
            frames=frames,
            start_ns=frames[0].stamp_ns,
            end_ns=frames[-1].stamp_ns,
            fps=self.sample_fps,
            width=width,
            height=height,
            source_width=source_width,
            source_height=source_height,
        )

    def clear(self) -> None:
        with self._lock:
            self._stamps.clear()
            self._frames.clear()
            self._bytes = 0
            self._next_ns = self._last_kept_ns = self._last_seen_ns = None

    def stats(self) -> BufferStats:
        with self._lock:
            span = (self._stamps[-1] - self._stamps[0]) / _NS if self._stamps else 0.0
            return BufferStats(
                camera=self.camera,
                received=self._received,
                decimated=self._decimated,
                added=self._added,
                dropped=self._dropped,
                resets=self._resets,
                frames=len(self._stamps),
                fill_bytes=self._bytes,
                fill_seconds=span,
                max_bytes=self.max_bytes,
                max_seconds=self.max_seconds,
                latest_stamp_ns=self._stamps[-1] if self._stamps else None,
            )


class MultiCameraBuffer:
    """Several cameras' buffers; window() cuts one time window across them."""

    def __init__(self, buffers: Iterable[ClipBuffer]) -> None:
        self._buffers: dict[str, ClipBuffer] = {}
        for buffer in buffers:
            if buffer.camera in self._buffers:
                raise ValueError(f"camera {buffer.camera!r} configured twice")
            self._buffers[buffer.camera] = buffer

    @classmethod
    def create(
        cls,
        cameras: Sequence[str],
        sample_fps: float,
        max_seconds: float,
        max_bytes_per_camera: int,
        max_long_side: int,
    ) -> MultiCameraBuffer:
        return cls(
            ClipBuffer(c, sample_fps, max_seconds, max_bytes_per_camera, max_long_side) for c in cameras
        )

    @property
    def cameras(self) -> tuple[str, ...]:
        return tuple(self._buffers)

    def __getitem__(self, camera: str) -> ClipBuffer:
        try:
            return self._buffers[camera]
        except KeyError:
            raise NoFramesError(
                f"no camera named {camera!r}; configured: {', '.join(self._buffers)}"
            ) from None

    def window(
        self, seconds: float, cameras: Sequence[str] | None = None, end_ns: int | None = None
    ) -> list[Clip]:
        """One clip per camera over the same window; end defaults to the newest stamp all of them have."""
        names = list(cameras) if cameras else list(self._buffers)
        buffers = [self[name] for name in names]
        if end_ns is None:
            latest = {b.camera: b.latest_stamp_ns() for b in buffers}
            empty = [name for name, stamp in latest.items() if stamp is None]
            if empty:
                raise NoFramesError(f"no frames buffered yet from camera(s) {', '.join(empty)}")
            end_ns = min(stamp for stamp in latest.values() if stamp is not None)
        return [buffer.clip(seconds, end_ns) for buffer in buffers]

    def stats(self) -> dict[str, BufferStats]:
        return {name: buffer.stats() for name, buffer in self._buffers.items()}
