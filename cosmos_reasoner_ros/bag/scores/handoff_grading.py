"""A rehearsed Nav2 handoff graded against a label: the path that would have been sent (the request's
HandoffRecord) against the labelled trajectory, by handoff/scoring (in the image always, on the ground where
the camera's intrinsics and the run's ground plane are known); and whether the gates let it through."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.geometry import GroundPlane, Intrinsics, Trajectory
from cosmos_reasoner_ros.handoff import PathLimits, score_path_against_label
from cosmos_reasoner_ros.reasoner import ParsedAnswer
from cosmos_reasoner_ros.requests import DecisionKind

__all__ = ["GroundOf", "HandoffGround", "handoff_values"]

_THROUGH = (DecisionKind.SENT, DecisionKind.WOULD_SEND)
# First decisions that are not yet a verdict: the gates still wait for more answers, IsPathValid, a person.
_PENDING = (DecisionKind.WAITING, DecisionKind.VALIDATING, DecisionKind.AWAITING_CONFIRMATION)


@dataclass(frozen=True)
class HandoffGround:
    """What puts a label on the ground as the handoff put the answer: the camera's intrinsics (its CameraInfo)
    and the run's ground plane and path limits (handoff.*)."""

    intrinsics: Intrinsics
    plane: GroundPlane
    limits: PathLimits


# record -> the ground its handoff path lies on, or why it is not known (then the path is scored in pixels)
GroundOf = Callable[[ResultRecord], HandoffGround | str]


def _labelled(answered: Trajectory, label: ParsedAnswer) -> Trajectory | None:
    """The label's trajectory for the answer's path: the one of the same name, else its first."""
    named = [t for t in label.trajectories if t.label == answered.label and t.points]
    return named[0] if len(named) == 1 else next((t for t in label.trajectories if t.points), None)


def handoff_values(
    record: ResultRecord, label: ParsedAnswer, ground: GroundOf | None = None
) -> tuple[dict[str, float], list[str], str]:
    """The request's handoff values (metric_specs.HANDOFF's columns; none without a handoff record), notes,
    and why its path was scored in pixels only ("" when it was scored on the ground too, or has no path)."""
    handoff = record.handoff
    if handoff is None:
        return {}, [], ""
    notes: list[str] = []
    passed = 1.0 if handoff.decision in _THROUGH else 0.0
    if handoff.decision in _PENDING:
        passed = math.nan
        notes.append(f"handoff: first decision {handoff.decision}, no verdict yet: not in handoff_passed")
    values = {"handoff_passed": passed, "handoff_frechet_px": math.nan}  # frechet_m: only where measured
    answered = next((t for t in record.trajectories if t.trajectory.points), None)
    if not handoff.path_px or answered is None:
        return values, notes, ""
    labelled = _labelled(answered.trajectory, label)
    if labelled is None:
        return values, [*notes, "handoff: the label has no trajectory"], ""
    if answered.width <= 0 or answered.height <= 0:
        return values, [*notes, "handoff: the answer's image size is unknown: path not scored"], ""
    found = (
        ground(record)
        if ground is not None
        else "the camera's intrinsics and the run's ground plane are not known"
    )
    size = (answered.width, answered.height)
    if isinstance(found, str):
        score = score_path_against_label(handoff.path, handoff.path_px, labelled, size)
        why = found
    else:
        score = score_path_against_label(
            handoff.path, handoff.path_px, labelled, size, found.intrinsics, found.plane, found.limits
        )
        why = score.label_problem or ("" if score.frechet_m is not None else "the handoff path is empty")
    values["handoff_frechet_px"] = score.frechet_px if math.isfinite(score.frechet_px) else math.nan
    if score.frechet_m is not None and math.isfinite(score.frechet_m):
        values["handoff_frechet_m"] = score.frechet_m
    if why:
        notes.append(f"handoff path in pixels only: {why}")
    return values, notes, why
