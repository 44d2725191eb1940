"""The names of the geometric checks an answer passes before it is published or handed off, and the rule of
a parameter that lists some of them (publish_checks, handoff.checks): names from CHECK_NAMES, or [none] alone.
requests/result_checks.py computes the checks under these names."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BOXES_IN_IMAGE",
    "CHECK_NAMES",
    "DEPTH_COVERAGE",
    "MAX_STEP",
    "NO_CHECKS",
    "POINTS_IN_IMAGE",
    "check_names_problem",
]

POINTS_IN_IMAGE = "points_in_image"
BOXES_IN_IMAGE = "boxes_in_image"
DEPTH_COVERAGE = "depth_coverage"
MAX_STEP = "max_step"
CHECK_NAMES = (POINTS_IN_IMAGE, BOXES_IN_IMAGE, DEPTH_COVERAGE, MAX_STEP)
NO_CHECKS = "none"  # [none]: publish (hand off) whatever the checks say


def check_names_problem(names: Sequence[str]) -> str | None:
    """What is wrong with a list of check names (None: nothing); the caller names the parameter:
    f"{name}: {problem}"."""
    unknown = [c for c in names if c not in (*CHECK_NAMES, NO_CHECKS)]
    if unknown or (NO_CHECKS in names and len(names) > 1):
        return f"names from {', '.join(CHECK_NAMES)}, or [{NO_CHECKS}] alone; got {names}"
    return None
