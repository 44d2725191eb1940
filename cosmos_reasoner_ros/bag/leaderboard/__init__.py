"""Runs side by side by their scores, no rclpy: the runs' scores (collect: collect_runs), the table with the
best per column and the differences that are not significant (table: Leaderboard), and its files (render:
leaderboard.json, .html, .md)."""

from cosmos_reasoner_ros.bag.leaderboard.collect import collect_runs
from cosmos_reasoner_ros.bag.leaderboard.render import (
    LeaderboardFiles,
    leaderboard_json,
    leaderboard_markdown,
    write_leaderboard,
)
from cosmos_reasoner_ros.bag.leaderboard.table import Column, Leaderboard, RunScores

__all__ = [
    "Column",
    "Leaderboard",
    "LeaderboardFiles",
    "RunScores",
    "collect_runs",
    "leaderboard_json",
    "leaderboard_markdown",
    "write_leaderboard",
]
