"""Bag tools behind `cosmos-reasoner-bag`, in rooms along a run: bag files (files: reader, topics, integrity,
video, writer, typestore, make, overview, header_stamps), replaying into a node (replay: plan, play,
record, lockstep, node_process, reason_goals, bag_run, expected_clips, losses, evaluate), judging against
tolerances and a baseline (judge: metrics, tolerances, compare), writing out (report: html, comparison,
frames, junit), whole runs (runs: scenario, suite, finish), and the verbs of the command line (verbs: one
module per verb). `records` (one typed result per request), `errors`, `safe_paths` (names from input made
safe as one path component inside the output, any name made printable; writable outputs) and `yaml_files`
(YAML errors by position, never the file's text) are shared by every room; `cli` registers the verbs and
turns errors into exit codes.

Rooms are imported on demand (play, record, lockstep, reason_goals and evaluate need rclpy; files, judge,
report and records do not). The bag tools use the rest of the package through each concern's API.
"""

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["BagError"]
