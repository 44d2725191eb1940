"""One request graded against its label by the label's answer kind (reasoner.KINDS: each kind's grade, e.g.
choices by equality, boxes by IoU, points by displacement and Fréchet distance in the camera image's pixels
and in metres where depth gave 3D points, segments by temporal IoU, text by normalised words). With several
acceptable answers the best one by the kind's rank counts. A request without an answer scores the kind's
`unanswered` values. With the Nav2 handoff rehearsed, the path that a path answer would have sent is graded
too (handoff_grading)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from cosmos_reasoner_ros.bag.labels import Label
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.bag.scores.handoff_grading import GroundOf, handoff_values
from cosmos_reasoner_ros.reasoner import AnswerKind, GradeContext, kind_of

__all__ = ["Grade", "Projector", "grade"]

NAN = math.nan

# (record, pixels in the record's camera image of (width, height)) -> 3D points [m] per pixel point, or None
# where depth gave none; the grading drops pairs of points without depth.
Projector = Callable[
    [ResultRecord, Sequence[tuple[float, float]], tuple[int, int]], Sequence[tuple[float, ...] | None]
]


@dataclass(frozen=True)
class Grade:
    """The per-request values that a task's metrics summarise (MetricSpec.column); NaN: not defined."""

    position: int  # the record's index in the run
    task: str
    kind: str
    label: Label
    values: dict[str, float]
    best: int = 0  # which acceptable answer scored best
    notes: tuple[str, ...] = field(default_factory=tuple)
    pixels_only: str = ""  # why the handoff's path was scored in the image only ("": also on the ground)


def grade(
    position: int,
    record: ResultRecord,
    label: Label,
    project: Projector | None = None,
    ground: GroundOf | None = None,
) -> Grade:
    """The request's values against the label's best-fitting acceptable answer; with the handoff rehearsed, a
    path answer's path that would have been sent against that same acceptable answer."""
    graded = _grade_answer(position, record, label, project)
    if not kind_of(label.kind).path or record.handoff is None:
        return graded
    values, notes, pixels_only = handoff_values(record, label.answers[graded.best], ground)
    return replace(
        graded, values={**graded.values, **values}, notes=(*graded.notes, *notes), pixels_only=pixels_only
    )


def _best(
    kind: AnswerKind, record: ResultRecord, label: Label, context: GradeContext
) -> tuple[int, dict[str, float], list[str]]:
    """(index, values, notes) of the acceptable answer the kind's rank value prefers."""
    key, sign = kind.rank
    ours = getattr(record, kind.slot)
    best: tuple[float, int, dict[str, float], list[str]] | None = None
    for i, alternative in enumerate(label.answers):
        values, notes = kind.grade(ours, getattr(alternative, kind.slot), context)
        rank = values.get(key, NAN)
        score = -math.inf if math.isnan(rank) else sign * rank
        if best is None or score > best[0]:
            best = (score, i, values, notes)
    assert best is not None  # a label has at least one answer
    return best[1], best[2], best[3]


def _grade_answer(position: int, record: ResultRecord, label: Label, project: Projector | None) -> Grade:
    kind = kind_of(label.kind)
    common = {
        "latency_s": record.latency_s if record.success else NAN,
        "completion_tokens": float(record.completion_tokens) if record.success else NAN,
    }
    if not record.answered_as(kind.name):
        why = record.outcome if not record.success else f"no {kind.name} in the answer"
        values = {**kind.unanswered, "answered": 0.0, **common}
        return Grade(position, record.task, kind.name, label, values, notes=(f"not answered: {why}",))
    context = GradeContext(label.tolerances, partial(project, record) if project is not None else None)
    index, values, notes = _best(kind, record, label, context)
    return Grade(
        position, record.task, kind.name, label, {**values, "answered": 1.0, **common}, index, tuple(notes)
    )
