"""An answer's path for a base, without ROS: on the ground plane (or from the node's depth path), bounded,
cropped, resampled, level, stamped at the clip's end; refused with a reason where a base could not follow it.
The pinhole model is the oracle: every pose sent is seen back at the answer's pixels' polyline."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.handoff_answers import (
    AHEAD,
    FAR_START,
    FRAME,
    HEIGHT_M,
    INTRINSICS,
    NS,
    PITCH_DEG,
    TO_THE_SKY,
    H,
    W,
    outcome,
)

from cosmos_reasoner_ros.geometry import GroundPlane, frechet_distance, path_length, pixel_of
from cosmos_reasoner_ros.handoff import PathLimits, ground_path

PLANE = GroundPlane.from_degrees(HEIGHT_M, PITCH_DEG)
LIMITS = PathLimits(spacing_m=0.1, max_length_m=3.0, max_start_distance_m=1.5, max_range_m=6.0)


def test_a_path_ahead_lies_on_the_ground_in_the_optical_frame_stamped_at_the_clip_end() -> None:
    path = ground_path(outcome(AHEAD, clip_end_ns=42 * NS), INTRINSICS, PLANE, LIMITS, FRAME)
    assert not isinstance(path, str), path
    assert (path.frame_id, path.stamp_ns, path.source, path.label) == (
        FRAME,
        42 * NS,
        "ground_plane",
        "robot path",
    )
    assert all(PLANE.height_of(p) == pytest.approx(0.0, abs=1e-9) for p in path.points)
    assert path.start_distance_m == pytest.approx(0.514, abs=0.002)  # row 456: 44.2 deg below the horizon
    # Under max_length_m: not cropped (resampling cuts the bends by a little).
    assert path.length_m == pytest.approx(path.answered_length_m, rel=1e-3)
    steps = [math.dist(a, b) for a, b in zip(path.points, path.points[1:], strict=False)]
    assert all(s <= 0.1 + 1e-9 for s in steps) and max(steps[:-1]) == pytest.approx(0.1, abs=0.02)
    assert len(path.orientations) == len(path.points) == len(path.pixels)
    # Drawn back on the answer's image, the poses lie on the answer's polyline (to a pixel).
    answer_px = [(x / 1000 * W, y / 1000 * H) for x, y in AHEAD]
    for u, v in path.pixels:
        nearest = min(_segment_distance((u, v), a, b) for a, b in itertools.pairwise(answer_px))
        assert nearest < 1.0


def _segment_distance(p: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    ab, ap = (b[0] - a[0], b[1] - a[1]), (p[0] - a[0], p[1] - a[1])
    denom = ab[0] ** 2 + ab[1] ** 2
    t = 0.0 if denom == 0 else max(0.0, min(1.0, (ab[0] * ap[0] + ab[1] * ap[1]) / denom))
    return math.dist(p, (a[0] + t * ab[0], a[1] + t * ab[1]))


def test_a_long_path_is_cropped_to_max_length_and_keeps_its_answered_length() -> None:
    short = dataclasses.replace(LIMITS, max_length_m=0.3)
    path = ground_path(outcome(AHEAD), INTRINSICS, PLANE, short, FRAME)
    assert not isinstance(path, str)
    assert path.length_m == pytest.approx(0.3, rel=1e-3) and path.answered_length_m > 0.7
    assert len(path.points) == 4  # 0, 0.1, 0.2, 0.3 m


def test_points_above_the_horizon_or_no_camera_info_or_no_frame_refuse_the_path() -> None:
    sky = ground_path(outcome(TO_THE_SKY), INTRINSICS, PLANE, LIMITS, FRAME)
    assert isinstance(sky, str) and "1 of 3 points refused" in sky and "point 2: pixel (320, 48)" in sky
    assert "above the horizon" in sky
    assert "no CameraInfo" in str(ground_path(outcome(AHEAD), None, PLANE, LIMITS, FRAME))
    assert "handoff.frame_id" in str(ground_path(outcome(AHEAD), INTRINSICS, PLANE, LIMITS, ""))
    one = ground_path(outcome(((500, 900),)), INTRINSICS, PLANE, LIMITS, FRAME)
    assert one == "a path needs at least 2 points on the ground, the answer has 1"
    assert (
        ground_path(outcome(success=False), INTRINSICS, PLANE, LIMITS, FRAME)
        == "the answer holds no trajectory"
    )


def test_the_start_distance_is_measured_for_the_gate() -> None:
    path = ground_path(outcome(FAR_START), INTRINSICS, PLANE, LIMITS, FRAME)
    assert not isinstance(path, str) and path.start_distance_m == pytest.approx(1.96, abs=0.01)


def test_with_depth_the_node_s_depth_path_is_used_in_its_frame() -> None:
    depth_points = ((0.0, 0.4, 0.6), (0.05, 0.35, 0.9), (0.1, 0.3, 1.2))
    base = outcome(AHEAD)
    with_depth = dataclasses.replace(
        base, paths_3d=(("robot path", depth_points),), paths_frame_id="depth_optical"
    )
    path = ground_path(with_depth, INTRINSICS, PLANE, LIMITS, FRAME)
    assert not isinstance(path, str)
    assert (path.source, path.frame_id) == ("depth", "depth_optical")
    assert path.points[0] == depth_points[0] and path.points[-1] == pytest.approx(depth_points[-1])
    assert path.answered_length_m == pytest.approx(path_length(depth_points))


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(160, 1000)), min_size=2, max_size=16),
    st.floats(0.02, 0.5),
    st.floats(0.2, 8.0),
)
@settings(max_examples=200, deadline=None)
def test_any_answer_below_the_horizon_gives_a_bounded_even_path_back_on_its_pixels(
    points: list[tuple[int, int]], spacing: float, max_length: float
) -> None:
    limits = PathLimits(spacing, max_length, 100.0, 1e6)
    path = ground_path(outcome(tuple(points)), INTRINSICS, PLANE, limits, FRAME)
    if isinstance(path, str):  # repeated points: a path without two distinct points is no path
        assert "at least 2 points" in path or "refused" in path
        return
    assert path.length_m <= max_length + 1e-6
    assert all(math.dist(a, b) <= spacing + 1e-6 for a, b in zip(path.points, path.points[1:], strict=False))
    # Oracle: the whole answered polyline, on the ground, is within a spacing (Fréchet) of the path when the
    # path is not cropped.
    if path.answered_length_m <= max_length:
        answered = ground_path(
            outcome(tuple(points)), INTRINSICS, PLANE, PathLimits(1e-3, 1e9, 100.0, 1e6), FRAME
        )
        assert not isinstance(answered, str)
        assert frechet_distance(path.points, answered.points) <= spacing + 1e-6
    for point, (u, v) in zip(path.points, path.pixels, strict=True):
        assert pixel_of(point, INTRINSICS, (W, H)) == pytest.approx((u, v))
