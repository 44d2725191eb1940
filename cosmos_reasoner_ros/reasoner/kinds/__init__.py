"""Answer kinds as registered units: one module per kind (choice, boxes, points, segments, text, regions)
holds all that is plain Python about it (its parser and slot in the parsed answer, its label form and
drafting, its grading and metrics, its comparison with a baseline), on the common definition of kinds/base.py.
KINDS is the one table of them; everything else reaches a kind through it. docs/ARCHITECTURE.md says how to
add one."""

from __future__ import annotations

from collections.abc import Iterator

from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.reasoner.kinds import boxes, choice, points, regions, segments, text
from cosmos_reasoner_ros.reasoner.kinds.base import (
    AnswerKind,
    AnswerText,
    CompareCheck,
    GradeContext,
    GradeLimits,
    MetricSpec,
    greedy_pairs,
    greedy_scores,
)
from cosmos_reasoner_ros.reasoner.kinds.boxes import CameraBox, box_iou
from cosmos_reasoner_ros.reasoner.kinds.points import (
    CameraTrajectory,
    discrete_frechet,
    dtw_mean,
    point_distances,
)
from cosmos_reasoner_ros.reasoner.kinds.segments import Segment, segment_iou
from cosmos_reasoner_ros.reasoner.kinds.text import text_similarity

__all__ = [
    "ANSWER_KINDS",
    "KINDS",
    "POINTS",
    "TEXT",
    "AnswerKind",
    "AnswerText",
    "CameraBox",
    "CameraTrajectory",
    "CompareCheck",
    "GradeContext",
    "GradeLimits",
    "MetricSpec",
    "Segment",
    "box_iou",
    "discrete_frechet",
    "dtw_mean",
    "greedy_pairs",
    "greedy_scores",
    "kind_of",
    "point_distances",
    "segment_iou",
    "slot_kinds",
    "text_similarity",
]

# The table: a kind's name (tasks.yaml's answer_kind) -> its unit. Its order is the order of the kinds'
# metrics in scores.json, the report and the leaderboard (a new kind goes last: the columns before it stay).
KINDS: dict[str, AnswerKind] = {
    k.name: k for k in (choice.KIND, boxes.KIND, points.KIND, segments.KIND, text.KIND, regions.KIND)
}
ANSWER_KINDS = tuple(KINDS)
POINTS = points.KIND  # the kind the handoff takes (a path in the image)
TEXT = text.KIND  # the kind of a free answer: what a ParsedAnswer is unless a task says otherwise


def kind_of(name: str, raw: str = "") -> AnswerKind:
    """The kind of that name; ParseError naming the kinds there are."""
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise ParseError(f"unknown answer kind {name!r}; one of {', '.join(ANSWER_KINDS)}", raw=raw) from None


def slot_kinds() -> Iterator[AnswerKind]:
    """One kind per slot of the parsed answer (the first in the table that fills it), the structured ones
    first: how values are told apart when no task says which kind they are."""
    seen: set[str] = set()
    for kind in sorted(KINDS.values(), key=lambda k: not k.structured):
        if kind.slot not in seen:
            seen.add(kind.slot)
            yield kind
