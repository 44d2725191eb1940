"""Drawing answers on real frames: polylines and waypoints where the points are, boxes at their corners."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from cosmos_reasoner_ros.geometry.annotation import PALETTE, annotate
from cosmos_reasoner_ros.geometry.shapes import Box2D, Point2D, Trajectory


@pytest.fixture(scope="module")
def frame(robot_clip: Path) -> np.ndarray:
    cap = cv2.VideoCapture(str(robot_clip))
    ok, bgr = cap.read()
    cap.release()
    assert ok, "could not decode the robot clip"
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def changed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.any(a != b, axis=2)


def test_trajectory_is_drawn_along_its_points_and_input_is_untouched(frame: np.ndarray) -> None:
    h, w = frame.shape[:2]
    points = (Point2D("gripper", 200, 200), Point2D("gripper", 800, 200), Point2D("gripper", 800, 800))
    before = frame.copy()
    out = annotate(frame, [Trajectory("gripper", points)])
    assert np.array_equal(frame, before), "annotate must not modify its input"
    diff = changed(frame, out)
    # Pixels on the segment between the first two waypoints (at mid-way) and at each waypoint are drawn.
    for xn, yn in [(500, 200), (200, 200), (800, 200), (800, 800), (800, 500)]:
        x, y = round(xn / 1000 * w), round(yn / 1000 * h)
        assert diff[y - 2 : y + 3, x - 2 : x + 3].any(), (xn, yn)
    # Far from the path (lower left) nothing changes.
    assert not diff[int(0.75 * h) : h - 5, 5 : int(0.1 * w)].any()
    # The waypoints use the trajectory colour.
    x, y = round(0.8 * w), round(0.8 * h)
    assert tuple(out[y, x]) == PALETTE[0]


def test_points_are_drawn_from_the_normalised_values(frame: np.ndarray) -> None:
    # Pixels refer to the camera's own image, which may be larger than the buffered frame drawn on: the
    # 0-1000 values place the point on a frame of any size.
    p = Point2D("p", x_norm=900, y_norm=900, x=50.0, y=60.0)
    out = annotate(frame, [Trajectory("p", (p,))])
    diff = changed(frame, out)
    h, w = frame.shape[:2]
    assert diff[int(0.9 * h) - 3 : int(0.9 * h) + 3, int(0.9 * w) - 3 : int(0.9 * w) + 3].any()
    assert not diff[55:66, 45:56].any()


def test_box_outline_and_label(frame: np.ndarray) -> None:
    h, w = frame.shape[:2]
    box = Box2D("cup", 250, 300, 750, 700)
    out = annotate(frame, boxes=[box])
    diff = changed(frame, out)
    x1, y1, x2, y2 = round(0.25 * w), round(0.3 * h), round(0.75 * w), round(0.7 * h)
    mid_y = (y1 + y2) // 2
    assert diff[mid_y, x1 - 1 : x1 + 2].any() and diff[mid_y, x2 - 1 : x2 + 2].any()
    cx = (x1 + x2) // 2
    assert not diff[mid_y - 5 : mid_y + 5, cx - 5 : cx + 5].any(), "box must be hollow"
    assert diff[y1 - 20 : y1 - 2, x1 : x1 + 30].any(), "label above the box"


def test_caption_and_bad_input(frame: np.ndarray) -> None:
    out = annotate(frame, caption="move the arm left")
    assert changed(frame, out)[:30, :200].any()
    with pytest.raises(ValueError, match="HxWx3"):
        annotate(frame[:, :, 0])
    # Points at the image edge (0 and 1000) are drawn without errors.
    edge = Trajectory("e", (Point2D("e", 0, 0), Point2D("e", 1000, 1000)))
    assert changed(frame, annotate(frame, [edge])).any()
