"""Several cameras' clip buffers cut on one time window, without ROS: `window` ends at the newest stamp all
cameras have; `fresh_window` ends at the newest camera's and leaves the stale ones out, named with the reason.
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cosmos_reasoner_ros.clips.clip_buffer import BufferStats, Clip, ClipBuffer
from cosmos_reasoner_ros.errors import NoFramesError
from cosmos_reasoner_ros.geometry import NS_PER_S

__all__ = ["DEFAULT_STALE_AFTER_S", "MultiCameraBuffer", "Window"]

# A camera whose newest frame lags the window's end by more than this (or by two sampling periods of its
# buffer, when longer) no longer shows the present: it is left out of a multi-camera window and named.
DEFAULT_STALE_AFTER_S = 1.0


@dataclass(frozen=True)
class Window:
    """The clips of the cameras that are up to date in one time window, and the cameras left out with why."""

    clips: tuple[Clip, ...]  # in the order the cameras were asked for; never empty
    stale: Mapping[str, str]  # camera -> why it has no clip (read-only)
    end_ns: int  # the window's end: the newest stamp of any asked camera, or the requested end

    @property
    def cameras(self) -> tuple[str, ...]:
        return tuple(clip.camera for clip in self.clips)


class MultiCameraBuffer:
    """Several cameras' buffers; window() cuts one time window across them, fresh_window() the same across
    those that are up to date."""

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

    def fresh_window(
        self,
        seconds: float,
        cameras: Sequence[str] | None = None,
        end_ns: int | None = None,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
    ) -> Window:
        """One clip per up-to-date camera over [end - seconds, end]; the others are named in `stale`.

        end defaults to the newest stamp of any of the cameras (not the stalest one's, as in window(), which a
        camera that stopped publishing pins in the past: every request failed). A camera is stale when it has
        no frame yet, when its newest frame at or before the end lags it by more than max(stale_after_s, two
        sampling periods of its buffer), or when it has no frame in the window. A fresh camera that lags a
        little gives a clip ending at its own newest frame. NoFramesError only when no camera is left.
        """
        if not (math.isfinite(stale_after_s) and stale_after_s > 0):
            raise ValueError(f"stale_after_s must be a finite number > 0, got {stale_after_s}")
        buffers = [self[name] for name in (list(cameras) if cameras else list(self._buffers))]
        stale: dict[str, str] = {}
        newest = {}
        for buffer in buffers:
            stamp = buffer.latest_stamp_ns()
            if stamp is None:
                stale[buffer.camera] = "no frames buffered yet"
            else:
                newest[buffer.camera] = stamp
        if not newest:
            raise NoFramesError(f"no frames buffered yet from camera(s) {', '.join(stale)}")
        end = max(newest.values()) if end_ns is None else end_ns
        clips = []
        for buffer in buffers:
            if buffer.camera in stale:
                continue
            limit_s = max(stale_after_s, 2.0 / buffer.sample_fps)
            try:
                lag_s = (end - buffer.latest(end).stamp_ns) / NS_PER_S
                if lag_s > limit_s:
                    stale[buffer.camera] = (
                        f"newest frame {lag_s:.2f} s older than the window's end (stale after {limit_s:g} s)"
                    )
                    continue
                clips.append(buffer.clip(seconds, end))
            except NoFramesError as exc:  # nothing at or before the end, or in the window (or just reset)
                stale[buffer.camera] = str(exc)
        if not clips:
            reasons = "; ".join(f"camera {name!r}: {why}" for name, why in stale.items())
            raise NoFramesError(f"no camera has frames in the window ending at {end} ns ({reasons})")
        return Window(tuple(clips), types.MappingProxyType(stale), end)

    def stats(self) -> dict[str, BufferStats]:
        return {name: buffer.stats() for name, buffer in self._buffers.items()}
