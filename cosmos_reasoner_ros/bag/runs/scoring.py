"""Scoring a finished run against labels (`evaluate --labels`, a scenario's `labels:`): after the replay, over
the run's records (the rehearsed handoff's paths too), so the replay itself pays nothing. Writes scores.json,
labelled.jsonl, judge.jsonl and the label-beside-answer frames; gives the report its section and card parts
and the thresholds as checks."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cosmos_reasoner_ros.bag.judge.compare import Check
from cosmos_reasoner_ros.bag.labels import LabelSet, bind_labels
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.bag.report.depth_frames import DepthIndex
from cosmos_reasoner_ros.bag.report.frames import FrameIndex, frame_source, record_frame, save_image
from cosmos_reasoner_ros.bag.report.scores_section import label_card, label_frame, scores_section
from cosmos_reasoner_ros.bag.runs.capped import capped
from cosmos_reasoner_ros.bag.safe_paths import safe_name
from cosmos_reasoner_ros.bag.scores import (
    GroundOf,
    JudgeSettings,
    MinScore,
    Projector,
    ScoreOptions,
    Scores,
    TextJudge,
    handoff_summary,
    score_checks,
    score_run,
    write_scores,
)

__all__ = ["RunScoring", "ScoredRun", "score_lines"]


@dataclass(frozen=True)
class ScoredRun:
    scores: Scores
    checks: tuple[Check, ...]
    section: str  # the report's scores section (HTML)
    card_extras: dict[int, str]  # request number (1-based) -> HTML for its card
    path: Path  # scores.json
    seconds: float  # what scoring took (wall)


@dataclass(frozen=True)
class RunScoring:
    """What a run is scored against: labels files, thresholds, the intervals, an optional text judge."""

    labels: tuple[LabelSet, ...]
    min_scores: tuple[MinScore, ...] = ()
    options: ScoreOptions = ScoreOptions()
    judge: JudgeSettings | None = None
    frames: bool = True  # draw each labelled geometric answer beside its label on its frame
    metres: bool = True  # trajectories also in metres where the bag has depth and CameraInfo for the camera
    sources: tuple[str, ...] = field(default=())  # the labels files as given (scores.json names them)

    def check_bags(self, bags: Sequence[str]) -> None:
        """Before anything runs: every labels file is for a bag of the run (BagError otherwise)."""
        bind_labels(self.labels, bags)

    def apply(
        self,
        records: Sequence[ResultRecord],
        out: Path,
        frames: Mapping[str, FrameIndex] | None = None,
        image_format: str = "jpg",
        project: Projector | None = None,
        ground: GroundOf | None = None,
    ) -> ScoredRun:
        """ground: where the rehearsed handoff's paths lie (handoff_ground); None: they are scored in
        pixels only."""
        started = time.monotonic()
        bags = sorted({r.bag for r in records}) or [""]
        judge = TextJudge(self.judge) if self.judge is not None else None
        if project is None and self.metres and frames:
            project = _depth_projector(frames)
        scores = score_run(records, bind_labels(self.labels, bags), self.options, judge, project, ground)
        files = list(self.sources) or [s.source for s in self.labels]
        path = write_scores(scores, out, list(records), files)
        images = self._label_frames(scores, records, out, frames or {}, image_format) if self.frames else {}
        extras = {g.position + 1: label_card(g, images.get(g.position, "")) for g in scores.grades}
        checks = tuple(score_checks(scores.tasks, self.min_scores))
        section = scores_section(scores, files, bool(scores.judged))
        return ScoredRun(scores, checks, section, extras, path, time.monotonic() - started)

    @staticmethod
    def _label_frames(
        scores: Scores,
        records: Sequence[ResultRecord],
        out: Path,
        frames: Mapping[str, FrameIndex],
        image_format: str,
    ) -> dict[int, str]:
        """images/label_*: each geometric answer beside its label on its frame, by position. Requests in
        the order of their frames: the several questions about one clip decode its frame once."""
        drawn: dict[int, str] = {}
        wanted = [
            g for g in scores.grades if g.label.answers[g.best].trajectories or g.label.answers[g.best].boxes
        ]
        wanted.sort(key=lambda g: (records[g.position].bag, _stamp(frames, records[g.position])))
        last: tuple[tuple[str, int], np.ndarray | None] | None = None
        for g in wanted:
            record = records[g.position]
            key = (record.bag, _stamp(frames, record))
            if last is None or last[0] != key:
                last = (key, record_frame(frames, record))
            if last[1] is None:
                continue
            image = f"images/label_{g.position + 1:04d}_{safe_name(record.task or 'request')}.{image_format}"
            save_image(label_frame(record, g.label.answers[g.best], last[1]), out / image)
            drawn[g.position] = image
        return drawn


def _stamp(frames: Mapping[str, FrameIndex], record: ResultRecord) -> int:
    source = frame_source(frames, record)
    return source.stamp_for(record) if source is not None else 0


def _depth_projector(frames: Mapping[str, FrameIndex]) -> Projector:
    """Back-projection with each bag's depth (read on first use; a bag without depth gives none)."""
    found: dict[str, DepthIndex | None] = {}

    def project(
        record: ResultRecord, pixels: Sequence[tuple[float, float]], size: tuple[int, int]
    ) -> Sequence[tuple[float, ...] | None]:
        source = frame_source(frames, record)
        if source is None:
            return [None] * len(pixels)
        if record.bag not in found:
            found[record.bag] = DepthIndex.of(source.reader, source.topic)
        depth = found[record.bag]
        stamp = source.stamp_for(record)
        return depth.project(stamp, pixels, size) if depth is not None else [None] * len(pixels)

    return project


def score_lines(scored: ScoredRun, limit: int = 8) -> list[str]:
    """A few lines for stdout: each task's main figures, what was not scored, where scores.json is."""
    lines = []
    for task, ts in scored.scores.tasks.items():
        shown = [
            f"{name} {i.value:.3g}"
            + ("" if i.low is None or i.high is None else f" [{i.low:.3g}, {i.high:.3g}]")
            for name, i in ts.metrics.items()
            if i.value is not None and not name.startswith("latency")
        ][:4]
        lines.append(f"scores {task} (n={ts.n}): " + ", ".join(shown))
    handoff = handoff_summary(scored.scores.grades)
    if handoff is not None:
        lines.append(f"  {handoff.line()}")
    matching = scored.scores.matching
    problems = matching.problems() if matching is not None else []
    lines += capped([f"  not scored: {p}" for p in problems], limit, f"more not scored (see {scored.path})")
    lines.append(f"scores: {scored.path}")
    return lines
