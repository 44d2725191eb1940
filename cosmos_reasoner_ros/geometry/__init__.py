"""Geometry of an answer, the lowest layer: the 0-1000 <-> pixel convention and int-nanosecond stamps
(coordinates), the shapes an answer holds (shapes: points, trajectories, boxes), their back-projection with
depth into 3D (projection), and their drawing on a frame (annotation). Imports nothing else of the package."""

from cosmos_reasoner_ros.geometry.annotation import PALETTE, annotate
from cosmos_reasoner_ros.geometry.coordinates import (
    NORM_MAX,
    NS_PER_S,
    NormPoint,
    norm_to_pixel,
    ns_from_sec_nanosec,
    ns_to_sec_nanosec,
    ns_to_seconds,
    pixel_to_norm,
    point_pixels,
    seconds_to_ns,
)
from cosmos_reasoner_ros.geometry.projection import (
    DepthHistory,
    Intrinsics,
    ProjectedPath,
    back_project,
    depth_at,
    depth_to_meters,
    project_trajectories,
)
from cosmos_reasoner_ros.geometry.shapes import Box2D, Point2D, Trajectory

__all__ = [
    "NORM_MAX",
    "NS_PER_S",
    "PALETTE",
    "Box2D",
    "DepthHistory",
    "Intrinsics",
    "NormPoint",
    "Point2D",
    "ProjectedPath",
    "Trajectory",
    "annotate",
    "back_project",
    "depth_at",
    "depth_to_meters",
    "norm_to_pixel",
    "ns_from_sec_nanosec",
    "ns_to_sec_nanosec",
    "ns_to_seconds",
    "pixel_to_norm",
    "point_pixels",
    "project_trajectories",
    "seconds_to_ns",
]
