"""The handoff's gates, each a pure function to one verdict (a result_checks.Check: name, passed, value,
limit, detail), in the order the handoff applies them: the answer, its geometric checks, its path on the
ground, the agreement of several answers about one clip, the age on the robot clock, newer than the path in
flight, the planner's IsPathValid, the confirmation, the Nav2 server on the graph."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence

from cosmos_reasoner_ros.geometry import BasePath, frechet_distance, ns_to_seconds
from cosmos_reasoner_ros.handoff.ground_path import answer_trajectory
from cosmos_reasoner_ros.requests import Check, Outcome

__all__ = [
    "AGE",
    "AGREEMENT",
    "ANSWER",
    "CHECKS",
    "CONFIRMATION",
    "GATE_NAMES",
    "GROUND_PATH",
    "NEWER",
    "PATH_VALID",
    "SERVER",
    "age_gate",
    "agreement_gate",
    "answer_gate",
    "checks_gate",
    "confirmation_gate",
    "ground_path_gate",
    "newer_gate",
    "path_valid_gate",
    "server_gate",
]

# HandoffGate.msg's NAME_* values, in the order they are applied.
ANSWER = "answer"
CHECKS = "checks"
GROUND_PATH = "ground_path"
AGREEMENT = "agreement"
AGE = "age"
NEWER = "newer"
PATH_VALID = "path_valid"
CONFIRMATION = "confirmation"
SERVER = "server"
GATE_NAMES = (ANSWER, CHECKS, GROUND_PATH, AGREEMENT, AGE, NEWER, PATH_VALID, CONFIRMATION, SERVER)


def answer_gate(outcome: Outcome) -> Check:
    """The answer succeeded (not stale, not an error) and holds a trajectory; value: its points."""
    if not outcome.success:
        return Check(ANSWER, False, 0.0, 1.0, f"{outcome.error_kind}: {outcome.error}"[:300])
    trajectory = answer_trajectory(outcome)
    if trajectory is None:
        return Check(ANSWER, False, 0.0, 1.0, "the answer holds no trajectory")
    n = len(trajectory.points)
    return Check(ANSWER, True, float(n), 1.0, f"trajectory {trajectory.label!r} of {n} points")


def checks_gate(outcome: Outcome, required: Collection[str]) -> Check:
    """The geometric checks named in `required` that the node made (ReasonerResult.checks) passed; value: how
    many failed. A required check that did not apply (no depth for the camera) holds nothing back."""
    failed = [c for c in outcome.checks if c.name in required and not c.passed]
    if failed:
        return Check(
            CHECKS, False, float(len(failed)), 0.0, "; ".join(f"{c.name}: {c.detail}" for c in failed)
        )
    made = [c.name for c in outcome.checks if c.name in required]
    return Check(CHECKS, True, 0.0, 0.0, f"passed: {', '.join(made)}" if made else "none of them applied")


def ground_path_gate(path: BasePath | str, max_start_distance_m: float) -> Check:
    """A path on the ground was made (`path`, else why not) and starts within max_start_distance_m of the
    camera's foot; value [m]: that distance."""
    if isinstance(path, str):
        return Check(GROUND_PATH, False, 0.0, max_start_distance_m, path)
    start = path.start_distance_m
    detail = (
        f"{path.source} path of {path.length_m:.2f} m ({len(path.points)} poses; the answer's "
        f"{path.answered_length_m:.2f} m), first point {start:.2f} m from the camera's foot"
    )
    if start > max_start_distance_m:
        return Check(
            GROUND_PATH,
            False,
            start,
            max_start_distance_m,
            f"the path starts {start:.2f} m from the camera's foot, more than max_start_distance_m "
            f"({max_start_distance_m:g} m)",
        )
    return Check(GROUND_PATH, True, start, max_start_distance_m, detail)


def agreement_gate(paths: Sequence[BasePath | None], wanted: int, max_spread_m: float) -> tuple[Check, int]:
    """`wanted` answers about one clip (all of `paths`) each made a path, and the largest discrete Fréchet
    distance between two of them (the spread) is at most max_spread_m; value [m]: the spread. With the index
    of the path to send: the medoid (the one whose farthest other path is nearest), -1 when none."""
    made = [p for p in paths if p is not None]
    if len(made) < wanted:
        return (
            Check(
                AGREEMENT,
                False,
                0.0,
                max_spread_m,
                f"{len(made)} of {wanted} answers about the clip made a path (the others were refused)",
            ),
            -1,
        )
    distance = {
        (i, j): frechet_distance(made[i].points, made[j].points)
        for i, j in itertools.combinations(range(len(made)), 2)
    }

    def farthest(i: int) -> float:
        return max(d for pair, d in distance.items() if i in pair)

    if not distance:  # one answer wanted (agreement off): nothing to compare
        return Check(AGREEMENT, True, 0.0, max_spread_m, "one answer"), 0
    spread = max(distance.values())
    chosen = min(range(len(made)), key=farthest)
    detail = (
        f"{len(paths)} answers' paths within {spread:.3f} m of each other (Fréchet), answer {chosen + 1}'s "
        f"is nearest the others"
    )
    if spread > max_spread_m:
        return (
            Check(
                AGREEMENT,
                False,
                spread,
                max_spread_m,
                f"{len(paths)} answers' paths differ by up to {spread:.3f} m (Fréchet), more than "
                f"agreement_max_spread_m ({max_spread_m:g} m)",
            ),
            -1,
        )
    return Check(AGREEMENT, True, spread, max_spread_m, detail), chosen


def age_gate(observed_ns: int, now_ns: int, max_age_s: float) -> Check:
    """[s] now - the clip's end on the robot clock, within [0, max_age_s]: a clip from the future means the
    clock went back (a replay looping, a reset of sim time), and is not trusted either."""
    age = ns_to_seconds(now_ns - observed_ns)
    if age < 0:
        return Check(AGE, False, age, max_age_s, f"the clip ends {-age:.3f} s after now: the clock went back")
    if age > max_age_s:
        return Check(AGE, False, age, max_age_s, f"{age:.3f} s old, more than max_age_s ({max_age_s:g} s)")
    return Check(AGE, True, age, max_age_s, f"{age:.3f} s old")


def newer_gate(observed_ns: int, latest_ns: int) -> Check:
    """The answer's clip ends after the clip of the newest path sent or proposed (an answer that arrived late,
    after a newer one, never preempts it); value [s]: by how much."""
    ahead = ns_to_seconds(observed_ns - latest_ns)
    if latest_ns and observed_ns == latest_ns:
        return Check(
            NEWER, False, 0.0, 0.0, "its clip ends with the frame of the path already sent or proposed"
        )
    if latest_ns and observed_ns < latest_ns:
        return Check(
            NEWER,
            False,
            ahead,
            0.0,
            f"its clip ends {-ahead:.3f} s before the clip of the path already sent or proposed",
        )
    return Check(NEWER, True, ahead, 0.0, "no path sent before" if not latest_ns else f"{ahead:.3f} s newer")


def path_valid_gate(valid: bool | None, invalid_indices: Sequence[int], error: str = "") -> Check:
    """IsPathValid's answer; `valid` None: no answer (`error` says why). value: the invalid poses named."""
    if valid is None:
        return Check(PATH_VALID, False, 0.0, 0.0, f"no answer from IsPathValid: {error}")
    shown = list(invalid_indices[:8])
    more = f" and {len(invalid_indices) - 8} more" if len(invalid_indices) > 8 else ""
    if not valid:
        return Check(
            PATH_VALID,
            False,
            float(len(invalid_indices)),
            0.0,
            f"the planner server says invalid (poses {shown}{more} in collision or unknown)"
            if invalid_indices
            else "the planner server says invalid",
        )
    return Check(PATH_VALID, True, float(len(invalid_indices)), 0.0, "the planner server says valid")


def confirmation_gate(accepted: bool, detail: str) -> Check:
    return Check(CONFIRMATION, accepted, 1.0 if accepted else 0.0, 1.0, detail)


def server_gate(problem: str, action: str) -> Check:
    """The Nav2 action server is on the graph (`problem` empty), else why no goal can go to it."""
    if problem:
        return Check(SERVER, False, 0.0, 1.0, problem)
    return Check(SERVER, True, 1.0, 1.0, f"{action} is on the graph")
