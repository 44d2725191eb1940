"""A run's labelled requests scored per task: each request graded against its label (grading), optionally the
free-text answers judged by a second model (text_judge), then each task metric with its confidence interval
(intervals)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from cosmos_reasoner_ros.bag.labels import LabelSet, Matching, match_labels
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.bag.scores.grading import Grade, Projector, grade
from cosmos_reasoner_ros.bag.scores.handoff_grading import GroundOf
from cosmos_reasoner_ros.bag.scores.intervals import Interval, intervals
from cosmos_reasoner_ros.bag.scores.metric_specs import HANDOFF, KIND_METRICS, METRES, METRICS
from cosmos_reasoner_ros.bag.scores.text_judge import JudgeAnswer, TextJudge
from cosmos_reasoner_ros.reasoner import KINDS

__all__ = [
    "HandoffSummary",
    "Judged",
    "ScoreOptions",
    "Scores",
    "TaskScores",
    "handoff_summary",
    "score_grades",
    "score_run",
]


@dataclass(frozen=True)
class ScoreOptions:
    confidence: float = 0.95


@dataclass(frozen=True)
class TaskScores:
    n: int  # labelled requests of the task
    metrics: Mapping[str, Interval]


@dataclass(frozen=True)
class Judged:
    """One question to the text judge, for judge.jsonl."""

    position: int
    task: str
    answer: JudgeAnswer


@dataclass(frozen=True)
class Scores:
    tasks: Mapping[str, TaskScores]
    grades: tuple[Grade, ...] = ()
    matching: Matching | None = None
    options: ScoreOptions = ScoreOptions()
    judged: tuple[Judged, ...] = field(default_factory=tuple)
    judge_model: str = ""


@dataclass(frozen=True)
class HandoffSummary:
    """How a run's rehearsed handoff paths were scored: scores.json's `handoff`, a line of the report."""

    answers: int  # labelled trajectory answers the handoff decided about
    paths: int  # of them, with a path scored against the label (in the image)
    on_ground: int  # of those, also on the ground [m]
    pixels_only: tuple[str, ...]  # why paths were scored in the image only, each reason once

    def line(self) -> str:
        text = (
            f"handoff: {self.answers} labelled answers, {self.paths} paths scored against their labels, "
            f"{self.on_ground} on the ground"
        )
        if self.pixels_only:
            text += f"; in pixels only: {'; '.join(self.pixels_only[:3])}"
            text += f" (and {len(self.pixels_only) - 3} more reasons)" if len(self.pixels_only) > 3 else ""
        return text


def handoff_summary(grades: Sequence[Grade]) -> HandoffSummary | None:
    """None when no labelled answer has a handoff decision (the handoff was off, or no label is a path)."""
    mine = [g for g in grades if "handoff_passed" in g.values]
    if not mine:
        return None
    return HandoffSummary(
        len(mine),
        sum(math.isfinite(g.values.get("handoff_frechet_px", math.nan)) for g in mine),
        sum(math.isfinite(g.values.get("handoff_frechet_m", math.nan)) for g in mine),
        tuple(dict.fromkeys(g.pixels_only for g in mine if g.pixels_only)),
    )


def _metric_names(grades: Sequence[Grade]) -> list[str]:
    kinds = {g.kind for g in grades}
    names = [m for kind in sorted(kinds) for m in KIND_METRICS[kind]]
    present = {k for g in grades for k in g.values}
    names += [m for m in (*METRES, *HANDOFF, "judge_match") if METRICS[m].column in present]
    ordered = [m for m in METRICS if m in names]  # the table's order
    return ordered


def score_grades(grades: Sequence[Grade], options: ScoreOptions = ScoreOptions()) -> dict[str, TaskScores]:
    """Each task's metrics over its graded requests, with their confidence intervals."""
    by_task: dict[str, list[Grade]] = {}
    for g in grades:
        by_task.setdefault(g.task, []).append(g)
    out: dict[str, TaskScores] = {}
    for task in sorted(by_task):
        mine = by_task[task]
        columns: dict[str, tuple[np.ndarray, str]] = {}
        for name in _metric_names(mine):
            spec = METRICS[name]
            values = np.fromiter(
                (g.values.get(spec.column, math.nan) for g in mine), dtype=float, count=len(mine)
            )
            columns[name] = (values, spec.statistic)
        out[task] = TaskScores(len(mine), intervals(columns, options.confidence))
    return out


def _free_text(g: Grade) -> bool:
    """The grade's kind answers in words: the text judge compares its meaning with the label's."""
    return KINDS[g.kind].free_text


def _judge_all(grades: list[Grade], records: Sequence[ResultRecord], judge: TextJudge) -> list[Judged]:
    asked = [
        g
        for g in grades
        if _free_text(g) and g.values.get("answered") == 1.0 and records[g.position].answer.strip()
    ]

    def one(g: Grade) -> Judged:
        r = records[g.position]
        refs = [a.answer for a in g.label.answers]
        return Judged(g.position, g.task, judge.ask(r.task, r.instruction, r.answer, refs))

    with ThreadPoolExecutor(max_workers=judge.settings.workers, thread_name_prefix="text-judge") as pool:
        judged = list(pool.map(one, asked))
    verdicts = {j.position: j.answer.same for j in judged}
    for i, g in enumerate(grades):
        if not _free_text(g):
            continue
        if g.values.get("answered") != 1.0:
            same: float = 0.0  # no answer: not the same meaning
        else:
            verdict = verdicts.get(g.position)
            same = math.nan if verdict is None else float(verdict)
        grades[i] = replace(g, values={**g.values, "judge_match": same})
    return judged


def score_run(
    records: Sequence[ResultRecord],
    labels: Mapping[str, LabelSet],
    options: ScoreOptions = ScoreOptions(),
    judge: TextJudge | None = None,
    project: Projector | None = None,
    ground: GroundOf | None = None,
) -> Scores:
    """Scores of a run's records against the labels bound to its bags (labels.bind_labels). project: 3D
    points from the bag's depth; ground: where the rehearsed handoff's paths lie (None: in pixels only)."""
    matching = match_labels(records, labels)
    grades = [grade(m.position, m.record, m.label, project, ground) for m in matching.labelled]
    judged: list[Judged] = []
    model = ""
    if judge is not None and any(_free_text(g) for g in grades):
        judged = _judge_all(grades, records, judge)
        model = next((j.answer.model for j in judged if j.answer.model), judge.settings.model)
    return Scores(score_grades(grades, options), tuple(grades), matching, options, tuple(judged), model)
