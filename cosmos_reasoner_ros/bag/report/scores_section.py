"""The report's scores: a table per task (each metric with its interval), what was not scored, and per request
the label beside the answer: in the request's card, and drawn on its frame (both trajectories, both boxes, and
with the handoff rehearsed the path that would have been sent)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from urllib.parse import quote

import numpy as np

from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.bag.report.frames import handoff_trajectory
from cosmos_reasoner_ros.bag.scores import METRICS, MIN_N, Grade, Interval, Scores, handoff_summary
from cosmos_reasoner_ros.geometry import Trajectory
from cosmos_reasoner_ros.reasoner import KINDS, ParsedAnswer

__all__ = ["label_card", "label_frame", "scores_section"]


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "–"
    unit = METRICS[metric].unit if metric in METRICS else ""
    return f"{value:.1f}" if unit == "px" or metric == "completion_tokens" else f"{value:.3g}"


def _cell(metric: str, i: Interval) -> str:
    if i.low is None or i.high is None:
        why = _e(i.note or "no interval")
        return f"{_fmt(metric, i.value)} <small>({why})</small>" if i.value is not None else "–"
    return f"{_fmt(metric, i.value)} <small>[{_fmt(metric, i.low)}, {_fmt(metric, i.high)}]</small>"


def scores_section(scores: Scores, label_files: Sequence[str], has_judge_file: bool = False) -> str:
    """Per task: n and each metric with its confidence interval; then what was not scored."""
    conf = f"{scores.options.confidence:.0%}"
    parts = [
        f"<h2 id='scores'>Scores against the labels</h2><p>{len(scores.grades)} labelled requests "
        f"({', '.join(_e(f) for f in label_files)}); values with their {conf} intervals "
        f"(Wilson for shares, Student's t for means, order statistics for percentiles; none from fewer than "
        f"{MIN_N} values); scores.json holds the same.</p>"
    ]
    for task, ts in scores.tasks.items():
        rows = "".join(
            f"<tr><td>{_e(name)}</td><td>{_cell(name, i)}</td><td>{_e(METRICS[name].description)}</td></tr>"
            for name, i in ts.metrics.items()
            if name in METRICS
        )
        parts.append(
            f"<h3>{_e(task)} <small>(n = {ts.n})</small></h3><table><tr><th>metric</th><th>value "
            f"[interval]</th><th>what</th></tr>{rows}</table>"
        )
    handoff = handoff_summary(scores.grades)
    if handoff is not None:
        parts.append(f"<p class='handoff'>{_e(handoff.line())}.</p>")
    m = scores.matching
    problems = m.problems() if m is not None else []
    if problems:
        items = "".join(f"<li>{_e(p)}</li>" for p in problems)
        parts.append(f"<h3>Not scored</h3><ul class='err'>{items}</ul>")
    if m is not None and m.unlabelled:
        listed = ", ".join(f"{_e(t)} {n}" for t, n in m.unlabelled.items())
        parts.append(f"<p>Requests without a label (not scored): {listed}.</p>")
    if scores.judged:
        unjudged = sum(j.answer.same is None for j in scores.judged)
        link = " (<a href='judge.jsonl'>every prompt and reply</a>)" if has_judge_file else ""
        parts.append(
            f"<p>Text judge {_e(scores.judge_model)}: {len(scores.judged)} answers asked, {unjudged} unjudged"
            f"{link}.</p>"
        )
    return "".join(parts)


def _answer_text(answer: ParsedAnswer) -> str:
    """A label's answer as the card shows it: its kind's values where the kind shows them (a choice's letter),
    else the answer as written."""
    kind = KINDS.get(answer.answer_kind)
    if kind is None or kind.show is None:
        return answer.answer
    values = getattr(answer, kind.slot)
    return kind.show(values) if kind.holds(values) else answer.answer


def label_card(g: Grade, image: str = "") -> str:
    """HTML for a request's card: its label (every acceptable answer, the best first), its values."""
    answers = list(g.label.answers)
    order = [g.best, *(i for i in range(len(answers)) if i != g.best)]
    listed = "".join(f"<li><pre>{_e(_answer_text(answers[i]))}</pre></li>" for i in order)
    values = " · ".join(f"{_e(k)} {v:.3g}" for k, v in sorted(g.values.items()) if np.isfinite(v))
    notes = "".join(f"<br><i>{_e(n)}</i>" for n in g.notes)
    picture = (
        f"<p><a href='{_e(quote(image))}'><img src='{_e(quote(image))}' alt='label and answer' "
        "style='max-width:480px'></a></p>"
        if image
        else ""
    )
    return (
        f"<div class='label'><b>label</b> {_e(g.label.where)}"
        f"{' · ' + _e(g.label.note) if g.label.note else ''}<ol>{listed}</ol><p>{values}{notes}</p>"
        f"{picture}</div>"
    )


def _prefixed(t: Trajectory, prefix: str) -> Trajectory:
    return Trajectory(f"{prefix}: {t.label}" if t.label else prefix, t.points)


def label_frame(record: ResultRecord, label: ParsedAnswer, frame: np.ndarray) -> np.ndarray:
    """The frame with the label's geometry and the answer's, each named ("label: ...", "answer: ..."), and the
    handoff's path beside them ("handoff <decision>")."""
    from dataclasses import replace

    from cosmos_reasoner_ros.geometry import annotate

    trajectories = [_prefixed(t, "label") for t in label.trajectories]
    trajectories += [_prefixed(t.trajectory, "answer") for t in record.trajectories]
    handoff = handoff_trajectory(record)
    if handoff is not None:
        trajectories.append(handoff)
    boxes = [replace(b, label=f"label: {b.label}") for b in label.boxes]
    boxes += [replace(b.box, label=f"answer: {b.label}") for b in record.boxes]
    return annotate(frame, trajectories, boxes)
