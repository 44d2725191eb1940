"""Bag tools behind `cosmos-reasoner-bag`: camera bags from videos (make), replay with original timing (play),
recording a node's outputs (record), evaluation runs through the Reason action (evaluate, with plan,
node_process, reason_goals), in lock-step when asked (lockstep), judged against tolerances and a baseline
(tolerances, metrics, compare), written out (records, frames, finish, report, compare_report, junit), and
scenario files with parameter sweeps (scenario, suite). `io` opens bags with clear errors; `cli` is the
command line only.

Submodules are imported on demand (play, record, lockstep, reason_goals and evaluate's replay need rclpy;
make, io, plan, records, metrics, compare, tolerances, junit and report do not).
"""

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["BagError"]
