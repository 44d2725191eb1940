"""Trajectory points on the ground without depth: each pixel's ray (pinhole model, CameraInfo K) meets a
flat ground plane given by the camera's height above it and the pitch of its optical axis, in the camera's
optical frame (x right, y down, z forward). The inverse, a point to its pixel, is here too: it draws a path on
the image and is the tests' oracle.

The model is a rectified (undistorted) image: CameraInfo's D is not applied, so with a wide-angle lens the
error grows towards the image's corners (use the rectified image topic, or depth). A ray at or above the
horizon never meets the ground, and one just below it meets it very far away, where a pixel spans metres:
both are refused with a reason instead of being turned into a point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cosmos_reasoner_ros.geometry.projection import Intrinsics

__all__ = ["GroundPlane", "GroundProjection", "Vec3", "pixel_of", "project_to_ground"]

Vec3 = tuple[float, float, float]

_MIN_DEPRESSION_RAD = math.radians(0.05)  # a ray this close to the horizon counts as on it


@dataclass(frozen=True)
class GroundPlane:
    """The ground under a camera: its optical centre `height_m` above a flat ground, its optical axis
    `pitch_rad` below the horizontal (positive: looking down; no roll). ValueError when unusable."""

    height_m: float
    pitch_rad: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.height_m) and self.height_m > 0):
            raise ValueError(f"the camera's height above the ground must be > 0 m, got {self.height_m}")
        if not (math.isfinite(self.pitch_rad) and abs(self.pitch_rad) < math.pi / 2):
            raise ValueError(f"the camera's pitch must be within +-90 degrees, got {self.pitch_rad} rad")

    @classmethod
    def from_degrees(cls, height_m: float, pitch_deg: float) -> GroundPlane:
        return cls(height_m=float(height_m), pitch_rad=math.radians(pitch_deg))

    @property
    def up(self) -> Vec3:
        """The ground's upward normal in the optical frame (unit length)."""
        return (0.0, -math.cos(self.pitch_rad), -math.sin(self.pitch_rad))

    @property
    def foot(self) -> Vec3:
        """The point of the ground under the optical centre: where the robot stands, as the camera sees it."""
        return (0.0, self.height_m * math.cos(self.pitch_rad), self.height_m * math.sin(self.pitch_rad))

    def height_of(self, point: Sequence[float]) -> float:
        """[m] how far above the ground a point of the optical frame is (0 on it, negative below)."""
        return _dot(self.up, point) + self.height_m

    def on_ground(self, point: Sequence[float]) -> Vec3:
        """The point dropped vertically onto the ground."""
        h, up = self.height_of(point), self.up
        return (point[0] - h * up[0], point[1] - h * up[1], point[2] - h * up[2])

    def ground_distance(self, point: Sequence[float]) -> float:
        """[m] the horizontal distance from the camera's foot to the point (dropped onto the ground)."""
        return math.dist(self.on_ground(point), self.foot)


@dataclass(frozen=True)
class GroundProjection:
    """The points that met the ground ([m], optical frame), the indices they came from, and each refused point
    with why (its index among the points asked)."""

    points: tuple[Vec3, ...]
    kept_indices: tuple[int, ...]
    refused: tuple[tuple[int, str], ...]


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def ground_point(
    u: float, v: float, intrinsics: Intrinsics, plane: GroundPlane, max_range_m: float
) -> Vec3 | str:
    """The ground point seen at pixel (u, v) of the intrinsics' image, or why there is none."""
    ray = ((u - intrinsics.cx) / intrinsics.fx, (v - intrinsics.cy) / intrinsics.fy, 1.0)
    towards_up = _dot(plane.up, ray)
    # The ray's angle below the horizontal; at or above it, the ray never reaches the ground in front.
    depression = -math.asin(max(-1.0, min(1.0, towards_up / math.sqrt(_dot(ray, ray)))))
    if depression < _MIN_DEPRESSION_RAD:
        where = (
            "on" if abs(depression) < _MIN_DEPRESSION_RAD else f"{math.degrees(-depression):.1f} deg above"
        )
        return f"pixel ({u:.0f}, {v:.0f}) is {where} the horizon: its ray never meets the ground"
    t = plane.height_m / -towards_up
    point = (ray[0] * t, ray[1] * t, ray[2] * t)
    distance = plane.ground_distance(point)
    if distance > max_range_m:
        return (
            f"pixel ({u:.0f}, {v:.0f}) meets the ground {distance:.1f} m away, beyond max_range_m "
            f"({max_range_m:g} m): {math.degrees(depression):.1f} deg below the horizon, where a pixel spans "
            "too much ground"
        )
    return point


def project_to_ground(
    points_px: Sequence[tuple[float, float]],
    image_size: tuple[int, int],
    intrinsics: Intrinsics,
    plane: GroundPlane,
    max_range_m: float,
) -> GroundProjection:
    """Pixel points of an image of `image_size` (width, height; scaled to the intrinsics' resolution, as the
    clip may have been downscaled) on the ground, each point kept or refused with its reason."""
    img_w, img_h = image_size
    if img_w <= 0 or img_h <= 0:
        raise ValueError(f"image size must be positive, got {image_size}")
    sx, sy = intrinsics.width / img_w, intrinsics.height / img_h
    points: list[Vec3] = []
    kept: list[int] = []
    refused: list[tuple[int, str]] = []
    for index, (x, y) in enumerate(points_px):
        found = ground_point(x * sx, y * sy, intrinsics, plane, max_range_m)
        if isinstance(found, str):
            refused.append((index, found))
        else:
            points.append(found)
            kept.append(index)
    return GroundProjection(tuple(points), tuple(kept), tuple(refused))


def pixel_of(
    point: Sequence[float], intrinsics: Intrinsics, image_size: tuple[int, int] | None = None
) -> tuple[float, float] | None:
    """The pixel (u, v) a point of the optical frame is seen at (pinhole), in the intrinsics' image or, given
    `image_size`, in an image of that size; None for a point not in front of the camera."""
    x, y, z = point[0], point[1], point[2]
    if not z > 1e-9:
        return None
    u, v = intrinsics.fx * x / z + intrinsics.cx, intrinsics.fy * y / z + intrinsics.cy
    if image_size is not None:
        u, v = u * image_size[0] / intrinsics.width, v * image_size[1] / intrinsics.height
    return u, v
