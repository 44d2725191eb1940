"""Depth back-projection: 2D trajectory points in image pixels to 3D points in the camera's optical frame.

Pinhole model from a CameraInfo K matrix; depth registered to the colour camera (aligned depth), in 16UC1
millimetres or 32FC1 metres. A pixel without valid depth takes the nearest valid value within a small window,
else the point is dropped and counted.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from cosmos_reasoner_ros.geometry.coordinates import point_pixels
from cosmos_reasoner_ros.geometry.shapes import Trajectory

_M = TypeVar("_M")


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics of the image the depth is registered to (CameraInfo K, width, height)."""

    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int

    @classmethod
    def from_k(cls, k: Sequence[float], width: int, height: int) -> Intrinsics:
        """From CameraInfo's row-major 3x3 K; ValueError when the focal lengths or the size are unusable."""
        if len(k) != 9:
            raise ValueError(f"K must have 9 values, got {len(k)}")
        fx, fy, cx, cy = float(k[0]), float(k[4]), float(k[2]), float(k[5])
        if not (fx > 0 and fy > 0 and np.isfinite([fx, fy, cx, cy]).all()):
            raise ValueError(f"K has no usable focal length (fx={fx}, fy={fy})")
        if width <= 0 or height <= 0:
            raise ValueError(f"camera info has no image size ({width}x{height})")
        return cls(fx=fx, fy=fy, cx=cx, cy=cy, width=int(width), height=int(height))


@dataclass(frozen=True)
class ProjectedPath:
    """The 3D points ([m], optical frame: x right, y down, z forward) and how many 2D points had no depth."""

    points: tuple[tuple[float, float, float], ...]
    dropped: int
    kept_indices: tuple[int, ...] = ()


def depth_to_meters(depth: np.ndarray) -> np.ndarray:
    """A float32 depth image in metres with NaN where there is no measurement (0, NaN, inf, negative)."""
    if depth.ndim != 2:
        raise ValueError(f"depth must be a single-channel image, got shape {depth.shape}")
    if depth.dtype == np.uint16:
        metres = depth.astype(np.float32) / 1000.0  # 16UC1 is millimetres by REP 118
    elif depth.dtype in (np.float32, np.float64):
        metres = depth.astype(np.float32, copy=True)
    else:
        raise ValueError(f"unsupported depth dtype {depth.dtype} (expected uint16 mm or float32 m)")
    metres[~np.isfinite(metres) | (metres <= 0)] = np.nan
    return metres


def depth_at(depth_m: np.ndarray, col: int, row: int, window: int) -> float | None:
    """Depth at (col, row), else the nearest valid depth within +-window pixels (Euclidean), else None."""
    height, width = depth_m.shape
    if not (0 <= col < width and 0 <= row < height):
        return None
    value = float(depth_m[row, col])
    if np.isfinite(value):
        return value
    r0, r1 = max(0, row - window), min(height, row + window + 1)
    c0, c1 = max(0, col - window), min(width, col + window + 1)
    patch = depth_m[r0:r1, c0:c1]
    valid = np.isfinite(patch)
    if not valid.any():
        return None
    rows, cols = np.nonzero(valid)
    dist2 = (rows + r0 - row) ** 2 + (cols + c0 - col) ** 2
    best = int(np.argmin(dist2))
    return float(patch[rows[best], cols[best]])


def back_project(
    points_px: Sequence[tuple[float, float]],
    image_size: tuple[int, int],
    depth: np.ndarray,
    intrinsics: Intrinsics,
    window: int = 3,
) -> ProjectedPath:
    """Back-project pixel points given in an image of `image_size` (width, height).

    The points are first scaled to the intrinsics' resolution (the clip may have been downscaled), the depth
    is looked up at the corresponding pixel of the depth image (scaled again if its size differs), and
    X = (u - cx) * Z / fx, Y = (v - cy) * Z / fy.
    """
    depth_m = depth_to_meters(depth)
    img_w, img_h = image_size
    if img_w <= 0 or img_h <= 0:
        raise ValueError(f"image size must be positive, got {image_size}")
    sx, sy = intrinsics.width / img_w, intrinsics.height / img_h
    dsx, dsy = depth_m.shape[1] / intrinsics.width, depth_m.shape[0] / intrinsics.height
    out: list[tuple[float, float, float]] = []
    kept: list[int] = []
    for index, (x, y) in enumerate(points_px):
        u, v = x * sx, y * sy
        if not (0 <= u <= intrinsics.width and 0 <= v <= intrinsics.height):
            continue  # outside the image: no depth to look up
        # A point on the far edge (norm 1000) belongs to the last pixel.
        col = min(int(np.floor(u * dsx)), depth_m.shape[1] - 1)
        row = min(int(np.floor(v * dsy)), depth_m.shape[0] - 1)
        z = depth_at(depth_m, col, row, window)
        if z is None:
            continue
        out.append(((u - intrinsics.cx) * z / intrinsics.fx, (v - intrinsics.cy) * z / intrinsics.fy, z))
        kept.append(index)
    return ProjectedPath(points=tuple(out), dropped=len(points_px) - len(out), kept_indices=tuple(kept))


def project_trajectories(
    trajectories: Sequence[Trajectory],
    image_size: tuple[int, int],
    depth: np.ndarray,
    intrinsics: Intrinsics,
    window: int = 3,
) -> list[tuple[str, ProjectedPath]]:
    """Each trajectory's points (0-1000 of an image of `image_size`) back-projected: (label, path)."""
    width, height = image_size
    return [
        (
            t.label,
            back_project(
                [point_pixels(p, width, height) for p in t.points], image_size, depth, intrinsics, window
            ),
        )
        for t in trajectories
    ]


class DepthHistory(Generic[_M]):
    """Recent depth messages of one camera, decoded only when a trajectory needs one: at most one per
    `period_ns` (the clip sampling period), bounded by count and by bytes, so that a 30 Hz 1080p depth stream
    holds a few seconds, not gigabytes. Thread-safe."""

    def __init__(
        self, period_ns: int, max_messages: int, max_bytes: int, size_of: Callable[[_M], int]
    ) -> None:
        if period_ns < 0 or max_messages < 1 or max_bytes < 1:
            raise ValueError("period_ns must be >= 0, max_messages and max_bytes >= 1")
        self._period = period_ns
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._size_of = size_of
        self._stamps: list[int] = []
        self._items: list[tuple[_M, int]] = []
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._stamps)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def add(self, stamp_ns: int, message: _M) -> bool:
        """Keep a message unless one was kept less than a period before it (or it alone exceeds the bound)."""
        size = self._size_of(message)
        with self._lock:
            if size > self._max_bytes:
                return False
            index = bisect.bisect_left(self._stamps, stamp_ns)
            near = [i for i in (index - 1, index) if 0 <= i < len(self._stamps)]
            if any(abs(self._stamps[i] - stamp_ns) < self._period for i in near):
                return False
            self._stamps.insert(index, stamp_ns)
            self._items.insert(index, (message, size))
            self._bytes += size
            while len(self._stamps) > self._max_messages or self._bytes > self._max_bytes:
                self._stamps.pop(0)
                self._bytes -= self._items.pop(0)[1]
            return True

    def nearest(self, stamp_ns: int) -> tuple[int, _M] | None:
        """The kept message closest in time to stamp_ns, with its stamp; None when empty."""
        with self._lock:
            if not self._stamps:
                return None
            index = bisect.bisect_left(self._stamps, stamp_ns)
            candidates = [i for i in (index - 1, index) if 0 <= i < len(self._stamps)]
            best = min(candidates, key=lambda i: abs(self._stamps[i] - stamp_ns))
            return self._stamps[best], self._items[best][0]
