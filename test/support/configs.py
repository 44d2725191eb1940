"""Node configurations for ROS-free tests: the shipped defaults with one camera, changed as a test needs."""

from __future__ import annotations

import dataclasses
from typing import Any

from cosmos_reasoner_ros.node.parameters import PARAMETERS, CameraConfig, NodeConfig


def default_config(**changes: Any) -> NodeConfig:
    """The parameters' defaults (one camera, `camera` on /camera/image_raw), with `changes` applied."""
    values = {name: default for name, (default, _doc) in PARAMETERS.items() if name != "cameras"}
    cfg = NodeConfig(cameras=(CameraConfig("camera", "/camera/image_raw"),), **values)
    return dataclasses.replace(cfg, **changes)
