"""`cosmos-reasoner-bag check`: look at a recording before replaying it (bag/files/overview.py): whole or
damaged, its topics with types, counts, rates, spans and gaps, the types it cannot read or reads with its own
definitions, the camera, CameraInfo and depth topics a replay would choose, and per camera its header stamps
that go back or sit far from their log time (bag/files/header_stamps.py). Exit 2 when it is damaged."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cosmos_reasoner_ros.bag.verbs.arguments import add_topics

__all__ = ["HELP", "add_arguments", "main"]

HELP = "look at a recording before replaying it: whole?, topics, rates, gaps, what a replay would use"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bag", type=Path, help="a bag folder, a folder of .mcap/.db3 files, or one such file")
    p.add_argument("--json", action="store_true", help="print the overview as one JSON object")
    add_topics(p)
    p.epilog = (
        "Times are seconds from the recording's start (its first message, on any topic), the origin of "
        "evaluate's --at. Per camera: header stamps that go back (not after the previous one's) or sit more "
        "than 1 s from their log time. Exit 0: whole (notes say what could not be checked); 2: damaged, or "
        "not a bag."
    )


def main(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.files.header_stamps import check_stamps
    from cosmos_reasoner_ros.bag.files.overview import overview
    from cosmos_reasoner_ros.bag.files.reader import BagReader

    with BagReader(args.bag) as reader:
        found = overview(
            reader, args.camera_topics, args.info_topics, args.depth_topics, depth=not args.no_depth
        )
        # A damaged bag is not read further: its problems are the answer.
        stamps = [check_stamps(reader, t, found.start_ns) for t in found.cameras] if found.whole else []
    if args.json:
        print(
            json.dumps(
                {**found.to_json(), "header_stamps": [s.to_json() for s in stamps]}, ensure_ascii=False
            )
        )
    else:
        print("\n".join(found.lines() + [s.line() for s in stamps]))
    return 0 if found.whole else 2
