"""Replaying bags into a node: the plan of a run (plan: tasks, times, bags, EvalOptions), publishing with the
recorded timing (play), recording outputs (record), lock-step pacing (lockstep), the node's child process
(node_process), Reason goals (reason_goals), and one evaluation run over bags (evaluate). play, record,
lockstep, reason_goals and evaluate need rclpy and are imported on demand."""

__all__ = ["evaluate", "lockstep", "node_process", "plan", "play", "reason_goals", "record"]
