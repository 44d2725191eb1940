"""An answer's path for a base, without ROS: on the ground plane (or from the node's depth path), bounded,
cropped, resampled, level, stamped at the clip's end; refused with a reason where a base could not follow it.
The pinhole model is the oracle: every pose sent is seen back at the answer's pixels' polyline."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import assume, example, given, settings
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

from cosmos_reasoner_ros.geometry import BasePath, GroundPlane, frechet_distance, path_length, pixel_of
from cosmos_reasoner_ros.handoff import (
    BACKWARD_TOLERANCE_M,
    NEAR_FRACTION,
    PathLimits,
    camera_intrinsics,
    ground_path,
)

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
    zero_k = camera_intrinsics([0.0] * 9, W, H)
    assert isinstance(zero_k, str)
    unusable = str(ground_path(outcome(AHEAD), zero_k, PLANE, LIMITS, FRAME))
    assert unusable.startswith("CameraInfo K unusable: focal lengths must be > 0 (fx=0, fy=0)")
    assert "no CameraInfo" not in unusable
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
    if isinstance(path, str):  # repeated points, backwards: no path a base can follow
        assert any(w in path for w in ("at least 2 distinct", "refused", "runs back", "shorter than")), path
        return
    assert path.length_m <= max_length + 1e-6
    step_bound = spacing * (1 + NEAR_FRACTION) + 1e-6  # a near-repeated last sample merges into the end
    assert all(math.dist(a, b) <= step_bound for a, b in zip(path.points, path.points[1:], strict=False))
    # Oracle: the whole answered polyline, on the ground, is within a spacing (Fréchet) of the path when the
    # path is not cropped.
    if path.answered_length_m <= max_length:
        answered = ground_path(
            outcome(tuple(points)), INTRINSICS, PLANE, PathLimits(1e-3, 1e9, 100.0, 1e6), FRAME
        )
        assume(not isinstance(answered, str))  # near-repeats kept apart there may turn it round
        assert isinstance(answered, BasePath)
        # Collapsed near-repeats move the polyline by at most near_m.
        assert frechet_distance(path.points, answered.points) <= step_bound
    for point, (u, v) in zip(path.points, path.pixels, strict=True):
        assert pixel_of(point, INTRINSICS, (W, H)) == pytest.approx((u, v))


# -- drivable paths only (issue 37, finding 2) ------------------------------------------------------------

DRIVABLE = PathLimits(0.1, 3.0, 1.5, 6.0, min_length_m=0.2)
PITCH = math.radians(PITCH_DEG)


def hand_length(points: tuple[tuple[float, float, float], ...]) -> float:
    """The oracle's length: the segments summed here, not by the code under test."""
    total = 0.0
    for a, b in itertools.pairwise(points):
        total += math.sqrt((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2 + (a[2] - b[2]) ** 2)
    return total


def hand_distinct(points: tuple[tuple[float, float, float], ...]) -> int:
    return len({tuple(round(c, 9) for c in p) for p in points})


def hand_ahead(p: tuple[float, float, float]) -> float:
    """[m] along the camera's view levelled on the ground: the optical z axis tipped up by the pitch."""
    return -math.sin(PITCH) * p[1] + math.cos(PITCH) * p[2]


def test_three_identical_points_are_no_path_and_one_point_neither() -> None:
    """The issue's case: three identical points made a one-pose, 0 m FollowPath goal."""
    same = ground_path(outcome(((500, 900),) * 3), INTRINSICS, PLANE, DRIVABLE, FRAME)
    assert isinstance(same, str) and same.startswith("a path needs at least 2 distinct points on the ground")
    near = ground_path(outcome(((500, 900), (501, 900), (500, 901))), INTRINSICS, PLANE, DRIVABLE, FRAME)
    assert isinstance(near, str) and "at least 2 distinct points" in near and "collapse" in near


def test_a_path_shorter_than_min_path_length_is_refused_naming_the_parameter() -> None:
    short = ground_path(outcome(((500, 950), (500, 900))), INTRINSICS, PLANE, DRIVABLE, FRAME)
    assert isinstance(short, str) and "shorter than min_path_length_m (0.2 m)" in short
    assert not isinstance(
        ground_path(outcome(((500, 950), (500, 900))), INTRINSICS, PLANE, LIMITS, FRAME), str
    )


def test_a_path_running_back_toward_the_camera_is_refused_and_a_lateral_one_kept() -> None:
    reversed_ahead = tuple(reversed(AHEAD))
    back = ground_path(outcome(reversed_ahead), INTRINSICS, PLANE, DRIVABLE, FRAME)
    assert isinstance(back, str) and back.startswith("the path runs back toward the camera: point 1 is")
    sideways = ((500, 900), (400, 900), (300, 900), (200, 900))  # one row: the same distance ahead
    path = ground_path(outcome(sideways), INTRINSICS, PLANE, DRIVABLE, FRAME)
    assert isinstance(path, BasePath), path


def test_hundreds_of_points_are_resampled_to_the_spacing_and_cropped() -> None:
    dense = tuple((500 + (i * 60) // 400, 950 - (i * 450) // 400) for i in range(400))
    limits = dataclasses.replace(DRIVABLE, max_length_m=0.6)
    path = ground_path(outcome(dense), INTRINSICS, PLANE, limits, FRAME)
    assert isinstance(path, BasePath), path
    assert path.answered_length_m > 0.8 and hand_length(path.points) == pytest.approx(0.6, abs=1e-3)
    assert len(path.points) == 7  # 0, 0.1, ... 0.6 m


def test_a_depth_path_with_a_point_not_finite_is_refused() -> None:
    depth_points = ((0.0, 0.4, 0.6), (0.05, math.nan, 0.9), (0.1, 0.3, 1.2))
    base = dataclasses.replace(outcome(AHEAD), paths_3d=(("robot path", depth_points),))
    refused = ground_path(base, INTRINSICS, PLANE, DRIVABLE, FRAME)
    assert refused == "1 of 3 points of the path are not finite numbers (points [1])"


@st.composite
def answers(draw: st.DrawFn) -> tuple[tuple[int, int], ...]:
    """Answers as models draw them: as is, each point repeated, near-repeated (a unit or two of 0-1000
    apart), collinear, reversed, running off the image's top (above the horizon), or hundreds of points."""
    base = draw(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8))
    shape = draw(st.sampled_from(["as_is", "repeated", "near", "collinear", "reversed", "many"]))
    if shape == "repeated":
        times = draw(st.integers(2, 5))
        return tuple(p for p in base for _ in range(times))
    if shape == "near":
        jitter = st.tuples(st.integers(-2, 2), st.integers(-2, 2))
        return tuple(
            (min(1000, max(0, x + dx)), min(1000, max(0, y + dy)))
            for x, y in base
            for dx, dy in [(0, 0), *draw(st.lists(jitter, max_size=3))]
        )
    if shape == "collinear":
        (x0, y0), (x1, y1) = base[0], draw(st.tuples(st.integers(0, 1000), st.integers(0, 1000)))
        n = draw(st.integers(2, 12))
        return tuple((x0 + (x1 - x0) * i // (n - 1), y0 + (y1 - y0) * i // (n - 1)) for i in range(n))
    if shape == "reversed":
        return tuple(reversed(base))
    if shape == "many":
        n = draw(st.integers(100, 400))
        (x0, y0), (x1, y1) = base[0], base[-1]
        return tuple((x0 + (x1 - x0) * i // n, y0 + (y1 - y0) * i // n) for i in range(n + 1))
    return tuple(base)


# 246 pixels from (240, 173) to (0, 138), the "many" shape of answers() at n = 245.
STAIRCASE = tuple((240 + (0 - 240) * i // 245, 173 + (138 - 173) * i // 245) for i in range(246))


@given(
    points=answers(),
    spacing=st.floats(0.02, 0.5),
    max_length=st.floats(0.1, 6.0),
    min_fraction=st.floats(0.0, 1.0),
)
@example(points=((500, 900),) * 3, spacing=0.1, max_length=3.0, min_fraction=0.0)
@example(points=((500, 950), (500, 900)), spacing=0.1, max_length=3.0, min_fraction=0.2)
@example(points=tuple(reversed(AHEAD)), spacing=0.1, max_length=3.0, min_fraction=0.0)
# A staircase of pixels (found by hypothesis): samples every spacing along its arc, whose chords are shorter.
@example(points=STAIRCASE, spacing=0.125, max_length=5.0, min_fraction=0.0)
@settings(max_examples=300, deadline=None)
def test_any_path_that_passes_has_two_distinct_poses_its_minimum_length_and_leads_away(
    points: tuple[tuple[int, int], ...], spacing: float, max_length: float, min_fraction: float
) -> None:
    """The invariant of the ground_path gate, checked by hand: a path made has at least 2 distinct poses, is
    at least min_path_length_m long and at most max_path_length_m, steps at most a spacing (and a near-repeat
    at its end), and never comes back toward the camera by more than the tolerance; one point repeated is
    never a path."""
    limits = PathLimits(spacing, max_length, 100.0, 1e6, min_length_m=min_fraction * max_length)
    path = ground_path(outcome(points), INTRINSICS, PLANE, limits, FRAME)
    if len(set(points)) == 1:
        assert isinstance(path, str), "one point repeated made a path"
    if isinstance(path, str):
        assert path
        return
    assert hand_distinct(path.points) >= 2
    length = hand_length(path.points)
    assert length >= limits.min_length_m - 1e-9 and length <= max_length + 1e-6
    assert path.length_m == pytest.approx(length)
    step_bound = spacing * (1 + NEAR_FRACTION) + 1e-6
    assert all(math.dist(a, b) <= step_bound for a, b in zip(path.points, path.points[1:], strict=False))
    farthest = -math.inf
    for p in path.points:
        farthest = max(farthest, hand_ahead(p))
        assert farthest - hand_ahead(p) <= BACKWARD_TOLERANCE_M + 1e-9
    # Hundreds of points: resampled. Samples fall every spacing along the cropped answer's arc (at most
    # max_length long), plus its end; the chords between them (`length`) may be shorter than that arc.
    assert len(path.points) <= math.ceil(max_length / spacing) + 2


FOCAL = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, -500.0, math.nan, math.inf, -math.inf, 500.0]),
)


@given(fx=FOCAL, fy=FOCAL, cx=FOCAL, cy=FOCAL)
@example(fx=0.0, fy=0.0, cx=0.0, cy=0.0)
@example(fx=-500.0, fy=480.0, cx=320.0, cy=240.0)
@example(fx=500.0, fy=480.0, cx=math.nan, cy=240.0)
@settings(max_examples=200, deadline=None)
def test_an_unusable_k_is_named_as_such_never_as_no_camera_info(
    fx: float, fy: float, cx: float, cy: float
) -> None:
    k = [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]
    found = camera_intrinsics(k, W, H)
    usable = all(math.isfinite(v) for v in (fx, fy, cx, cy)) and fx > 0 and fy > 0  # the oracle
    assert isinstance(found, str) != usable, found
    if usable:
        return
    assert isinstance(found, str) and found.startswith("CameraInfo K unusable: ")
    reason = ground_path(outcome(AHEAD), found, PLANE, LIMITS, FRAME)
    assert isinstance(reason, str) and reason.startswith("CameraInfo K unusable: ")
    assert "no CameraInfo" not in reason
