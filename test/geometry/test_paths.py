"""3D paths as a base follows them: resampling keeps the shape and the ends at the spacing asked, cropping
keeps the first part of the length asked, the Fréchet distance is a metric that sees order, and every heading
is level with the ground and points along the path."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.geometry import (
    BasePath,
    GroundPlane,
    crop,
    frechet_distance,
    headings,
    path_length,
    resample,
    rotate,
    transform_path,
)

coordinate = st.floats(-20.0, 20.0, allow_nan=False)
point = st.tuples(coordinate, coordinate, coordinate)
polyline = st.lists(point, min_size=1, max_size=12)


def _segment_distance(p: tuple[float, ...], a: tuple[float, ...], b: tuple[float, ...]) -> float:
    ab = [b[i] - a[i] for i in range(3)]
    ap = [p[i] - a[i] for i in range(3)]
    denom = sum(c * c for c in ab)
    t = 0.0 if denom == 0 else max(0.0, min(1.0, sum(ab[i] * ap[i] for i in range(3)) / denom))
    return math.dist(p, [a[i] + t * ab[i] for i in range(3)])


@given(polyline, st.floats(0.05, 5.0))
@example([(0.0, 0.0, 0.0), (0.0, 0.0, 1.0)], 0.1)  # 1 / 0.1 in floating point: no near-duplicate end
@settings(max_examples=300, deadline=None)
def test_resampling_keeps_the_ends_the_spacing_and_the_shape(points: list, spacing: float) -> None:
    out = resample(points, spacing)
    length = path_length(points)
    assert out[0] == points[0]
    if length == 0:
        assert out == (points[0],)
        return
    assert out[-1] == pytest.approx(points[-1])
    steps = [math.dist(a, b) for a, b in itertools.pairwise(out)]
    # Each step is at most the spacing (chords of a bent path are shorter), and there are as many samples as
    # the length holds.
    assert all(s <= spacing * (1 + 1e-9) + 1e-9 for s in steps)
    assert len(out) in (math.floor(length / spacing + 1e-9) + 1, math.floor(length / spacing + 1e-9) + 2)
    # Every sample lies on the original polyline.
    for p in out:
        assert min(_segment_distance(p, a, b) for a, b in itertools.pairwise(points)) < 1e-6


@given(polyline, st.floats(0.0, 30.0))
@settings(max_examples=300, deadline=None)
def test_cropping_keeps_the_first_part_of_the_length(points: list, max_length: float) -> None:
    out = crop(points, max_length)
    assert out[0] == points[0]
    length = path_length(points)
    assert path_length(out) == pytest.approx(min(length, max_length), abs=1e-6)
    if length <= max_length:
        assert list(out) == points


def test_resampling_and_cropping_a_straight_line() -> None:
    line = [(0.0, 0.0, 0.0), (0.0, 0.0, 1.05)]
    assert [z for _, _, z in resample(line, 0.25)] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1.05])
    assert [z for _, _, z in crop(line, 0.4)] == pytest.approx([0.0, 0.4])
    with pytest.raises(ValueError, match="spacing"):
        resample(line, 0.0)
    assert resample([], 0.1) == () and crop([], 1.0) == ()


@given(polyline, polyline, polyline)
@settings(max_examples=200, deadline=None)
def test_frechet_is_a_metric(a: list, b: list, c: list) -> None:
    ab, ba = frechet_distance(a, b), frechet_distance(b, a)
    assert frechet_distance(a, a) == 0.0
    assert ab == pytest.approx(ba)
    assert frechet_distance(a, c) <= ab + frechet_distance(b, c) + 1e-9
    # At least the distance between the starts and between the ends; at most the farthest pair of points.
    assert ab >= max(math.dist(a[0], b[0]), math.dist(a[-1], b[-1])) - 1e-12
    assert ab <= max(math.dist(p, q) for p in a for q in b) + 1e-12


def test_frechet_sees_the_order_of_a_path() -> None:
    forth = [(0.0, 0.0, float(z)) for z in range(5)]
    back = list(reversed(forth))
    assert frechet_distance(forth, back) == pytest.approx(4.0)  # same points, opposite directions
    shifted = [(0.2, 0.0, z) for _, _, z in forth]
    assert frechet_distance(forth, shifted) == pytest.approx(0.2)
    assert frechet_distance(forth, []) == math.inf


def _rotate(q: tuple[float, float, float, float], v: tuple[float, float, float]) -> tuple[float, ...]:
    x, y, z, w = q
    # v' = v + 2w (q x v) + 2 q x (q x v)
    qv = (y * v[2] - z * v[1], z * v[0] - x * v[2], x * v[1] - y * v[0])
    qqv = (y * qv[2] - z * qv[1], z * qv[0] - x * qv[2], x * qv[1] - y * qv[0])
    return tuple(v[i] + 2 * w * qv[i] + 2 * qqv[i] for i in range(3))


@given(polyline, st.floats(0.1, 2.0), st.floats(-30.0, 80.0))
@settings(max_examples=200, deadline=None)
def test_headings_are_level_unit_quaternions_along_the_path(
    points: list, height: float, pitch: float
) -> None:
    plane = GroundPlane.from_degrees(height, pitch)
    up = plane.up
    out = headings(points, up)
    assert len(out) == len(points)
    for i, q in enumerate(out):
        assert sum(c * c for c in q) == pytest.approx(1.0)
        assert _rotate(q, (0.0, 0.0, 1.0)) == pytest.approx(up, abs=1e-9)  # z axis: the ground's up
        x_axis = _rotate(q, (1.0, 0.0, 0.0))
        if i + 1 < len(points):
            step = [points[i + 1][k] - points[i][k] for k in range(3)]
            level = [step[k] - sum(step[j] * up[j] for j in range(3)) * up[k] for k in range(3)]
            norm = math.sqrt(sum(c * c for c in level))
            if norm > 1e-6:
                assert x_axis == pytest.approx([c / norm for c in level], abs=1e-6)


def test_a_path_without_direction_faces_the_optical_axis_levelled() -> None:
    plane = GroundPlane.from_degrees(1.0, 30.0)
    (q,) = headings([(0.0, 1.0, 2.0)], plane.up)
    c, s = math.cos(plane.pitch_rad), math.sin(plane.pitch_rad)
    assert _rotate(q, (1.0, 0.0, 0.0)) == pytest.approx((0.0, -s, c), abs=1e-9)  # forward, level


quaternion = st.tuples(*[st.floats(-1.0, 1.0)] * 4).filter(lambda q: sum(c * c for c in q) > 0.1)


def _inverse(t: tuple, q: tuple) -> tuple[tuple, tuple]:
    n = math.sqrt(sum(c * c for c in q))
    qi = (-q[0] / n, -q[1] / n, -q[2] / n, q[3] / n)
    ti = rotate(qi, t)
    return (-ti[0], -ti[1], -ti[2]), qi


@given(polyline, st.tuples(coordinate, coordinate, coordinate), quaternion)
@settings(max_examples=200, deadline=None)
def test_a_path_transformed_and_back_is_the_same_and_keeps_its_shape(
    points: list, t: tuple, q: tuple
) -> None:
    plane = GroundPlane.from_degrees(0.5, 20.0)
    path = BasePath(tuple(points), headings(points, plane.up), "optical", 42, "ground_plane", 1.0, 1.0, 0.5)
    moved = transform_path(path, t, q, "map")
    assert (moved.frame_id, moved.stamp_ns, moved.source) == ("map", 42, "ground_plane")
    assert path_length(moved.points) == pytest.approx(path_length(path.points), rel=1e-9, abs=1e-9)
    ti, qi = _inverse(t, q)
    back = transform_path(moved, ti, qi, "optical")
    for a, b in zip(back.points, path.points, strict=True):
        assert a == pytest.approx(b, abs=1e-9)
    for a, b in zip(back.orientations, path.orientations, strict=True):  # q and -q are the same rotation
        assert a == pytest.approx(b, abs=1e-9) or a == pytest.approx(tuple(-c for c in b), abs=1e-9)


def test_a_camera_looking_ahead_maps_optical_forward_to_the_robot_s_x() -> None:
    """The usual optical -> base rotation (z forward -> x, x right -> -y, y down -> -z): a path straight ahead
    of the camera goes along the base's x axis, level, its headings pure yaw."""
    q = (-0.5, 0.5, -0.5, 0.5)
    ahead = [(0.0, 0.3, z) for z in (0.5, 1.0, 1.5)]
    path = BasePath(
        tuple(ahead), headings(ahead, (0.0, -1.0, 0.0)), "optical", 0, "ground_plane", 1.0, 1.0, 0.5
    )
    moved = transform_path(path, (0.2, 0.0, 0.3), q, "base_link")
    assert [p for p in moved.points] == [pytest.approx((0.2 + z, 0.0, 0.0), abs=1e-12) for _, _, z in ahead]
    for o in moved.orientations:
        assert rotate(o, (1.0, 0.0, 0.0)) == pytest.approx((1.0, 0.0, 0.0), abs=1e-12)
        assert rotate(o, (0.0, 0.0, 1.0)) == pytest.approx((0.0, 0.0, 1.0), abs=1e-12)
