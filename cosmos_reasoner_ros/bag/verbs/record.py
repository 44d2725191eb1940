"""`cosmos-reasoner-bag record`: record a live node's output topics into an MCAP bag (bag/replay/record.py)
until the duration ends or SIGINT / SIGTERM stops it (exit 0)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.verbs.signals import stop_signals

__all__ = ["HELP", "add_arguments", "main"]

HELP = "record the node's output topics into an mcap bag"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", type=Path, required=True, help="new bag directory")
    p.add_argument(
        "--topics",
        nargs="*",
        default=[],
        help="topics to record besides the defaults: the node's result, next_action, annotated_image, "
        "trajectory, markers and /diagnostics",
    )
    p.add_argument("--no-default-topics", action="store_true", help="record only the --topics given")
    p.add_argument("--node-name", default="reasoner_node", help="name of the node whose outputs to record")
    p.add_argument("--duration", type=float, default=0.0, help="[s] stop after this long; 0: until Ctrl-C")
    p.add_argument("--storage", default="mcap")


def main(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from cosmos_reasoner_ros.bag.rclpy_compat import initialized
    from cosmos_reasoner_ros.bag.replay.play import topic_name_problem
    from cosmos_reasoner_ros.bag.replay.record import Recorder, default_topics

    if problem := _node_name_problem(args.node_name):
        raise BagError(problem)
    topics = list(
        dict.fromkeys([*(() if args.no_default_topics else default_topics(args.node_name)), *args.topics])
    )
    if not topics:
        raise BagError("no topic to record: give --topics (or leave out --no-default-topics)")
    if named := [p for t in topics if (p := topic_name_problem(t))]:
        raise BagError("; ".join(named))
    # SIGINT/SIGTERM end the recording through a flag (rclpy's handler would shut the context down first, and
    # what the readers already hold would be lost); installed whatever was inherited, as in play.
    with initialized(signal_handler_options=SignalHandlerOptions.NO), stop_signals() as stopped:
        node = rclpy.create_node("cosmos_reasoner_bag_record")
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        recorder = Recorder(node, args.output, topics, args.storage)
        end = time.monotonic() + args.duration if args.duration > 0 else float("inf")
        next_discovery = 0.0
        try:
            while time.monotonic() < end and not stopped:
                if time.monotonic() >= next_discovery:
                    for topic in recorder.discover():
                        print(f"recording {topic}", file=sys.stderr, flush=True)
                    next_discovery = time.monotonic() + 0.5
                executor.spin_once(timeout_sec=0.1)
            # What reached the subscriptions before the stop (acknowledged to its publishers) is recorded too.
            _take_pending(executor, recorder, 2.0)
        except ExternalShutdownException:
            pass
        finally:
            counts = recorder.close()
            node.destroy_node()
    print(json.dumps({"bag": str(args.output), "messages": counts}))
    return 0


def _node_name_problem(name: str) -> str:
    """Why ROS 2 would refuse `name` (an optional namespace before it) as a node's name ("" when it takes
    it)."""
    from rclpy.exceptions import NameValidationException
    from rclpy.validate_node_name import validate_node_name

    try:
        validate_node_name(name.strip("/").rsplit("/", 1)[-1])
    except NameValidationException as exc:
        return f"--node-name {name[:80]!r}: {str(exc).splitlines()[0]}"
    return ""


def _take_pending(executor: Any, recorder: Any, timeout_s: float) -> None:
    """Spin until a round takes no message (or timeout_s): samples already delivered to the subscriptions."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = sum(recorder.counts.values())
        try:
            executor.spin_once(timeout_sec=0.05)
        except Exception:  # the context went away meanwhile: nothing more to take
            return
        if sum(recorder.counts.values()) == before:
            return
