"""`cosmos-reasoner-bag`: the command line of the bag tools. Each verb is a module of bag/verbs/ (HELP,
add_arguments, main); this module only registers them and turns what ends a verb into its exit code."""

from __future__ import annotations

import argparse
import sys
from typing import Protocol

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.verbs import (
    check,
    evaluate,
    labels,
    leaderboard,
    make,
    play,
    record,
    report,
    scenario,
)
from cosmos_reasoner_ros.errors import ReasonerError

DESCRIPTION = """Bag tools of cosmos_reasoner_ros: make camera bags, play recordings with /clock in bag time,
record a node, replay bags into reasoner_node to judge its answers (evaluate, scenario), and score them
against labels (evaluate --labels, labels, leaderboard).

exit codes:
  0    done (evaluate, scenario: every run within its tolerances)
  1    evaluate, scenario: a tolerance was exceeded, or a --min-score threshold (the summary,
       verdict.json and the JUnit file say which)
  2    bad input: a bag (missing, damaged, without the topics asked for), a file, an option: one line
       on stderr
  130  interrupted before the verb could stop cleanly (play and record stop on SIGINT/SIGTERM with 0)"""


class Verb(Protocol):
    """What a module of bag/verbs/ offers."""

    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def main(self, args: argparse.Namespace) -> int: ...


# One line per verb: its name on the command line and its module.
VERBS: dict[str, Verb] = {
    "check": check,
    "make": make,
    "play": play,
    "record": record,
    "evaluate": evaluate,
    "scenario": scenario,
    "report": report,
    "labels": labels,
    "leaderboard": leaderboard,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cosmos-reasoner-bag",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, verb in VERBS.items():
        verb.add_arguments(sub.add_parser(name, help=verb.HELP, description=verb.HELP))
    return parser


def main(argv: list[str] | None = None) -> int:
    # Paths are printed as given, and a file name may hold bytes that are not UTF-8: shown escaped, never a
    # UnicodeEncodeError after the work is done.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    try:
        return VERBS[args.command].main(args)
    except (BagError, ReasonerError, ValueError) as exc:  # the user's bags, tasks or options
        print(f"cosmos-reasoner-bag {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
