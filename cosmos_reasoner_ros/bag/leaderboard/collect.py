"""The runs a leaderboard compares: each run folder's scores.json, or, with labels given, its results.jsonl
scored afresh against them (runs made before the labels existed, or scored against other labels)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels import LabelSet, bind_labels
from cosmos_reasoner_ros.bag.leaderboard.table import RunScores
from cosmos_reasoner_ros.bag.records import load_records
from cosmos_reasoner_ros.bag.scores import SCORES_FILE, ScoreOptions, TextJudge, read_scores, score_run

__all__ = ["collect_runs"]


def collect_runs(
    folders: Sequence[Path],
    labels: Sequence[LabelSet] = (),
    options: ScoreOptions = ScoreOptions(),
    judge: TextJudge | None = None,
) -> list[RunScores]:
    """One RunScores per run folder, in the order given; BagError naming a folder that has no scores (and no
    labels were given to score it with) or that is given twice."""
    if not folders:
        raise BagError("name at least one run folder")
    names = [str(f) for f in folders]
    if len(set(names)) != len(names):
        raise BagError("a run folder is named twice")
    runs = []
    for folder in folders:
        if not folder.is_dir():
            raise BagError(f"run folder {folder} does not exist")
        if labels:
            records = load_records(folder)
            bags = sorted({r.bag for r in records}) or [""]
            scores = score_run(records, bind_labels(labels, bags), options, judge)
            runs.append(RunScores(str(folder), scores.tasks))
        elif (folder / SCORES_FILE).is_file():
            runs.append(RunScores(str(folder), read_scores(folder)))
        else:
            raise BagError(
                f"run folder {folder} has no {SCORES_FILE}: evaluate it with --labels, or give --labels here"
            )
    return runs
