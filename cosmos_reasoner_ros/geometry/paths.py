"""3D polylines as a base follows them: their length, resampling to an even spacing, cropping to a length, how
far apart two paths are (the discrete Fréchet distance: order matters, as it does to a robot), and the heading
of each pose (x along the path, z the ground's up), as quaternions (x, y, z, w)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from cosmos_reasoner_ros.geometry.ground_plane import Vec3

__all__ = [
    "BasePath",
    "Quaternion",
    "crop",
    "frechet_distance",
    "headings",
    "path_length",
    "resample",
    "rotate",
    "transform_path",
]

Quaternion = tuple[float, float, float, float]  # (x, y, z, w)


@dataclass(frozen=True)
class BasePath:
    """A path for a mobile base: poses on the ground, `path_spacing` apart, each level with it (x along the
    path), in one frame at one time (the observation's), and where they came from."""

    points: tuple[Vec3, ...]  # [m] in frame_id
    orientations: tuple[Quaternion, ...]
    frame_id: str
    stamp_ns: int  # the clip's end: tf2 transforms the path from the time it was seen
    source: str  # "depth" or "ground_plane"
    length_m: float  # [m] of `points`
    answered_length_m: float  # [m] of the answer's whole path, before cropping
    start_distance_m: float  # [m] from the camera's foot to the first point, on the ground
    pixels: tuple[tuple[float, float], ...] = ()  # the points seen in the answer's image [px]
    label: str = ""


def path_length(points: Sequence[Vec3]) -> float:
    """[m] the sum of the segments' lengths."""
    return sum(math.dist(a, b) for a, b in itertools.pairwise(points))


def _lerp(a: Vec3, b: Vec3, f: float) -> Vec3:
    return (a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f)


def resample(points: Sequence[Vec3], spacing_m: float) -> tuple[Vec3, ...]:
    """The polyline's points every `spacing_m` along it from the first, and its last point (the last step may
    be shorter). A path without length is its first point."""
    if spacing_m <= 0 or not math.isfinite(spacing_m):
        raise ValueError(f"spacing must be a positive number of metres, got {spacing_m}")
    if not points:
        return ()
    out = [points[0]]
    next_at, walked = spacing_m, 0.0  # arc length of the next sample, arc length at segment start
    for a, b in itertools.pairwise(points):
        seg = math.dist(a, b)
        while seg > 0 and next_at <= walked + seg:
            out.append(_lerp(a, b, (next_at - walked) / seg))
            next_at += spacing_m
        walked += seg
    if walked > 0:
        # The end exactly, also where the last sample fell on it but for rounding (no near-duplicate pose).
        if len(out) > 1 and math.dist(out[-1], points[-1]) <= 1e-9 * max(1.0, walked):
            out[-1] = points[-1]
        elif out[-1] != points[-1]:
            out.append(points[-1])
    return tuple(out)


def crop(points: Sequence[Vec3], max_length_m: float) -> tuple[Vec3, ...]:
    """The first `max_length_m` of the polyline (its end interpolated on the segment where the length runs
    out); the whole polyline when it is shorter."""
    if not points:
        return ()
    out = [points[0]]
    walked = 0.0
    for a, b in itertools.pairwise(points):
        seg = math.dist(a, b)
        if walked + seg > max_length_m:
            if seg > 0 and max_length_m > walked:
                out.append(_lerp(a, b, (max_length_m - walked) / seg))
            break
        out.append(b)
        walked += seg
    return tuple(out)


def frechet_distance(a: Sequence[Vec3], b: Sequence[Vec3]) -> float:
    """[m] the discrete Fréchet distance: the shortest leash with which two walkers, each going forward along
    its own path from start to end, stay connected. 0 for the same path; inf when one is empty. O(len a *
    len b) time, O(len b) memory: resample both first (a spacing bounds their lengths)."""
    if not a or not b:
        return math.inf
    previous: list[float] = []
    for i, p in enumerate(a):
        row: list[float] = []
        for j, q in enumerate(b):
            d = math.dist(p, q)
            if i == 0 and j == 0:
                row.append(d)
            elif i == 0:
                row.append(max(row[j - 1], d))
            elif j == 0:
                row.append(max(previous[0], d))
            else:
                row.append(max(min(previous[j], previous[j - 1], row[j - 1]), d))
        previous = row
    return previous[-1]


def _normalised(v: Vec3) -> Vec3 | None:
    n = math.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])
    return (v[0] / n, v[1] / n, v[2] / n) if n > 1e-9 else None


def _cross(a: Vec3, b: Vec3) -> Vec3:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _horizontal(v: Vec3, up: Vec3) -> Vec3 | None:
    """v without its component along `up`, unit length; None when v is (nearly) vertical or zero."""
    along = v[0] * up[0] + v[1] * up[1] + v[2] * up[2]
    return _normalised((v[0] - along * up[0], v[1] - along * up[1], v[2] - along * up[2]))


def _quaternion(x: Vec3, y: Vec3, z: Vec3) -> Quaternion:
    """The rotation whose columns are the unit axes x, y, z (a right-handed orthonormal frame)."""
    m00, m10, m20 = x
    m01, m11, m21 = y
    m02, m12, m22 = z
    trace = m00 + m11 + m22
    if trace > 0:
        s = 2.0 * math.sqrt(trace + 1.0)
        q = ((m21 - m12) / s, (m02 - m20) / s, (m10 - m01) / s, 0.25 * s)
    elif m00 > m11 and m00 > m22:
        s = 2.0 * math.sqrt(1.0 + m00 - m11 - m22)
        q = (0.25 * s, (m01 + m10) / s, (m02 + m20) / s, (m21 - m12) / s)
    elif m11 > m22:
        s = 2.0 * math.sqrt(1.0 + m11 - m00 - m22)
        q = ((m01 + m10) / s, 0.25 * s, (m12 + m21) / s, (m02 - m20) / s)
    else:
        s = 2.0 * math.sqrt(1.0 + m22 - m00 - m11)
        q = ((m02 + m20) / s, (m12 + m21) / s, 0.25 * s, (m10 - m01) / s)
    n = math.sqrt(sum(c * c for c in q))
    return (q[0] / n, q[1] / n, q[2] / n, q[3] / n)


def headings(points: Sequence[Vec3], up: Vec3, forward: Vec3 = (0.0, 0.0, 1.0)) -> tuple[Quaternion, ...]:
    """One orientation per point: its x axis along the path towards the next point (the last point keeps the
    previous heading), level with the ground (z axis `up`), so that in the robot's frame each pose is a pure
    yaw. Where the path gives no direction (one point, repeated points), the `forward` direction (the optical
    axis) levelled."""
    z_axis = _normalised(up)
    if z_axis is None:
        raise ValueError("up must not be zero")
    fallback = _horizontal(forward, z_axis) or _horizontal((1.0, 0.0, 0.0), z_axis)
    assert fallback is not None  # forward and the x axis cannot both be vertical
    directions: list[Vec3 | None] = [
        _horizontal((b[0] - a[0], b[1] - a[1], b[2] - a[2]), z_axis) for a, b in itertools.pairwise(points)
    ]
    out: list[Quaternion] = []
    current = next((d for d in directions if d is not None), fallback)
    for i in range(len(points)):
        if i < len(directions) and directions[i] is not None:
            current = directions[i] or current
        x_axis = current
        y_axis = _cross(z_axis, x_axis)
        out.append(_quaternion(x_axis, y_axis, z_axis))
    return tuple(out)


def _multiply(a: Quaternion, b: Quaternion) -> Quaternion:
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    )


def rotate(q: Quaternion, v: Vec3) -> Vec3:
    """v rotated by the unit quaternion q (x, y, z, w)."""
    x, y, z, w = q
    # v' = v + 2w (q x v) + 2 q x (q x v)
    cx, cy, cz = y * v[2] - z * v[1], z * v[0] - x * v[2], x * v[1] - y * v[0]
    dx, dy, dz = y * cz - z * cy, z * cx - x * cz, x * cy - y * cx
    return (v[0] + 2 * (w * cx + dx), v[1] + 2 * (w * cy + dy), v[2] + 2 * (w * cz + dz))


def transform_path(path: BasePath, translation: Vec3, rotation: Quaternion, frame_id: str) -> BasePath:
    """The path in another frame, given that frame's transform from the path's (tf2's
    lookup_transform(frame_id, path.frame_id, stamp): p' = R p + t): every point and orientation moved, its
    stamp and the rest kept."""
    n = math.sqrt(sum(c * c for c in rotation))
    if not (n > 0 and math.isfinite(n)):
        raise ValueError(f"not a rotation: {rotation}")
    r = (rotation[0] / n, rotation[1] / n, rotation[2] / n, rotation[3] / n)
    points = tuple(
        (p[0] + translation[0], p[1] + translation[1], p[2] + translation[2])
        for p in (rotate(r, point) for point in path.points)
    )
    return dataclasses.replace(
        path,
        points=points,
        orientations=tuple(_multiply(r, q) for q in path.orientations),
        frame_id=frame_id,
    )
