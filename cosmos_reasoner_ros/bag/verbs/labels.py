"""`cosmos-reasoner-bag labels`: `draft RUN_DIR -o labels.yaml` turns a run's answers into a labels file to
review and edit (the usual way to write labels); `check FILE` reads a labels file as evaluate would."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["HELP", "add_arguments", "main"]

HELP = "draft a labels file from a run's answers, or check one"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="labels_command", required=True)
    draft = sub.add_parser("draft", help="a labels file from a run's answers, to review and correct")
    draft.add_argument("run", type=Path, help="a report folder of evaluate (or its results.jsonl)")
    draft.add_argument("-o", "--output", type=Path, required=True, help="the labels file to write (YAML)")
    draft.add_argument("--bag", default="", help="the bag to draft for, when the run replayed several")
    draft.add_argument(
        "--force", action="store_true", help="replace an existing file (labels are edited by hand)"
    )
    check = sub.add_parser("check", help="read a labels file as evaluate would and summarise it")
    check.add_argument("file", type=Path)


def _draft(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.labels import draft_labels, labels_from_text
    from cosmos_reasoner_ros.bag.records import load_records, results_file
    from cosmos_reasoner_ros.bag.safe_paths import writable_file

    if args.output.exists() and not args.force:
        raise BagError(f"{args.output} exists; labels are edited by hand: choose a new file or give --force")
    writable_file(args.output, "labels file")
    records = load_records(args.run)
    text = draft_labels(records, str(results_file(args.run)), args.bag)
    drafted = labels_from_text(text, str(args.output))  # what is written reads back as a labels file
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BagError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(
        f"wrote {args.output}: {len(drafted.labels)} labels from {len(records)} requests; review every answer"
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.labels import load_labels

    labels = load_labels(args.file)
    tasks = Counter(label.task for label in labels.labels)
    listed = ", ".join(f"{task} {n}" for task, n in sorted(tasks.items())) or "none"
    bag = f" for bag {labels.bag}" if labels.bag else " (for the run's only bag)"
    print(f"{args.file}: {len(labels.labels)} labels{bag}; by task: {listed}")
    return 0


def main(args: argparse.Namespace) -> int:
    return {"draft": _draft, "check": _check}[args.labels_command](args)
