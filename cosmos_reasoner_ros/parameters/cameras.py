"""The parameters of each camera of reasoner_node (`camera.<name>.<key>`, one block per name in
`cameras`), one record each, in the order the node declares them."""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.record import Parameter, by_name, flag, text

__all__ = ["CAMERA_PARAMETERS", "CAMERA_RECORDS", "camera_parameter_name"]

CAMERA_RECORDS: tuple[Parameter, ...] = (
    text("topic", "", "image topic; empty: /<name>/image_raw (or /<name>/image_raw/compressed)"),
    flag("compressed", False, "the topic carries sensor_msgs/CompressedImage"),
    text("frame_id", "", "frame id for results and paths; empty: the images' header.frame_id"),
    text("depth_topic", "", "registered depth image (16UC1 mm or 32FC1 m); empty: no 3D trajectories"),
    text("camera_info_topic", "", "CameraInfo of the colour camera; needed with depth_topic"),
)
CAMERA_PARAMETERS = by_name(CAMERA_RECORDS)


def camera_parameter_name(camera: str, key: str) -> str:
    """The node's parameter of one camera's key: camera.<camera>.<key>."""
    return f"camera.{camera}.{key}"
