"""Score thresholds (`--min-score TASK.METRIC=VALUE`, a scenario's `min_scores:`): a floor for a score, a
ceiling for a distance, a latency or tokens. Each becomes a check of the run (a JUnit test case); a threshold
on a task or metric the run has no value for fails, rather than passing unseen."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.judge.compare import Check
from cosmos_reasoner_ros.bag.scores.metric_specs import METRICS
from cosmos_reasoner_ros.bag.scores.scoring import TaskScores
from cosmos_reasoner_ros.parameters.text_values import number_text

__all__ = ["MinScore", "parse_min_score", "score_checks"]


@dataclass(frozen=True)
class MinScore:
    task: str
    metric: str
    limit: float

    @property
    def op(self) -> str:
        return ">=" if METRICS[self.metric].better == "higher" else "<="

    @property
    def name(self) -> str:
        return f"score[{self.task}.{self.metric}]"


def parse_min_score(text: str, where: str = "--min-score") -> MinScore:
    """`task.metric=value`."""
    key, sep, value = text.partition("=")
    task, dot, metric = key.strip().rpartition(".")
    if not sep or not dot or not task or not metric:
        raise BagError(f"{where} takes TASK.METRIC=VALUE, e.g. trajectory.ade_px=40")
    if metric not in METRICS:
        raise BagError(f"{where}: unknown metric {metric[:40]!r}; known: {', '.join(METRICS)}")
    try:
        limit = number_text(value)
    except ValueError as exc:
        raise BagError(f"{where}: the value of {key.strip()[:80]}: {str(exc)[:120]}") from None
    return MinScore(task, metric, limit)


def score_checks(tasks: Mapping[str, TaskScores], thresholds: Sequence[MinScore]) -> list[Check]:
    checks = []
    for t in thresholds:
        spec = METRICS[t.metric]
        unit = f" {spec.unit}" if spec.unit else ""
        scores = tasks.get(t.task)
        value = scores.metrics[t.metric].value if scores is not None and t.metric in scores.metrics else None
        if value is None:
            why = "no labelled request of the task" if scores is None else "no value"
            checks.append(Check(t.name, why, t.limit, t.op, False, unit))
            continue
        ok = value >= t.limit - 1e-9 if t.op == ">=" else value <= t.limit + 1e-9
        checks.append(Check(t.name, value, t.limit, t.op, ok, unit))
    return checks
