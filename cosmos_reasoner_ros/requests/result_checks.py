"""Geometric checks of an answer before its trajectory is published, without ROS: points and boxes inside the
image, and with depth the share of points that found a depth and the largest 3D step along the path.

Every check that applies to an answer is reported in its ReasonerResult (`checks`); the node publishes
~/trajectory and ~/markers only when the checks named by its `publish_checks` parameter passed. A check that
does not apply (no boxes, no depth for the camera) is not reported and does not hold anything back.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from cosmos_reasoner_ros.geometry import ProjectedPath, point_pixels
from cosmos_reasoner_ros.parameters.check_names import (
    BOXES_IN_IMAGE,
    CHECK_NAMES,
    DEPTH_COVERAGE,
    MAX_STEP,
    POINTS_IN_IMAGE,
)
from cosmos_reasoner_ros.reasoner import ParsedAnswer

__all__ = [
    "BOXES_IN_IMAGE",
    "CHECK_NAMES",
    "DEPTH_COVERAGE",
    "MAX_STEP",
    "POINTS_IN_IMAGE",
    "Check",
    "checks_pass",
    "depth_checks",
    "image_checks",
]


@dataclass(frozen=True)
class Check:
    """One check of one answer: what was measured (`value`) against what (`limit`), and whether it passed.

    points_in_image, boxes_in_image: the fraction [0-1] of points (boxes) inside the image, limit 1;
    depth_coverage: the fraction [0-1] of points with a valid depth, limit min_depth_fraction;
    max_step: [m] the largest 3D distance between consecutive back-projected points, limit max_step_m.
    """

    name: str
    passed: bool
    value: float
    limit: float
    detail: str = ""


def _inside(x: float, y: float, width: int, height: int) -> bool:
    # Continuous pixel coordinates: the far edge (0-1000 value 1000) is on the image, beyond it is not.
    return 0.0 <= x <= width and 0.0 <= y <= height


def image_checks(parsed: ParsedAnswer | None, width: int, height: int) -> tuple[Check, ...]:
    """points_in_image when the answer has trajectory points, boxes_in_image when it has boxes.

    The parser clamps coordinates into 0-1000 (so the drawn answer stays on the image); a point it had to move
    was answered off the image and fails here. A box passes with a positive area in pixels, inside the image.
    """
    if parsed is None or width <= 0 or height <= 0:
        return ()
    checks: list[Check] = []
    points = [p for t in parsed.trajectories for p in t.points]
    if points:
        outside = [
            i
            for i, p in enumerate(points)
            if p.clamped or not _inside(*point_pixels(p, width, height), width, height)
        ]
        checks.append(
            Check(
                POINTS_IN_IMAGE,
                not outside,
                (len(points) - len(outside)) / len(points),
                1.0,
                f"points {outside} (0-based, over all trajectories) answered off the {width}x{height} image"
                if outside
                else f"all {len(points)} points inside the {width}x{height} image",
            )
        )
    if parsed.boxes:
        bad: list[str] = []
        for i, b in enumerate(parsed.boxes):
            x1, y1 = point_pixels(_Norm(b.x1_norm, b.y1_norm), width, height)
            x2, y2 = point_pixels(_Norm(b.x2_norm, b.y2_norm), width, height)
            if not (x2 > x1 and y2 > y1):
                bad.append(f"{i} has no area")
            elif b.clamped or not (_inside(x1, y1, width, height) and _inside(x2, y2, width, height)):
                bad.append(f"{i} reaches off the image")
        checks.append(
            Check(
                BOXES_IN_IMAGE,
                not bad,
                (len(parsed.boxes) - len(bad)) / len(parsed.boxes),
                1.0,
                "; ".join(f"box {b}" for b in bad)
                if bad
                else f"all {len(parsed.boxes)} boxes with an area, inside the {width}x{height} image",
            )
        )
    return tuple(checks)


@dataclass(frozen=True)
class _Norm:
    x_norm: float
    y_norm: float


def depth_checks(
    projected: Sequence[tuple[str, ProjectedPath]], min_fraction: float, max_step_m: float
) -> tuple[Check, ...]:
    """depth_coverage and max_step of back-projected trajectories (projection.project_trajectories).

    The step is measured between consecutive points that found a depth, within each trajectory: a point
    without depth is left out of the path, so the step across it is the one a controller would be given.
    """
    total = sum(len(path.points) + path.dropped for _, path in projected)
    if total == 0:
        return ()
    kept = sum(len(path.points) for _, path in projected)
    fraction = kept / total
    steps = [
        math.dist(a, b) for _, path in projected for a, b in zip(path.points, path.points[1:], strict=False)
    ]
    largest = max(steps, default=0.0)
    return (
        Check(
            DEPTH_COVERAGE,
            fraction >= min_fraction,
            fraction,
            min_fraction,
            f"{kept} of {total} points with a valid depth",
        ),
        Check(
            MAX_STEP,
            largest <= max_step_m,
            largest,
            max_step_m,
            f"largest step {largest:.3f} m between consecutive points"
            if steps
            else "fewer than two points with depth: no step",
        ),
    )


def checks_pass(checks: Sequence[Check], required: Collection[str]) -> bool:
    """Every reported check named in `required` passed (a required check that did not apply holds nothing)."""
    return all(c.passed for c in checks if c.name in required)
