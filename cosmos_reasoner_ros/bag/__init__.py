"""Bag tools behind `cosmos-reasoner-bag`, in rooms along a run: bag files (files: reader, topics, integrity,
video, writer, typestore, make), replaying into a node (replay: plan, play, record, lockstep, node_process,
reason_goals, evaluate), judging against tolerances and a baseline (judge: metrics, tolerances, compare),
writing out (report: html, comparison, frames, junit), and whole runs (runs: scenario, suite, finish).
`records` (one typed result per request), `errors` and `safe_paths` (names from input made safe as one path
component inside the output; writable outputs) are shared by every room; `cli` is the command line only.

Rooms are imported on demand (play, record, lockstep, reason_goals and evaluate need rclpy; files, judge,
report and records do not). The bag tools use the rest of the package through each concern's API.
"""

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["BagError"]
