"""One request graded against its label with the judge's metrics (judge/metrics.py): choices by equality,
boxes by IoU, points by displacement and Fréchet distance in the camera image's pixels (and in metres where
depth gave 3D points), segments by temporal IoU, text by normalised words. With several acceptable answers the
best one counts. A request without an answer scores 0 where a score is bounded and has no distance. With the
Nav2 handoff rehearsed, the path a trajectory answer would have sent is graded too (handoff_grading)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from cosmos_reasoner_ros.bag.judge.metrics import (
    box_iou,
    discrete_frechet,
    greedy_scores,
    point_distances,
    segment_iou,
    text_similarity,
)
from cosmos_reasoner_ros.bag.labels import Label
from cosmos_reasoner_ros.bag.records import CameraTrajectory, ResultRecord
from cosmos_reasoner_ros.bag.scores.handoff_grading import GroundOf, handoff_values
from cosmos_reasoner_ros.geometry import Trajectory, norm_to_pixel
from cosmos_reasoner_ros.reasoner import ParsedAnswer

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


def _pair_trajectories(
    answer: Sequence[CameraTrajectory], label: Sequence[Trajectory]
) -> list[tuple[CameraTrajectory, Trajectory]]:
    """By label when both name their trajectories uniquely with the same labels, else in order."""
    la, lb = [t.label for t in answer], [t.label for t in label]
    if len(set(la)) == len(la) and len(set(lb)) == len(lb) and set(la) == set(lb):
        by_label = {t.label: t for t in label}
        return [(t, by_label[t.label]) for t in answer]
    return list(zip(answer, label, strict=False))


def _label_pixels(t: Trajectory, width: int, height: int) -> list[tuple[float, float]]:
    if width <= 0 or height <= 0:  # the image size is unknown: 0-1000 units
        return [(p.x_norm, p.y_norm) for p in t.points]
    return [(norm_to_pixel(p.x_norm, width), norm_to_pixel(p.y_norm, height)) for p in t.points]


def _answer_pixels(t: CameraTrajectory) -> list[tuple[float, float]]:
    if t.width <= 0 or t.height <= 0:
        return [(p.x_norm, p.y_norm) for p in t.trajectory.points]
    return t.pixels()


def _distances(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    d = point_distances(a, b)
    fde = float(np.linalg.norm(np.asarray(a[-1], dtype=float) - np.asarray(b[-1], dtype=float)))
    return float(d.mean()), fde, discrete_frechet(a, b)


def _with_depth(
    record: ResultRecord,
    answer: CameraTrajectory,
    answer_px: list[tuple[float, float]],
    label_px: list[tuple[float, float]],
    project: Projector,
) -> tuple[list[tuple[float, ...]], list[tuple[float, ...]]] | None:
    size = (answer.width, answer.height)
    a3, b3 = project(record, answer_px, size), project(record, label_px, size)
    a = [p for p in a3 if p is not None]
    b = [p for p in b3 if p is not None]
    # Only with depth under every point: a path with points left out would be another path.
    return (a, b) if a and b and len(a) == len(a3) and len(b) == len(b3) else None


def _points(
    record: ResultRecord, alternative: ParsedAnswer, project: Projector | None
) -> tuple[dict[str, float], list[str]]:
    pairs = _pair_trajectories(record.trajectories, alternative.trajectories)
    notes = []
    if len(record.trajectories) != len(alternative.trajectories):
        notes.append(
            f"{len(record.trajectories)} trajectories answered, {len(alternative.trajectories)} labelled: "
            f"{len(pairs)} compared"
        )
    if not pairs:
        return {"ade_px": NAN, "fde_px": NAN, "frechet_px": NAN}, notes
    px: list[tuple[float, float, float]] = []
    metres: list[tuple[float, float, float]] = []
    for answer, label in pairs:
        answer_px = _answer_pixels(answer)
        label_px = _label_pixels(label, answer.width, answer.height)
        px.append(_distances(answer_px, label_px))
        if project is not None and answer.width > 0 and answer.height > 0:
            both = _with_depth(record, answer, answer_px, label_px, project)
            if both is not None:
                metres.append(_distances(*both))
    values = dict(zip(("ade_px", "fde_px", "frechet_px"), np.mean(px, axis=0).tolist(), strict=True))
    if metres and len(metres) == len(px):
        values.update(zip(("ade_m", "fde_m", "frechet_m"), np.mean(metres, axis=0).tolist(), strict=True))
    elif project is not None:
        notes.append("no depth under every point: no distances in metres")
    if any(t.width <= 0 for t, _ in pairs):
        notes.append("the image size is unknown: distances in 0-1000 units")
    return values, notes


def _boxes(record: ResultRecord, alternative: ParsedAnswer, label: Label) -> dict[str, float]:
    ours = [(b.box.x1_norm, b.box.y1_norm, b.box.x2_norm, b.box.y2_norm) for b in record.boxes]
    theirs = [(b.x1_norm, b.y1_norm, b.x2_norm, b.y2_norm) for b in alternative.boxes]
    # IoU does not change when both axes are scaled: the 0-1000 values give the pixels' IoU.
    scores = greedy_scores(len(ours), len(theirs), lambda i, j: box_iou(ours[i], theirs[j]))
    iou = float(np.mean(scores)) if scores else 0.0
    return {"iou": iou, "iou50": float(iou >= label.tolerances.iou_min - 1e-12)}


def _segments(record: ResultRecord, alternative: ParsedAnswer, label: Label) -> dict[str, float]:
    ours, theirs = record.segments, alternative.segments
    scores = greedy_scores(len(ours), len(theirs), lambda i, j: segment_iou(ours[i], theirs[j]))
    tiou = float(np.mean(scores)) if scores else 0.0
    return {"tiou": tiou, "tiou50": float(tiou >= label.tolerances.tiou_min - 1e-12)}


def _text(record: ResultRecord, alternative: ParsedAnswer, label: Label) -> dict[str, float]:
    similarity = text_similarity(record.answer, alternative.answer)
    return {"similarity": similarity, "match": float(similarity >= label.tolerances.match_min - 1e-12)}


def _choice(record: ResultRecord, alternative: ParsedAnswer) -> dict[str, float]:
    return {
        "accuracy": float((record.choice or "").strip().upper() == (alternative.choice or "").strip().upper())
    }


# The value that decides which acceptable answer is the best, and whether higher is better.
_RANK = {
    "choice": ("accuracy", 1),
    "boxes": ("iou", 1),
    "points": ("ade_px", -1),
    "segments": ("tiou", 1),
    "text": ("similarity", 1),
}
_FAILED = {
    "choice": {"accuracy": 0.0},
    "boxes": {"iou": 0.0, "iou50": 0.0},
    "points": {"ade_px": NAN, "fde_px": NAN, "frechet_px": NAN},
    "segments": {"tiou": 0.0, "tiou50": 0.0},
    "text": {"similarity": 0.0, "match": 0.0},
}


def grade(
    position: int,
    record: ResultRecord,
    label: Label,
    project: Projector | None = None,
    ground: GroundOf | None = None,
) -> Grade:
    """The request's values against the label's best-fitting acceptable answer; with the handoff rehearsed, a
    trajectory answer's path that would have been sent against that same acceptable answer."""
    graded = _grade_answer(position, record, label, project)
    if label.kind != "points" or record.handoff is None:
        return graded
    values, notes, pixels_only = handoff_values(record, label.answers[graded.best], ground)
    return replace(
        graded, values={**graded.values, **values}, notes=(*graded.notes, *notes), pixels_only=pixels_only
    )


def _grade_answer(position: int, record: ResultRecord, label: Label, project: Projector | None) -> Grade:
    kind = label.kind
    common = {
        "latency_s": record.latency_s if record.success else NAN,
        "completion_tokens": float(record.completion_tokens) if record.success else NAN,
    }
    if not record.answered_as(kind):
        why = record.outcome if not record.success else f"no {kind} in the answer"
        values = {**_FAILED[kind], "answered": 0.0, **common}
        return Grade(position, record.task, kind, label, values, notes=(f"not answered: {why}",))
    key, sign = _RANK[kind]
    best: tuple[float, int, dict[str, float], list[str]] | None = None
    for i, alternative in enumerate(label.answers):
        notes: list[str] = []
        if kind == "points":
            values, notes = _points(record, alternative, project)
        elif kind == "boxes":
            values = _boxes(record, alternative, label)
        elif kind == "segments":
            values = _segments(record, alternative, label)
        elif kind == "choice":
            values = _choice(record, alternative)
        else:
            values = _text(record, alternative, label)
        rank = values.get(key, NAN)
        score = -math.inf if math.isnan(rank) else sign * rank
        if best is None or score > best[0]:
            best = (score, i, values, notes)
    assert best is not None  # a label has at least one answer
    _, index, values, notes = best
    return Grade(
        position, record.task, kind, label, {**values, "answered": 1.0, **common}, index, tuple(notes)
    )
