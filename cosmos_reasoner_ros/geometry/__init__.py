"""Geometry of an answer, the lowest layer: the 0-1000 <-> pixel convention and int-nanosecond stamps
(coordinates), the shapes an answer holds (shapes: points, trajectories, boxes), their back-projection with
depth into 3D (projection), or onto a ground plane without depth (ground_plane), 3D paths as a base follows
them (paths: length, spacing, cropping, distance between paths, headings), and their drawing on a frame
(annotation). Imports nothing else of the package."""

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
from cosmos_reasoner_ros.geometry.ground_plane import (
    GroundPlane,
    GroundProjection,
    Vec3,
    pixel_of,
    project_to_ground,
)
from cosmos_reasoner_ros.geometry.paths import (
    BasePath,
    Quaternion,
    crop,
    frechet_distance,
    headings,
    path_length,
    resample,
    rotate,
    transform_path,
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
    "BasePath",
    "Box2D",
    "DepthHistory",
    "GroundPlane",
    "GroundProjection",
    "Intrinsics",
    "NormPoint",
    "Point2D",
    "ProjectedPath",
    "Quaternion",
    "Trajectory",
    "Vec3",
    "annotate",
    "back_project",
    "crop",
    "depth_at",
    "depth_to_meters",
    "frechet_distance",
    "headings",
    "norm_to_pixel",
    "ns_from_sec_nanosec",
    "ns_to_sec_nanosec",
    "ns_to_seconds",
    "path_length",
    "pixel_of",
    "pixel_to_norm",
    "point_pixels",
    "project_to_ground",
    "project_trajectories",
    "resample",
    "rotate",
    "seconds_to_ns",
    "transform_path",
]
