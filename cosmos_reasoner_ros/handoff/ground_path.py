"""From a trajectory answer to a path a base can follow: its first trajectory on the ground (the depth path
the node back-projected where the camera has depth, else the pixels on the ground plane), bounded (every point
below the horizon and within range, the first point near the robot), drivable (near-repeated points collapsed,
at least two distinct poses, never running back toward the camera, at least min_length_m long), cropped to a
length, resampled to a spacing, oriented level with the ground, in the camera's optical frame, stamped at the
clip's end. A path that is none of these is refused with the reason that names its cause."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cosmos_reasoner_ros.geometry import (
    BasePath,
    GroundPlane,
    Intrinsics,
    Trajectory,
    Vec3,
    crop,
    headings,
    path_length,
    pixel_of,
    point_pixels,
    project_to_ground,
    resample,
)
from cosmos_reasoner_ros.requests import Outcome

__all__ = [
    "BACKWARD_TOLERANCE_M",
    "NEAR_FRACTION",
    "PathLimits",
    "answer_trajectory",
    "camera_intrinsics",
    "ground_path",
]

DEPTH = "depth"
GROUND_PLANE = "ground_plane"
_MAX_REASONS = (
    4  # refused points named in a reason at most (a 16-point answer above the horizon: 4 and a count)
)
# Points closer than this fraction of path_spacing_m to the previous point kept are one point (a model repeats
# a point, or draws two a pixel apart): they collapse before the distinct points are counted.
NEAR_FRACTION = 0.25
# [m] How far a path may come back toward the camera (along its levelled view direction) from the farthest
# point it reached: farther, and the base would turn round into ground the camera cannot see (an answer
# listed from far to near, a hairpin); refused. Depth noise and a model's wobble stay under it.
BACKWARD_TOLERANCE_M = 0.1


@dataclass(frozen=True)
class PathLimits:
    """What a path may be (handoff.path_spacing_m, max_path_length_m, max_start_distance_m, max_range_m,
    min_path_length_m)."""

    spacing_m: float
    max_length_m: float
    max_start_distance_m: float
    max_range_m: float
    min_length_m: float = 0.0

    @property
    def near_m(self) -> float:
        """[m] points closer than this to the previous one collapse into it."""
        return self.spacing_m * NEAR_FRACTION


def camera_intrinsics(k: Sequence[float], width: int, height: int) -> Intrinsics | str:
    """A CameraInfo's intrinsics, or why they are unusable, in words that name the cause (K's focal lengths
    zero, negative or not finite; no image size): the ground plane cannot be used with them."""
    try:
        values = [float(v) for v in k]
    except (TypeError, ValueError) as exc:
        return f"CameraInfo K unusable: {exc}"
    if len(values) != 9:
        return f"CameraInfo K unusable: {len(values)} values, not 9"
    named = {"fx": values[0], "fy": values[4], "cx": values[2], "cy": values[5]}
    infinite = [f"{n}={v}" for n, v in named.items() if not math.isfinite(v)]
    if infinite:
        return f"CameraInfo K unusable: not finite ({', '.join(infinite)})"
    if not (named["fx"] > 0 and named["fy"] > 0):
        return f"CameraInfo K unusable: focal lengths must be > 0 (fx={named['fx']:g}, fy={named['fy']:g})"
    if width <= 0 or height <= 0:
        return f"CameraInfo size unusable: {width}x{height}"
    return Intrinsics.from_k(values, width, height)


def answer_trajectory(outcome: Outcome) -> Trajectory | None:
    """The trajectory an answer's path comes from: its first with a point (the parser groups points by
    label)."""
    parsed = outcome.parsed
    if parsed is None:
        return None
    return next((t for t in parsed.trajectories if t.points), None)


def _depth_points(outcome: Outcome, trajectory: Trajectory) -> tuple[Vec3, ...]:
    for label, points in outcome.paths_3d:
        if label == trajectory.label:
            return points
    return ()


def ground_path(
    outcome: Outcome,
    intrinsics: Intrinsics | str | None,
    plane: GroundPlane,
    limits: PathLimits,
    frame_id: str,
) -> BasePath | str:
    """The answer's path on the ground, or why there is none. `frame_id`: the camera's optical frame (the
    frame of the depth path when there is one); `intrinsics`: from the camera's newest CameraInfo (None: none
    yet; a string: why it is unusable, camera_intrinsics)."""
    unusable = intrinsics if isinstance(intrinsics, str) else ""
    if isinstance(intrinsics, str):
        intrinsics = None
    trajectory = answer_trajectory(outcome)
    if trajectory is None:
        return "the answer holds no trajectory"
    size = (outcome.image_width, outcome.image_height)
    depth_points = _depth_points(outcome, trajectory)
    points: Sequence[Vec3]
    if depth_points:
        points, source = depth_points, DEPTH
        frame_id = outcome.paths_frame_id or frame_id
    else:
        projected = _ground_plane_points(trajectory, size, intrinsics, unusable, plane, limits)
        if isinstance(projected, str):
            return projected
        points, source = projected, GROUND_PLANE
    checked = _distinct_points(points, limits)
    if isinstance(checked, str):
        return checked
    distinct, indices = checked
    if not frame_id:
        return "no frame for the path: set handoff.frame_id (or the camera's frame_id)"
    cropped = crop(distinct, limits.max_length_m)
    if problem := _backward_problem(cropped, indices, plane):
        return problem
    kept = _without_near_end(resample(cropped, limits.spacing_m), limits.near_m)
    length = path_length(kept)
    if length < limits.min_length_m:
        return (
            f"the path is {length:.3f} m long on the ground, shorter than min_path_length_m "
            f"({limits.min_length_m:g} m)"
        )
    return BasePath(
        points=kept,
        orientations=headings(kept, plane.up),
        frame_id=frame_id,
        stamp_ns=outcome.clip_end_ns,
        source=source,
        length_m=length,
        answered_length_m=path_length(distinct),
        start_distance_m=plane.ground_distance(distinct[0]),
        pixels=_drawn_pixels(kept, intrinsics, size),
        label=trajectory.label,
    )


def _ground_plane_points(
    trajectory: Trajectory,
    size: tuple[int, int],
    intrinsics: Intrinsics | None,
    unusable: str,
    plane: GroundPlane,
    limits: PathLimits,
) -> Sequence[Vec3] | str:
    """The trajectory's pixels projected on the ground plane, or why they cannot be."""
    if unusable:
        return f"{unusable}: the ground plane needs the camera's intrinsics"
    if intrinsics is None:
        return "no CameraInfo of the camera yet: the ground plane needs its intrinsics (K)"
    if size[0] <= 0 or size[1] <= 0:
        return "the answer's image size is unknown"
    pixels = [point_pixels(p, *size) for p in trajectory.points]
    projected = project_to_ground(pixels, size, intrinsics, plane, limits.max_range_m)
    if projected.refused:
        named = "; ".join(f"point {i}: {why}" for i, why in projected.refused[:_MAX_REASONS])
        more = len(projected.refused) - _MAX_REASONS
        return f"{len(projected.refused)} of {len(pixels)} points refused on the ground plane: {named}" + (
            f"; and {more} more" if more > 0 else ""
        )
    return projected.points


def _distinct_points(
    points: Sequence[Vec3], limits: PathLimits
) -> tuple[tuple[Vec3, ...], tuple[int, ...]] | str:
    """At least 2 finite, distinct points (with their indices in the answer), or why there are not."""
    if len(points) < 2:
        return f"a path needs at least 2 points on the ground, the answer has {len(points)}"
    unfit = [i for i, p in enumerate(points) if not all(math.isfinite(c) for c in p)]
    if unfit:
        return f"{len(unfit)} of {len(points)} points of the path are not finite numbers (points {unfit[:4]})"
    distinct, indices = _collapse(points, limits.near_m)
    if len(distinct) < 2:
        return (
            f"a path needs at least 2 distinct points on the ground, the answer's {len(points)} are one "
            f"point (points closer than {limits.near_m:.3g} m, {NEAR_FRACTION:g} of path_spacing_m, collapse)"
        )
    return distinct, indices


def _backward_problem(cropped: Sequence[Vec3], indices: Sequence[int], plane: GroundPlane) -> str:
    """Why a path that runs back toward the camera is refused; "" when it does not."""
    back = _runs_back(cropped, plane)
    if back is None:
        return ""
    far, near, by = back
    return (
        f"the path runs back toward the camera: point {indices[min(near, len(indices) - 1)]} is "
        f"{by:.2f} m nearer along the camera's view than point {indices[far]}, more than "
        f"{BACKWARD_TOLERANCE_M:g} m (an answer listed from its end to its start?)"
    )


def _drawn_pixels(
    kept: Sequence[Vec3], intrinsics: Intrinsics | None, size: tuple[int, int]
) -> tuple[tuple[float, float], ...]:
    """The path's points in the image (those in front of the camera), to draw on it."""
    drawn: list[tuple[float, float]] = []
    if intrinsics is not None and size[0] > 0 and size[1] > 0:
        for p in kept:
            pixel = pixel_of(p, intrinsics, size)
            if pixel is not None:
                drawn.append(pixel)
    return tuple(drawn)


def _collapse(points: Sequence[Vec3], near_m: float) -> tuple[tuple[Vec3, ...], tuple[int, ...]]:
    """The points without those closer than near_m to the previous one kept, with their indices."""
    kept, indices = [points[0]], [0]
    for i, p in enumerate(points[1:], start=1):
        if math.dist(p, kept[-1]) >= near_m:
            kept.append(p)
            indices.append(i)
    return tuple(kept), tuple(indices)


def _runs_back(points: Sequence[Vec3], plane: GroundPlane) -> tuple[int, int, float] | None:
    """(the farthest point so far, the point after it, by how much [m] it is nearer) where a point comes back
    toward the camera, along its view levelled onto the ground, by more than BACKWARD_TOLERANCE_M; None when
    none does. The optical axis (0, 0, 1) levelled: (0, -sin(pitch), cos(pitch)), orthogonal to `up`."""
    up = plane.up
    level = (0.0, up[2], -up[1])  # up is (0, -cos, -sin): this is (0, -sin, cos)
    farthest, at = -math.inf, 0
    for i, p in enumerate(points):
        ahead = p[0] * level[0] + p[1] * level[1] + p[2] * level[2]
        if ahead > farthest:
            farthest, at = ahead, i
        elif farthest - ahead > BACKWARD_TOLERANCE_M:
            return at, i, farthest - ahead
    return None


def _without_near_end(points: tuple[Vec3, ...], near_m: float) -> tuple[Vec3, ...]:
    """A resampled path whose last step is a near-repeat (the end a hair past the last sample) loses that
    sample: its end stays exact, its last step is at most spacing + near_m."""
    if len(points) > 2 and math.dist(points[-2], points[-1]) < near_m:
        return points[:-2] + points[-1:]
    return points
