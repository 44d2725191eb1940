"""result_checks: the geometric checks before a trajectory is published, on crafted answers and synthetic
depth (holes, a wall behind the table), without ROS."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosmos_reasoner_ros.geometry.projection import Intrinsics, project_trajectories
from cosmos_reasoner_ros.geometry.shapes import Box2D
from cosmos_reasoner_ros.reasoner.parsing import ParsedAnswer, parse_answer
from cosmos_reasoner_ros.requests.result_checks import CHECK_NAMES, checks_pass, depth_checks, image_checks

K = [500.0, 0.0, 320.0, 0.0, 480.0, 240.0, 0.0, 0.0, 1.0]
W, H = 640, 480


def points(*xy: tuple[float, float]) -> ParsedAnswer:
    items = ", ".join(f'{{"point_2d": [{x}, {y}], "label": "path"}}' for x, y in xy)
    return parse_answer(f"[{items}]", "points", width=W, height=H)


def by_name(checks: tuple) -> dict:  # type: ignore[type-arg]
    return {c.name: c for c in checks}


def test_points_inside_pass_and_a_point_answered_off_the_image_fails() -> None:
    inside = by_name(image_checks(points((0, 0), (500, 500), (1000, 1000)), W, H))
    assert set(inside) == {"points_in_image"}  # no boxes: no box check
    assert inside["points_in_image"].passed and inside["points_in_image"].value == 1.0
    off = by_name(image_checks(points((500, 500), (-10, 300), (400, 1001), (10, 10)), W, H))
    check = off["points_in_image"]
    assert not check.passed and check.value == 0.5 and check.limit == 1.0
    assert "points [1, 2]" in check.detail and "640x480" in check.detail
    assert image_checks(parse_answer("Move left.", "text"), W, H) == ()  # text: nothing to check
    assert image_checks(None, W, H) == ()


def test_boxes_need_an_area_in_pixels_and_to_lie_inside() -> None:
    good = parse_answer('[{"bbox_2d": [100, 100, 300, 400]}]', "boxes", W, H)
    assert by_name(image_checks(good, W, H))["boxes_in_image"].passed
    partly_off = parse_answer(
        '[{"bbox_2d": [100, 100, 300, 400]}, {"bbox_2d": [-50, 10, 40, 90]}]', "boxes", W, H
    )
    check = by_name(image_checks(partly_off, W, H))["boxes_in_image"]
    assert (check.passed, check.value) == (False, 0.5) and "box 1 reaches off the image" in check.detail
    sliver = parse_answer('[{"bbox_2d": [100, 100, 100.4, 400]}]', "boxes", W, H)  # 0.26 px wide: has an area
    assert by_name(image_checks(sliver, W, H))["boxes_in_image"].passed
    assert image_checks(good, W, 0) == ()  # no image size: nothing can be checked
    flat = ParsedAnswer(raw="", reasoning=None, answer="", boxes=(Box2D("cup", 100, 100, 100, 400),))
    check = by_name(image_checks(flat, W, H))["boxes_in_image"]  # the parser refuses these; checked anyway
    assert not check.passed and "box 0 has no area" in check.detail


def plane(z: float = 1.0) -> np.ndarray:
    return np.full((H, W), z, np.float32)


def project(answer: ParsedAnswer, depth: np.ndarray, window: int = 3) -> list:  # type: ignore[type-arg]
    return project_trajectories(answer.trajectories, (W, H), depth, Intrinsics.from_k(K, W, H), window)


def test_depth_coverage_counts_the_points_that_found_a_depth() -> None:
    answer = points((100, 100), (300, 300), (500, 500), (700, 700))
    depth = plane()
    depth[int(0.7 * H) - 20 : int(0.7 * H) + 20, int(0.7 * W) - 20 : int(0.7 * W) + 20] = (
        0  # a hole: no return
    )
    checks = by_name(depth_checks(project(answer, depth), 0.8, 1.0))
    coverage = checks["depth_coverage"]
    assert (coverage.passed, coverage.value, coverage.limit) == (False, 0.75, 0.8)
    assert coverage.detail == "3 of 4 points with a valid depth"
    assert by_name(depth_checks(project(answer, depth), 0.75, 1.0))["depth_coverage"].passed
    small_hole = plane()
    small_hole[int(0.7 * H), int(0.7 * W)] = np.nan  # within depth_window_px of valid pixels: found
    assert by_name(depth_checks(project(answer, small_hole), 1.0, 1.0))["depth_coverage"].passed


def test_max_step_is_the_largest_3d_distance_between_consecutive_points() -> None:
    """On a plane at 1 m the step between two pixels is analytic; a wall 3 m behind makes a jump."""
    answer = points((500, 500), (600, 500), (700, 500))  # 64 px apart at fx 500 and Z 1: 0.128 m each
    ok = by_name(depth_checks(project(answer, plane()), 1.0, 0.2))["max_step"]
    assert ok.passed and ok.value == pytest.approx(0.128, abs=1e-3) and ok.limit == 0.2
    depth = plane()
    depth[:, int(0.65 * W) :] = 4.0  # the last point lands on the wall
    jump = by_name(depth_checks(project(answer, depth), 1.0, 0.2))["max_step"]
    u0, u1 = 0.6 * W - 320, 0.7 * W - 320
    expected = math.dist((u0 / 500, 0.0, 1.0), (u1 * 4 / 500, 0.0, 4.0))  # (u - cx) Z / fx, y equal
    assert not jump.passed and jump.value == pytest.approx(expected, rel=1e-3)
    lone = by_name(depth_checks(project(points((500, 500)), plane()), 1.0, 0.2))["max_step"]
    assert lone.passed and lone.value == 0.0 and "fewer than two" in lone.detail
    assert depth_checks([], 0.5, 0.2) == ()


def test_only_the_required_checks_hold_the_path_back() -> None:
    checks = image_checks(points((500, 500), (1200, 500)), W, H) + depth_checks(
        project(points((500, 500), (600, 500)), plane()), 1.0, 0.01
    )
    assert [c.name for c in checks] == ["points_in_image", "depth_coverage", "max_step"]
    assert not checks_pass(checks, CHECK_NAMES)
    assert not checks_pass(checks, ["max_step"]) and not checks_pass(checks, ["points_in_image"])
    assert checks_pass(checks, ["depth_coverage"]) and checks_pass(
        checks, ["boxes_in_image"]
    )  # did not apply
    assert checks_pass(checks, ["none"]) and checks_pass((), CHECK_NAMES)
