"""From a trajectory answer to a path a base can follow: its first trajectory on the ground (the depth path
the node back-projected where the camera has depth, else the pixels on the ground plane), bounded (every point
below the horizon and within range, the first point near the robot), cropped to a length, resampled to a
spacing, oriented level with the ground, in the camera's optical frame, stamped at the clip's end."""

from __future__ import annotations

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

__all__ = ["PathLimits", "answer_trajectory", "ground_path"]

DEPTH = "depth"
GROUND_PLANE = "ground_plane"
_MAX_REASONS = (
    4  # refused points named in a reason at most (a 16-point answer above the horizon: 4 and a count)
)


@dataclass(frozen=True)
class PathLimits:
    """What a path may be (handoff.path_spacing_m, max_path_length_m, max_start_distance_m, max_range_m)."""

    spacing_m: float
    max_length_m: float
    max_start_distance_m: float
    max_range_m: float


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
    intrinsics: Intrinsics | None,
    plane: GroundPlane,
    limits: PathLimits,
    frame_id: str,
) -> BasePath | str:
    """The answer's path on the ground, or why there is none. `frame_id`: the camera's optical frame (the
    frame of the depth path when there is one); `intrinsics`: from the camera's CameraInfo (None: none
    yet)."""
    trajectory = answer_trajectory(outcome)
    if trajectory is None:
        return "the answer holds no trajectory"
    size = (outcome.image_width, outcome.image_height)
    depth_points = _depth_points(outcome, trajectory)
    if depth_points:
        points, source = depth_points, DEPTH
        frame_id = outcome.paths_frame_id or frame_id
    else:
        if intrinsics is None:
            return "no CameraInfo of the camera yet: the ground plane needs its intrinsics (K)"
        if size[0] <= 0 or size[1] <= 0:
            return "the answer's image size is unknown"
        pixels = [point_pixels(p, *size) for p in trajectory.points]
        projected = project_to_ground(pixels, size, intrinsics, plane, limits.max_range_m)
        if projected.refused:
            named = "; ".join(f"point {i}: {why}" for i, why in projected.refused[:_MAX_REASONS])
            more = len(projected.refused) - _MAX_REASONS
            return (
                f"{len(projected.refused)} of {len(pixels)} points refused on the ground plane: {named}"
                + (f"; and {more} more" if more > 0 else "")
            )
        points, source = projected.points, GROUND_PLANE
    if len(points) < 2:
        return f"a path needs at least 2 points on the ground, the answer has {len(points)}"
    if not frame_id:
        return "no frame for the path: set handoff.frame_id (or the camera's frame_id)"
    start = plane.ground_distance(points[0])
    answered = path_length(points)
    kept = resample(crop(points, limits.max_length_m), limits.spacing_m)
    drawn: list[tuple[float, float]] = []
    if intrinsics is not None and size[0] > 0 and size[1] > 0:
        for p in kept:
            pixel = pixel_of(p, intrinsics, size)
            if pixel is not None:
                drawn.append(pixel)
    return BasePath(
        points=kept,
        orientations=headings(kept, plane.up),
        frame_id=frame_id,
        stamp_ns=outcome.clip_end_ns,
        source=source,
        length_m=path_length(kept),
        answered_length_m=answered,
        start_distance_m=start,
        pixels=tuple(drawn),
        label=trajectory.label,
    )
