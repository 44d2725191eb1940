"""Runs side by side by their scores: one row per run, one column per task metric, the best per column, and
which differences are not significant (their 95 % intervals overlap the best's). A cell of fewer than MIN_N
values is ranked against nothing: it is neither best nor compared ("too few labelled answers")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cosmos_reasoner_ros.bag.scores import METRICS, Interval, TaskScores

__all__ = ["Column", "Leaderboard", "RunScores"]


@dataclass(frozen=True)
class RunScores:
    name: str  # the run's folder as given
    tasks: Mapping[str, TaskScores]
    link: str = ""  # the run's report, relative to the leaderboard's folder ("" : none)


@dataclass(frozen=True)
class Column:
    task: str
    metric: str
    better: str  # higher | lower | "" (not ranked)
    best: tuple[int, ...] = ()  # rows with the best value
    # rows, best ones included, whose interval overlaps another best's or a best one's: their difference from
    # the best is not significant
    not_significant: tuple[int, ...] = ()
    too_few: tuple[int, ...] = ()  # rows with a value from fewer than MIN_N answers: not ranked

    def cell(self, runs: Sequence[RunScores], row: int) -> Interval | None:
        scores = runs[row].tasks.get(self.task)
        return scores.metrics.get(self.metric) if scores is not None else None


def _column(runs: Sequence[RunScores], task: str, metric: str) -> Column:
    spec = METRICS.get(metric)
    better = spec.better if spec is not None else ""
    column = Column(task, metric, better)
    if not better:
        return column
    sign = 1.0 if better == "higher" else -1.0
    values: dict[int, Interval] = {}
    too_few: list[int] = []
    for row in range(len(runs)):
        cell = column.cell(runs, row)
        if cell is not None and cell.value is not None:
            if cell.too_few:
                too_few.append(row)
            else:
                values[row] = cell
    if len(values) < 2:
        return Column(task, metric, better, tuple(values), (), tuple(too_few))
    top = max(sign * i.value for i in values.values() if i.value is not None)
    best = tuple(
        row for row, i in values.items() if i.value is not None and abs(sign * i.value - top) <= 1e-12
    )
    overlapping = {
        row for row, i in values.items() if row not in best and any(i.overlaps(values[b]) for b in best)
    }
    if overlapping or len(best) > 1:
        overlapping |= set(best)
    return Column(task, metric, better, best, tuple(sorted(overlapping)), tuple(too_few))


@dataclass(frozen=True)
class Leaderboard:
    runs: tuple[RunScores, ...]
    columns: tuple[Column, ...]

    @classmethod
    def of(cls, runs: Sequence[RunScores]) -> Leaderboard:
        """Columns for every task metric any run has, tasks by name, metrics in the metric table's order."""
        order = {name: i for i, name in enumerate(METRICS)}
        keys = sorted(
            {
                (task, metric)
                for run in runs
                for task, scores in run.tasks.items()
                for metric in scores.metrics
            },
            key=lambda k: (k[0], order.get(k[1], len(order)), k[1]),
        )
        return cls(tuple(runs), tuple(_column(runs, task, metric) for task, metric in keys))

    @property
    def tasks(self) -> list[str]:
        return list(dict.fromkeys(c.task for c in self.columns))
