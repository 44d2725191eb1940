"""Depth back-projection against the analytic pinhole model: holes, both depth encodings, rescaling."""

from __future__ import annotations

import numpy as np
import pytest

from cosmos_reasoner_ros.geometry.projection import (
    DepthHistory,
    Intrinsics,
    back_project,
    depth_at,
    depth_to_meters,
    project_trajectories,
)
from cosmos_reasoner_ros.geometry.shapes import Point2D, Trajectory

K = [500.0, 0.0, 320.0, 0.0, 480.0, 240.0, 0.0, 0.0, 1.0]


def ramp_depth_m(width: int = 640, height: int = 480) -> np.ndarray:
    """A slanted plane: depth grows with the column, so a wrong column gives a wrong Z."""
    cols = np.arange(width, dtype=np.float32)
    return np.tile(1.0 + cols / width, (height, 1)).astype(np.float32)


def analytic(u: float, v: float, z: float) -> tuple[float, float, float]:
    return ((u - 320.0) * z / 500.0, (v - 240.0) * z / 480.0, z)


def test_intrinsics_from_k_and_rejects_bad_values() -> None:
    i = Intrinsics.from_k(K, 640, 480)
    assert (i.fx, i.fy, i.cx, i.cy) == (500.0, 480.0, 320.0, 240.0)
    with pytest.raises(ValueError, match="focal"):
        Intrinsics.from_k([0.0] * 9, 640, 480)
    with pytest.raises(ValueError, match="9 values"):
        Intrinsics.from_k([1.0, 2.0], 640, 480)
    with pytest.raises(ValueError, match="size"):
        Intrinsics.from_k(K, 0, 480)


def test_metres_and_millimetres_give_the_same_points() -> None:
    depth_m = ramp_depth_m()
    depth_mm = np.round(depth_m * 1000).astype(np.uint16)
    pts = [(100.0, 50.0), (320.0, 240.0), (639.0, 479.0), (640.0, 480.0)]
    intr = Intrinsics.from_k(K, 640, 480)
    for depth in (depth_m, depth_mm):
        path = back_project(pts, (640, 480), depth, intr, window=0)
        assert path.dropped == 0
        for (u, v), got in zip(pts, path.points, strict=True):
            col, row = min(int(u), 639), min(int(v), 479)
            want = analytic(u, v, float(depth_m[row, col]))
            np.testing.assert_allclose(got, want, atol=1e-3)


def test_hole_takes_nearest_valid_depth_or_drops_the_point() -> None:
    depth = np.full((480, 640), 2.0, dtype=np.float32)
    depth[200:260, 300:340] = np.nan  # a hole around the centre
    depth[230, 337] = 3.0  # the nearest valid pixel to (330, 230) inside the hole's window
    intr = Intrinsics.from_k(K, 640, 480)
    near = back_project([(330.0, 230.0)], (640, 480), depth, intr, window=8)
    assert near.dropped == 0
    np.testing.assert_allclose(near.points[0], analytic(330.0, 230.0, 3.0), atol=1e-6)
    far = back_project([(320.0, 210.0), (10.0, 10.0)], (640, 480), depth, intr, window=3)
    assert far.dropped == 1 and far.kept_indices == (1,)
    np.testing.assert_allclose(far.points[0], analytic(10.0, 10.0, 2.0), atol=1e-6)


def test_zero_negative_and_inf_depth_are_invalid() -> None:
    raw = np.array([[0.0, -1.0, np.inf, 1.5]], dtype=np.float32)
    m = depth_to_meters(raw)
    assert np.isnan(m[0, :3]).all() and m[0, 3] == pytest.approx(1.5)
    mm = depth_to_meters(np.array([[0, 1234]], dtype=np.uint16))
    assert np.isnan(mm[0, 0]) and mm[0, 1] == pytest.approx(1.234)
    assert depth_at(m, 0, 0, window=0) is None
    assert depth_at(m, 0, 0, window=3) == pytest.approx(1.5)
    assert depth_at(m, 10, 0, window=3) is None  # outside the image
    with pytest.raises(ValueError, match="dtype"):
        depth_to_meters(np.zeros((2, 2), dtype=np.int8))


def test_downscaled_clip_and_half_resolution_depth_are_rescaled() -> None:
    # The clip was downscaled to 320x240; CameraInfo is 640x480; depth is registered at 320x240.
    depth_small = ramp_depth_m(320, 240)
    intr = Intrinsics.from_k(K, 640, 480)
    path = back_project([(50.0, 60.0)], (320, 240), depth_small, intr, window=0)
    u, v = 100.0, 120.0  # the same point at the camera's resolution
    z = float(depth_small[60, 50])
    np.testing.assert_allclose(path.points[0], analytic(u, v, z), atol=1e-6)


def test_points_outside_the_image_are_dropped() -> None:
    intr = Intrinsics.from_k(K, 640, 480)
    path = back_project([(-5.0, 10.0), (700.0, 10.0)], (640, 480), ramp_depth_m(), intr)
    assert path.points == () and path.dropped == 2


def test_depth_history_keeps_one_per_period_within_count_and_bytes() -> None:
    history: DepthHistory[bytes] = DepthHistory(period_ns=100, max_messages=5, max_bytes=350, size_of=len)
    for stamp in range(0, 2000, 25):  # a fast stream: one in four is kept
        history.add(stamp, b"x" * 100)
    assert len(history) == 3 and history.nbytes == 300  # the byte bound (350) wins over the count (5)
    nearest = history.nearest(1750)
    assert nearest is not None and nearest[0] == 1700
    assert not history.add(5000, b"y" * 400)  # alone larger than the bound
    assert DepthHistory(1, 1, 1, len).nearest(0) is None


def test_project_trajectories_uses_the_answer_image_size() -> None:
    intrinsics = Intrinsics(fx=100.0, fy=100.0, cx=50.0, cy=40.0, width=100, height=80)
    depth = np.full((80, 100), 2.0, dtype=np.float32)
    trajectory = Trajectory("t", (Point2D("t", 500.0, 500.0), Point2D("t", 1000.0, 0.0)))
    [(label, path)] = project_trajectories([trajectory], (200, 160), depth, intrinsics)
    assert label == "t" and path.dropped == 0
    assert path.points[0] == pytest.approx((0.0, 0.0, 2.0))  # the image centre
    assert path.points[1] == pytest.approx((1.0, -0.8, 2.0))  # the top-right corner
