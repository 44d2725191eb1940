"""The shapes an answer holds: points, trajectories and boxes in the Reasoner's 0-1000 space, with their
pixels in the image the answer refers to (derived through coordinates.py). The parser makes them; projection,
annotation, the checks and the message conversion read them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Box2D", "Point2D", "Trajectory"]


@dataclass(frozen=True)
class Point2D:
    label: str
    x_norm: float  # 0-1000 from the left
    y_norm: float  # 0-1000 from the top
    x: float | None = None  # pixels of the source image; None when its size is unknown
    y: float | None = None
    clamped: bool = False  # the model answered a coordinate outside 0-1000 (off the image); it was clamped


@dataclass(frozen=True)
class Trajectory:
    label: str
    points: tuple[Point2D, ...]


@dataclass(frozen=True)
class Box2D:
    label: str
    x1_norm: float
    y1_norm: float
    x2_norm: float
    y2_norm: float
    x1: float | None = None
    y1: float | None = None
    x2: float | None = None
    y2: float | None = None
    clamped: bool = False  # a corner was answered outside 0-1000 (partly off the image) and clamped
