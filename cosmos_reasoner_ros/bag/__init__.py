"""Bag tools behind `cosmos-reasoner-bag`: camera bags from videos (make), replay with original timing (play),
recording a node's outputs (record), evaluation runs through the Reason action (evaluate) and their reports
(report). `io` opens bags with clear errors; `cli` is the command line only.

Submodules are imported on demand (play, record and evaluate need rclpy; make, io and report do not).
"""

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["BagError"]
