"""`cosmos-reasoner-bag report`: the HTML page and plots of a results.jsonl (bag/report/html.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["HELP", "add_arguments", "main"]

HELP = "HTML page and plots from a results.jsonl"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, help="JSONL, one result record per line")
    p.add_argument("-o", "--output", type=Path, help="report folder (default: the results file's folder)")
    p.add_argument("--title", default="Cosmos Reasoner evaluation")


def main(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.report.html import load_records, write_report

    out = args.output or args.results.parent
    files = write_report(load_records(args.results), out, args.title)
    print(f"report: {files.index}")
    return 0
