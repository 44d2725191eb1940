"""Judging a run: agreement measures between two answers (metrics), the tolerances of a run (tolerances), and
a run against a baseline and its tolerances (compare: verdicts per request and per run). No rclpy."""

__all__ = ["compare", "metrics", "tolerances"]
