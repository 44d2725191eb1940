"""Per-camera frame buffers: decimated to the clip sampling rate before decoding, bounded, time-indexed.

A clip is the frames in [end - seconds, end] with their true stamps; several cameras share one time window.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import threading
from dataclasses import dataclass

import cv2
import numpy as np

from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.errors import NoFramesError

__all__ = ["BufferStats", "Clip", "ClipBuffer", "fit_long_side"]

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
    dropped: int  # refused by add(): duplicate, out of order, larger than the byte bound, or a wild stamp
    resets: int  # backward jumps of the stamps (a looping bag) that cleared the buffer
    frames: int
    fill_bytes: int
    fill_seconds: float
    max_bytes: int
    max_seconds: float
    latest_stamp_ns: int | None
    # Lone wild stamps, dropped: far behind the newest frame but not followed by a new timeline, or a frame
    # that had jumped ahead and was left behind by the frames after it. Also counted in decimated / dropped.
    outliers: int = 0


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


@dataclass(frozen=True)
class _Grid:
    """Decimation state: the next grid point of the sampling rate and the newest kept stamp (None: empty)."""

    next_ns: int | None = None
    last_kept_ns: int | None = None

    def due(self, stamp: int, period_ns: int, slack_ns: float) -> bool:
        if self.next_ns is None or self.last_kept_ns is None:
            return True
        if stamp - self.last_kept_ns < period_ns / 2:  # duplicates, older stamps, bursts
            return False
        return stamp >= self.next_ns - slack_ns

    def advanced(self, stamp: int, period_ns: int, slack_ns: float) -> _Grid:
        """The grid after keeping a frame at `stamp`."""
        if self.next_ns is None or stamp >= self.next_ns + period_ns - slack_ns:
            next_ns = stamp + period_ns  # first frame or after a gap: start a new grid here
        else:
            next_ns = self.next_ns + period_ns
        last = stamp if self.last_kept_ns is None else max(self.last_kept_ns, stamp)
        return _Grid(next_ns, last)


class ClipBuffer:
    """One camera's frames: decimated on a grid of 1/sample_fps, bounded by duration and by bytes.

    Thread-safe: image callbacks call wants()/add() while request threads call clip(). Decimation keeps the
    frame nearest each grid point (within half the input interval), so a 30 Hz camera sampled at 4 fps gives
    exactly 4 frames per second on average.

    Stamps that jump: a stamp more than jump_back_s behind the newest one starts a tentative new timeline.
    When jump_confirm frames in a row (consistent among themselves) follow it, the timeline is real (a
    looping bag, a restarted driver) and the buffer is cleared, so clips never mix two timelines; the
    tentative frames are then kept. A lone wild stamp, followed by frames on the old timeline, is dropped and
    counted (`outliers`). A frame stamped ahead is kept at once (a camera resuming after a pause looks the
    same); when the frames after it fall back behind it, that frame alone is dropped as an outlier. Less than
    max_seconds ahead, it cuts the window at once (frames older than its stamp - max_seconds leave); more,
    and the frames it would push out all at once stay (within the byte bound) until a frame after it
    confirms it. Stamps ahead of the receive time are refused before the buffer (image_conversion's
    check_stamp). Up to jump_confirm - 1 tentative frames are held outside the byte bound meanwhile.
    """

    def __init__(
        self,
        camera: str,
        sample_fps: float,
        max_seconds: float,
        max_bytes: int,
        max_long_side: int,
        jump_back_s: float = 1.0,
        jump_confirm: int = 3,
    ) -> None:
        if not sample_fps > 0:
            raise ValueError(f"sample_fps must be > 0, got {sample_fps}")
        if not max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        if not jump_back_s > 0:
            raise ValueError(f"jump_back_s must be > 0, got {jump_back_s}")
        if jump_confirm < 1:
            raise ValueError(f"jump_confirm must be >= 1, got {jump_confirm}")
        self.camera = camera
        self.sample_fps = float(sample_fps)
        self.max_seconds = float(max_seconds)
        self.max_bytes = int(max_bytes)
        self.max_long_side = int(max_long_side)
        self._period_ns = round(_NS / sample_fps)
        self._max_span_ns = round(max_seconds * _NS)
        self._jump_back_ns = round(jump_back_s * _NS)
        self._jump_confirm = int(jump_confirm)
        self._lock = threading.Lock()
        self._stamps: list[int] = []
        self._frames: list[Frame] = []
        self._bytes = 0
        self._grid = _Grid()
        self._last_seen_ns: int | None = None
        self._interval_ns: float | None = None  # moving average of the input interval
        # (last seen, interval) before the last jump ahead: restored when that jump was a wild stamp
        self._seen_before_jump: tuple[int | None, float | None] = (None, None)
        # A tentative new timeline: stamps far behind the newest in a row, and those of its frames that were
        # due on its own grid (counted as dropped until confirmed).
        self._candidates: list[int] = []
        self._pending: list[Frame] = []
        self._pending_grid = _Grid()
        self._pending_seen: tuple[int | None, float | None] = (None, None)  # (last seen, interval) of it
        # Whether the candidates continue the buffer once the frames ahead of them are dropped (those frames
        # are then the wild ones), rather than starting a timeline of their own.
        self._continues = False
        # The grid as it was before each of the last frames was kept: restored when such a frame turns out
        # to carry a wild stamp, so that what is kept does not depend on it.
        self._grid_before: collections.deque[tuple[int, _Grid]] = collections.deque(maxlen=4)
        # A frame that jumped more than max_seconds ahead: the window is not cut by it until confirmed.
        self._ahead_ns: int | None = None
        self._received = self._decimated = self._added = self._dropped = self._resets = self._outliers = 0

    # -- ingest --------------------------------------------------------------------------------------------

    def wants(self, stamp_ns: int) -> bool:
        """Whether a frame with this stamp would be kept: call before decoding it. Cheap."""
        with self._lock:
            self._received += 1
            if self._off_timeline(stamp_ns):
                due = self._candidate(stamp_ns)
            else:
                self._forget_candidates()
                self._observe(stamp_ns)
                due = self._grid.due(stamp_ns, self._period_ns, self._slack_ns())
            if not due:
                self._decimated += 1
            return due

    def add(self, frame: Frame) -> Frame | None:
        """Keep a frame if it is due (resized to max_long_side): the frame as kept, None when dropped (or held
        as one of the first frames of a tentative new timeline)."""
        image = fit_long_side(frame.image, self.max_long_side)
        if image is frame.image and image.base is not None:
            # A view (of a message buffer, or of a larger array) would pin memory the bound does not count.
            image = image.copy()
        if image is not frame.image:
            height, width = frame.image.shape[:2]
            frame = dataclasses.replace(frame, image=image, source_size=frame.source_size or (width, height))
        stamp = frame.stamp_ns
        with self._lock:
            if self._off_timeline(stamp):
                if not (self._candidates and self._candidates[-1] == stamp):  # not offered to wants()
                    self._candidate(stamp)
                if self._off_timeline(stamp):  # still tentative: hold it for the new timeline
                    self._hold(frame)
                    return None
            else:
                self._forget_candidates()
            return frame if self._insert(frame) else None

    def _insert(self, frame: Frame) -> bool:
        nbytes = int(frame.image.nbytes)
        stamp = frame.stamp_ns
        if nbytes > self.max_bytes or not self._grid.due(stamp, self._period_ns, self._slack_ns()):
            self._dropped += 1
            return False
        index = bisect.bisect_left(self._stamps, stamp)
        if index < len(self._stamps) and self._stamps[index] == stamp:
            self._dropped += 1
            return False
        self._grid_before.append((stamp, self._grid))
        self._grid = self._grid.advanced(stamp, self._period_ns, self._slack_ns())
        self._place(index, frame)
        return True

    def _place(self, index: int, frame: Frame) -> None:
        """Put a frame the grid has accepted at `index`, then apply the bounds."""
        stamp = frame.stamp_ns
        if self._stamps and stamp > self._stamps[-1] + self._max_span_ns:
            self._ahead_ns = stamp  # would empty the window: wait for the next frame to confirm it
        elif self._ahead_ns is not None and stamp >= self._ahead_ns:
            self._ahead_ns = None  # a frame after it: the jump was real (a camera resuming)
        self._stamps.insert(index, stamp)
        self._frames.insert(index, frame)
        self._bytes += int(frame.image.nbytes)
        self._added += 1
        self._evict()

    def _observe(self, stamp: int) -> None:
        if self._last_seen_ns is not None and stamp - self._last_seen_ns > self._jump_back_ns:
            self._seen_before_jump = (self._last_seen_ns, self._interval_ns)
        self._last_seen_ns, self._interval_ns = self._observed(self._last_seen_ns, self._interval_ns, stamp)

    def _observed(
        self, last_seen: int | None, interval: float | None, stamp: int
    ) -> tuple[int, float | None]:
        """(last seen, moving average of the input interval) after seeing `stamp`."""
        if last_seen is not None:
            delta = stamp - last_seen
            # A gap (dropped messages, a paused bag) says nothing about the camera's rate.
            if 0 < delta <= 2 * self._period_ns:
                interval = delta if interval is None else 0.9 * interval + 0.1 * delta
        return stamp, interval

    # -- stamps that jump ----------------------------------------------------------------------------------

    def _off_timeline(self, stamp: int) -> bool:
        newest = self._stamps[-1] if self._stamps else self._grid.last_kept_ns
        return newest is not None and stamp < newest - self._jump_back_ns

    def _candidate(self, stamp: int) -> bool:
        """A stamp far behind the newest: one more of a tentative timeline, confirmed after jump_confirm in a
        row. Returns whether its frame is due (on the tentative timeline's grid, or once confirmed the
        buffer's)."""
        last = self._candidates[-1] if self._candidates else None
        if last is not None and not (last - self._jump_back_ns <= stamp <= last + self._max_span_ns):
            self._forget_candidates()  # not a continuation of the earlier ones: those were lone outliers
        if not self._candidates:
            self._start_candidates(stamp)
        elif self._candidates[-1] != stamp:
            self._candidates.append(stamp)
            self._pending_seen = self._observed(*self._pending_seen, stamp)
        if len(self._candidates) >= self._jump_confirm:
            self._confirm_jump()
            return self._grid.due(stamp, self._period_ns, self._slack_ns())
        return self._pending_grid.due(stamp, self._period_ns, self._slack_for(self._pending_seen[1]))

    def _start_candidates(self, stamp: int) -> None:
        self._candidates = [stamp]
        # Do the frames up to this stamp continue into it, with only newer ones (a wild stamp ahead) in the
        # way? Then it is decimated on the grid as it was before those frames came.
        keep = bisect.bisect_right(self._stamps, stamp + self._jump_back_ns)
        self._continues = 0 < keep < len(self._stamps) and self._stamps[keep - 1] < stamp
        self._pending_grid = _Grid()
        seen = self._seen_before_jump if self._continues else (None, None)
        self._pending_seen = self._observed(*seen, stamp)
        if self._continues:
            first_ahead = self._stamps[keep]
            before = [grid for kept, grid in self._grid_before if kept == first_ahead]
            self._pending_grid = (
                before[0]
                if before
                else _Grid(self._stamps[keep - 1] + self._period_ns, self._stamps[keep - 1])
            )

    def _hold(self, frame: Frame) -> None:
        self._dropped += 1  # until its timeline is confirmed
        slack = self._slack_for(self._pending_seen[1])
        if self._pending_grid.due(frame.stamp_ns, self._period_ns, slack) and (
            int(frame.image.nbytes) <= self.max_bytes
        ):
            self._pending.append(frame)
            self._pending_grid = self._pending_grid.advanced(frame.stamp_ns, self._period_ns, slack)

    def _forget_candidates(self) -> None:
        if self._candidates:
            self._outliers += len(self._candidates)  # their held frames were counted as dropped already
            self._candidates.clear()
            self._pending.clear()

    def _confirm_jump(self) -> None:
        """jump_confirm stamps in a row behind the newest: a real timeline. Either the frames ahead of it
        carry wild stamps (the buffer up to them continues into the new stamps: drop just those), or the
        whole buffer belongs to another timeline (clear it). Then the held frames are kept."""
        if self._continues:
            keep = bisect.bisect_right(self._stamps, self._candidates[0] + self._jump_back_ns)
            self._outliers += len(self._stamps) - keep
            self._bytes -= sum(int(f.image.nbytes) for f in self._frames[keep:])
            del self._stamps[keep:]
            del self._frames[keep:]
        else:
            self._stamps.clear()
            self._frames.clear()
            self._bytes = 0
            self._resets += 1
        self._ahead_ns = None
        self._grid_before.clear()
        # The rate and the grid as seen along the confirmed timeline: learnt afresh for a new one, continued
        # from before the wild frames otherwise.
        self._grid = self._pending_grid
        self._last_seen_ns, self._interval_ns = self._pending_seen
        pending, self._pending, self._candidates = self._pending, [], []
        for frame in pending:
            self._dropped -= 1  # counted as dropped while held
            self._place(len(self._stamps), frame)

    def _slack_ns(self) -> float:
        return self._slack_for(self._interval_ns)

    def _slack_for(self, interval: float | None) -> float:
        # Accept a frame up to half an input interval before its grid point: with input near the sampling
        # rate, jitter must not drop frames; with dense input, the frame nearest the grid point wins.
        half_period = self._period_ns / 2
        if interval is None:
            return half_period
        return min(half_period, interval / 2)

    def _evict(self) -> None:
        # While a frame that jumped far ahead is unconfirmed, the window is cut at the newest frame before it.
        if self._ahead_ns is None or len(self._stamps) < 2:
            end = self._stamps[-1]
        else:
            end = self._stamps[bisect.bisect_left(self._stamps, self._ahead_ns) - 1]
        drop = bisect.bisect_left(self._stamps, end - self._max_span_ns)
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
            self._grid = _Grid()
            self._last_seen_ns = self._ahead_ns = None
            self._candidates.clear()
            self._pending.clear()
            self._grid_before.clear()

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
                outliers=self._outliers,
            )
