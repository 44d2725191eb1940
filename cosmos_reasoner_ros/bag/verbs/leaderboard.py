"""`cosmos-reasoner-bag leaderboard RUN_DIR... -o OUT`: runs (models, settings, sweep values, servers) side by
side by their scores: leaderboard.json, .html and .md in OUT."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["HELP", "add_arguments", "main"]

HELP = "runs side by side by their scores against labels (leaderboard.json, .html, .md)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from cosmos_reasoner_ros.bag.verbs.scoring_args import add_scoring_arguments

    p.add_argument("runs", type=Path, nargs="+", help="report folders of evaluate (each with scores.json)")
    p.add_argument("-o", "--output", type=Path, required=True, help="folder for leaderboard.json, .html, .md")
    p.add_argument("--title", default="Leaderboard")
    add_scoring_arguments(p, thresholds=False)


def main(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.leaderboard import Leaderboard, collect_runs, write_leaderboard
    from cosmos_reasoner_ros.bag.safe_paths import writable_folder
    from cosmos_reasoner_ros.bag.scores import TextJudge
    from cosmos_reasoner_ros.bag.verbs.scoring_args import scoring_from_args

    writable_folder(args.output, "leaderboard folder")
    scoring = scoring_from_args(args, need_labels=False)
    assert scoring is not None
    judge = TextJudge(scoring.judge) if scoring.judge is not None else None
    runs = collect_runs(args.runs, scoring.labels, scoring.options, judge)
    board = Leaderboard.of(runs)
    files = write_leaderboard(board, args.output, args.title, scoring.options.confidence)
    for column in board.columns:
        if column.best:
            names = ", ".join(board.runs[i].name for i in column.best)
            flag = " (not significant)" if set(column.best) & set(column.not_significant) else ""
            print(f"best {column.task}.{column.metric}: {names}{flag}")
    print(f"leaderboard: {files.html} ({files.json.name}, {files.markdown.name})")
    return 0
