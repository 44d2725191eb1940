"""The package's two conventions about numbers, in one place.

Image coordinates: the Reasoner answers points and boxes normalised to 0-1000 per axis from the top-left
corner (even when the prompt says "pixel space"); a pixel is value / 1000 * width (or height) of the image the
answer refers to. Parsed points keep the 0-1000 value; pixels are derived from it here, for any image size.

Time: stamps are int nanoseconds everywhere in the package; (sec, nanosec) pairs exist only at the ROS edge.
"""

from __future__ import annotations

from typing import Protocol

__all__ = [
    "NORM_MAX",
    "NS_PER_S",
    "NormPoint",
    "norm_to_pixel",
    "ns_from_sec_nanosec",
    "ns_to_sec_nanosec",
    "ns_to_seconds",
    "pixel_to_norm",
    "point_pixels",
    "seconds_to_ns",
]

NORM_MAX = 1000.0
NS_PER_S = 1_000_000_000


class NormPoint(Protocol):
    """Anything with 0-1000 coordinates (parsing.Point2D)."""

    @property
    def x_norm(self) -> float: ...

    @property
    def y_norm(self) -> float: ...


def norm_to_pixel(norm: float, extent: int) -> float:
    """A 0-1000 coordinate in pixels of an image `extent` pixels wide (or high)."""
    return norm / NORM_MAX * extent


def pixel_to_norm(pixel: float, extent: int) -> float:
    return pixel / extent * NORM_MAX if extent else 0.0


def point_pixels(point: NormPoint, width: int, height: int) -> tuple[float, float]:
    """(x, y) in pixels of a width x height image."""
    return norm_to_pixel(point.x_norm, width), norm_to_pixel(point.y_norm, height)


def seconds_to_ns(seconds: float) -> int:
    return round(seconds * NS_PER_S)


def ns_to_seconds(ns: int) -> float:
    return ns / NS_PER_S


def ns_from_sec_nanosec(sec: int, nanosec: int) -> int:
    """A ROS time (builtin_interfaces/Time, std_msgs/Header.stamp) as int nanoseconds."""
    return int(sec) * NS_PER_S + int(nanosec)


def ns_to_sec_nanosec(ns: int) -> tuple[int, int]:
    """int nanoseconds as (sec, nanosec); negative values clamp to 0 (ROS Time is unsigned in DDS)."""
    ns = max(0, int(ns))
    return ns // NS_PER_S, ns % NS_PER_S
