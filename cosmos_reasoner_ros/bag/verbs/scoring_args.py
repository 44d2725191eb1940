"""The scoring options shared by `evaluate`, `scenario` and `leaderboard`: labels files, score thresholds, the
intervals, the optional text judge."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cosmos_reasoner_ros.bag.errors import BagError

if TYPE_CHECKING:  # imported when used: `cosmos-reasoner-bag --help` stays quick
    from cosmos_reasoner_ros.bag.runs.scoring import RunScoring
    from cosmos_reasoner_ros.bag.scores import JudgeSettings, ScoreOptions

__all__ = ["add_scoring_arguments", "score_options", "scoring_from_args"]


def add_scoring_arguments(p: argparse.ArgumentParser, labels: bool = True, thresholds: bool = True) -> None:
    if labels:
        p.add_argument(
            "--labels",
            action="append",
            default=[],
            type=Path,
            metavar="FILE",
            help="labels file (YAML; one per bag, repeatable): score every labelled request into scores.json",
        )
    if thresholds:
        p.add_argument(
            "--min-score",
            action="append",
            default=[],
            metavar="TASK.METRIC=VALUE",
            help="a threshold checked as a JUnit case (repeatable): a floor for a score (accuracy, mean_iou, "
            "match ...), a ceiling for a distance, latency or tokens (ade_px, latency_p95_s ...)",
        )
    # Intervals are no longer bootstrapped (issue 38: Wilson, Student's t, order statistics, nothing random);
    # the two options stay accepted so that scripts written for the bootstrap still run.
    p.add_argument("--bootstrap-rounds", type=int, default=2000, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument(
        "--judge-url",
        default="",
        metavar="URL",
        help="an OpenAI-compatible endpoint asked whether free-text answers mean the same as the labels",
    )
    p.add_argument("--judge-model", default="", help="the judge's model (default: the first it lists)")
    p.add_argument(
        "--judge-api-key-env",
        default="COSMOS_REASONER_JUDGE_API_KEY",
        metavar="VAR",
        help="the environment variable holding the judge's API key",
    )


def score_options(args: argparse.Namespace) -> ScoreOptions:
    from cosmos_reasoner_ros.bag.scores import ScoreOptions

    del args  # the confidence is 95 %; nothing else is chosen
    return ScoreOptions()


def _judge(args: argparse.Namespace) -> JudgeSettings | None:
    from cosmos_reasoner_ros.bag.scores import JudgeSettings

    if not args.judge_url:
        if args.judge_model:
            raise BagError("--judge-model needs --judge-url")
        return None
    return JudgeSettings(args.judge_url, args.judge_model, args.judge_api_key_env)


def scoring_from_args(args: argparse.Namespace, need_labels: bool = True) -> RunScoring | None:
    """The run's scoring, labels files read and checked now (before anything runs); None when no option asks
    for scores. need_labels: thresholds and a judge without labels files are an error (evaluate)."""
    from cosmos_reasoner_ros.bag.labels import load_labels
    from cosmos_reasoner_ros.bag.runs.scoring import RunScoring
    from cosmos_reasoner_ros.bag.scores import parse_min_score

    files: list[Path] = list(getattr(args, "labels", []) or [])
    minimums = tuple(parse_min_score(t) for t in getattr(args, "min_score", []) or [])
    judge = _judge(args)
    if not files and need_labels:
        if minimums or judge is not None:
            raise BagError("--min-score and --judge-url score against labels: give --labels FILE")
        return None
    labels = tuple(load_labels(f) for f in files)
    return RunScoring(labels, minimums, score_options(args), judge, sources=tuple(s.source for s in labels))
