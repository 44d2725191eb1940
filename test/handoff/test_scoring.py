"""A handoff path scored against a labelled path (for the bag tools' labels): zero against its own label, the
ground distance of a label drawn elsewhere, the image distance without intrinsics, and a label that cannot lie
on the ground named."""

from __future__ import annotations

import pytest
from support.handoff_answers import (
    AHEAD,
    FRAME,
    HEIGHT_M,
    INTRINSICS,
    LEFT,
    PITCH_DEG,
    TO_THE_SKY,
    H,
    W,
    outcome,
)

from cosmos_reasoner_ros.geometry import GroundPlane, Point2D, Trajectory
from cosmos_reasoner_ros.handoff import PathLimits, ground_path, score_path_against_label

PLANE = GroundPlane.from_degrees(HEIGHT_M, PITCH_DEG)
LIMITS = PathLimits(0.1, 3.0, 1.5, 6.0)


def label(points: tuple[tuple[int, int], ...]) -> Trajectory:
    return Trajectory("robot path", tuple(Point2D("robot path", float(x), float(y)) for x, y in points))


def sent(points: tuple[tuple[int, int], ...]):  # type: ignore[no-untyped-def]
    path = ground_path(outcome(points), INTRINSICS, PLANE, LIMITS, FRAME)
    assert not isinstance(path, str)
    return path


def test_a_path_scores_zero_against_its_own_label_and_more_against_another() -> None:
    path = sent(AHEAD)
    own = score_path_against_label(path.points, path.pixels, label(AHEAD), (W, H), INTRINSICS, PLANE, LIMITS)
    assert own.frechet_m == pytest.approx(0.0, abs=1e-9) and own.start_m == pytest.approx(0.0, abs=1e-9)
    assert own.frechet_px < 2.0  # poses every 0.1 m drawn back on the answer's polyline
    other = score_path_against_label(path.points, path.pixels, label(LEFT), (W, H), INTRINSICS, PLANE, LIMITS)
    assert other.frechet_m is not None and other.frechet_m > 0.2 and other.end_m is not None
    assert other.start_m == pytest.approx(0.0, abs=1e-9)  # both start at the same pixel
    assert other.frechet_px > 50.0


def test_without_intrinsics_only_the_image_distance_and_a_label_in_the_sky_is_named() -> None:
    path = sent(AHEAD)
    image_only = score_path_against_label(path.points, path.pixels, label(LEFT), (W, H))
    assert (image_only.frechet_m, image_only.start_m, image_only.end_m) == (None, None, None)
    assert image_only.frechet_px > 50.0
    sky = score_path_against_label(
        path.points, path.pixels, label(TO_THE_SKY), (W, H), INTRINSICS, PLANE, LIMITS
    )
    assert sky.frechet_m is None and "above the horizon" in sky.label_problem
