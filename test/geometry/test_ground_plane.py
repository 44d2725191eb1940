"""Points on the ground without depth, against the pinhole model as the oracle: a ground point projected
to its pixel comes back to the same point, a pixel on the ground comes back to the same pixel, at any height,
pitch, intrinsics and downscaling; rays at or above the horizon, and beyond the range, are refused with a
reason; and the plane agrees with the back-projection of a depth image rendered from the same plane."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.geometry import (
    GroundPlane,
    Intrinsics,
    back_project,
    pixel_of,
    project_to_ground,
)

W, H = 640, 480
K = [500.0, 0.0, 320.0, 0.0, 480.0, 240.0, 0.0, 0.0, 1.0]


@st.composite
def cameras(draw: st.DrawFn) -> tuple[Intrinsics, GroundPlane]:
    width = draw(st.integers(64, 4096))
    height = draw(st.integers(48, 3072))
    fx = draw(st.floats(0.3, 2.0)) * width  # a wide to a narrow lens
    fy = fx * draw(st.floats(0.9, 1.1))
    cx = width * draw(st.floats(0.35, 0.65))
    cy = height * draw(st.floats(0.35, 0.65))
    intrinsics = Intrinsics(fx=fx, fy=fy, cx=cx, cy=cy, width=width, height=height)
    plane = GroundPlane.from_degrees(draw(st.floats(0.05, 3.0)), draw(st.floats(-30.0, 80.0)))
    return intrinsics, plane


@given(cameras(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
@example((Intrinsics(500.0, 480.0, 320.0, 240.0, W, H), GroundPlane.from_degrees(0.5, 0.0)), 0.5, 1.0)
@settings(max_examples=300, deadline=None)
def test_a_pixel_below_the_horizon_comes_back_to_itself(
    camera: tuple[Intrinsics, GroundPlane], fu: float, fv: float
) -> None:
    """pixel -> ground -> pixel: the same pixel, and the point lies on the plane, in front of the camera."""
    intrinsics, plane = camera
    u, v = fu * intrinsics.width, fv * intrinsics.height
    projected = project_to_ground([(u, v)], (intrinsics.width, intrinsics.height), intrinsics, plane, 1e9)
    if projected.refused:
        ((index, reason),) = projected.refused
        assert index == 0 and "horizon" in reason
        return
    (point,) = projected.points
    assert point[2] > 0
    assert plane.height_of(point) == pytest.approx(0.0, abs=1e-6 * max(1.0, math.dist(point, plane.foot)))
    back = pixel_of(point, intrinsics)
    assert back is not None
    assert back == pytest.approx((u, v), abs=1e-6 * max(intrinsics.width, intrinsics.height))


@given(cameras(), st.floats(0.2, 30.0), st.floats(-10.0, 10.0), st.sampled_from([1, 2, 3]))
@settings(max_examples=300, deadline=None)
def test_a_ground_point_seen_by_the_camera_comes_back_to_itself(
    camera: tuple[Intrinsics, GroundPlane], ahead_m: float, left_m: float, downscale: int
) -> None:
    """ground -> pixel (pinhole) -> ground: the same point, also through a clip downscaled from the camera's
    resolution (the answer's pixels are of the clip's image)."""
    intrinsics, plane = camera
    # A point on the ground `ahead_m` in front of the camera's foot (along the level optical axis), `left_m`
    # to its side, in the optical frame.
    c, s = math.cos(plane.pitch_rad), math.sin(plane.pitch_rad)
    forward, right = (0.0, -s, c), (1.0, 0.0, 0.0)
    foot = plane.foot
    point = tuple(foot[i] + ahead_m * forward[i] - left_m * right[i] for i in range(3))
    image = (max(1, intrinsics.width // downscale), max(1, intrinsics.height // downscale))
    pixel = pixel_of(point, intrinsics, image)
    assume(pixel is not None)
    assert pixel is not None
    projected = project_to_ground([pixel], image, intrinsics, plane, 1e9)
    if projected.refused:  # only rays within the horizon's margin may be refused
        depression = math.atan2(plane.height_m, math.hypot(ahead_m, left_m))
        assert depression < math.radians(0.1), projected.refused
        return
    (back,) = projected.points
    tolerance = 1e-6 * max(1.0, ahead_m, abs(left_m)) ** 2
    assert back == pytest.approx(point, abs=tolerance)
    assert plane.ground_distance(back) == pytest.approx(math.hypot(ahead_m, left_m), abs=tolerance)


def test_points_at_and_above_the_horizon_and_beyond_the_range_are_refused_with_reasons() -> None:
    intrinsics = Intrinsics.from_k(K, W, H)
    level = GroundPlane.from_degrees(0.5, 0.0)  # the horizon is the image's middle row (cy = 240)
    projected = project_to_ground(
        [(320.0, 400.0), (320.0, 240.0), (320.0, 100.0), (320.0, 241.0)], (W, H), intrinsics, level, 10.0
    )
    assert projected.kept_indices == (0,)
    reasons = dict(projected.refused)
    assert "on the horizon" in reasons[1]
    assert "above the horizon" in reasons[2] and "16.3 deg" in reasons[2]  # atan(140 / 480)
    assert "beyond max_range_m (10 m)" in reasons[3] and "240.0 m away" in reasons[3]
    # Looking down 30 degrees, the same top row is below the horizon: a point 1.05 m ahead of the foot.
    down = GroundPlane.from_degrees(0.5, 30.0)
    (point,) = project_to_ground([(320.0, 0.0)], (W, H), intrinsics, down, 10.0).points
    assert down.ground_distance(point) == pytest.approx(
        0.5 / math.tan(math.radians(30.0) - math.atan(240 / 480))
    )


def test_bad_planes_and_sizes_are_refused() -> None:
    for height, pitch in ((0.0, 10.0), (-1.0, 10.0), (math.nan, 0.0), (1.0, 90.0), (1.0, math.inf)):
        with pytest.raises(ValueError):
            GroundPlane.from_degrees(height, pitch)
    with pytest.raises(ValueError, match="image size"):
        project_to_ground([(1.0, 1.0)], (0, 480), Intrinsics.from_k(K, W, H), GroundPlane(1.0, 0.3), 10.0)
    assert pixel_of((0.0, 0.0, -1.0), Intrinsics.from_k(K, W, H)) is None  # behind the camera


@given(st.floats(0.2, 2.0), st.floats(5.0, 60.0))
@settings(max_examples=30, deadline=None)
def test_the_plane_agrees_with_depth_rendered_from_the_same_plane(height_m: float, pitch_deg: float) -> None:
    """Differential: a depth image of the ground plane, back-projected at the answer's pixels (the depth
    path), gives the ground plane's points (the path without depth), to a pixel's worth of depth."""
    intrinsics = Intrinsics.from_k(K, W, H)
    plane = GroundPlane.from_degrees(height_m, pitch_deg)
    rows = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5)[1]
    rays_up = -math.cos(plane.pitch_rad) * (rows - 240.0) / 480.0 - math.sin(plane.pitch_rad)
    with np.errstate(divide="ignore"):
        depth = np.where(rays_up < -1e-3, height_m / -rays_up, 0.0).astype(np.float32)  # z of each ray's hit
    pixels = [(float(c) + 0.5, float(r) + 0.5) for c, r in ((100, 470), (320, 400), (500, 300), (639, 479))]
    plane_points = project_to_ground(pixels, (W, H), intrinsics, plane, 1e9)
    depth_points = back_project(pixels, (W, H), depth, intrinsics, window=0)
    by_index = dict(zip(depth_points.kept_indices, depth_points.points, strict=True))
    assert set(plane_points.kept_indices) <= set(by_index)
    for index, point in zip(plane_points.kept_indices, plane_points.points, strict=True):
        assert by_index[index] == pytest.approx(point, rel=1e-3, abs=1e-4)
