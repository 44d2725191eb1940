"""Replaying bags into a node: the plan of a run (plan: tasks, times, bags, EvalOptions), publishing with the
recorded timing (play), recording outputs (record), lock-step pacing (lockstep), the node's child process
(node_process), Reason goals (reason_goals), one bag into its own node step by step (bag_run), the frames a
clip should hold (expected_clips), what the clips and the bag lost (losses), and one evaluation run over bags
(evaluate). play, record, lockstep,
reason_goals, bag_run and evaluate need rclpy and are imported on demand."""

__all__ = [
    "bag_run",
    "evaluate",
    "expected_clips",
    "lockstep",
    "losses",
    "node_process",
    "plan",
    "play",
    "reason_goals",
    "record",
]
