"""The ROS edge: `reasoner_node` (reasoner_node: the wiring and its lifecycle, lifecycle_services: a managed
node's lifecycle services, request_gate: whether it takes requests now; main: the process, signals and
ordered shutdown; service_replies: every service request answered), its parameters (parameters) and the core
built from them (core), camera ingest (ingest), from triggers to admitted requests (intake), the published
outputs (outputs, ros_conversion), the Reason action (reason_action), diagnostics and the server's health
(diagnostics, health), and glibc malloc settings (malloc_tuning). The only part of the package, with the bag
tools, that imports rclpy and ROS messages. `python -m cosmos_reasoner_ros.node` runs the node."""

from cosmos_reasoner_ros.node.main import main
from cosmos_reasoner_ros.node.parameters import (
    PARAMETERS,
    CameraConfig,
    ConfigError,
    NodeConfig,
    read_config,
    validate,
)
from cosmos_reasoner_ros.node.reasoner_node import ReasonerNode

__all__ = [
    "PARAMETERS",
    "CameraConfig",
    "ConfigError",
    "NodeConfig",
    "ReasonerNode",
    "main",
    "read_config",
    "validate",
]
