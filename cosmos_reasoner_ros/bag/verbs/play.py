"""`cosmos-reasoner-bag play`: publish a recording through rclpy with its recorded timing and `/clock` in the
bag's time (bag/replay/play.py), until it ends or SIGINT / SIGTERM stops it (exit 0)."""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.verbs.arguments import add_topics
from cosmos_reasoner_ros.bag.verbs.signals import stop_signals

__all__ = ["HELP", "add_arguments", "main"]

HELP = "publish a bag through rclpy with its recorded timing"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bag", type=Path)
    p.add_argument("--rate", type=float, default=1.0, help="speed factor")
    p.add_argument("--loop", action="store_true", help="play until interrupted")
    p.add_argument("--loops", type=int, default=1, help="number of passes (--loop: endless)")
    p.add_argument("--start-offset", type=float, default=0.0, help="[s] skip the bag's first seconds")
    add_topics(p)
    p.add_argument(
        "--topics",
        nargs="*",
        default=[],
        help="further bag topics to play (alone, without --camera-topic: only these)",
    )
    p.add_argument(
        "--all-topics",
        action="store_true",
        help="play every topic whose message type rclpy has (the others are named and left out)",
    )
    p.add_argument("--no-clock", action="store_true", help="do not publish /clock in the bag's time")
    p.add_argument("--remap", nargs="*", default=[], metavar="OLD:=NEW")
    p.add_argument("--qos", default="reliable", help="reliable (default), sensor_data or transient_local")
    p.add_argument("--qos-depth", type=int, default=10)
    p.add_argument(
        "--topic-qos", nargs="*", default=[], metavar="TOPIC=QOS", help="per-topic QoS (bag topic)"
    )
    p.add_argument(
        "--wait-for-subscribers",
        type=float,
        default=0.0,
        metavar="S",
        help="[s] wait for a subscriber on every topic before starting",
    )
    p.add_argument(
        "--drain",
        type=float,
        default=5.0,
        metavar="S",
        help="[s] after the last message, wait this long for reliable subscribers to acknowledge everything",
    )
    p.add_argument("--stats", type=Path, help="write the lag statistics (JSON) here")


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key or not value:
        raise BagError(f"{item!r} is not TOPIC=VALUE")
    return key, value


def main(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from cosmos_reasoner_ros.bag.rclpy_compat import initialized
    from cosmos_reasoner_ros.bag.replay.play import Player, PlayOptions, parse_remap

    options = PlayOptions(
        rate=args.rate,
        loops=0 if args.loop else args.loops,
        start_offset_s=args.start_offset,
        cameras=tuple(args.camera_topics),
        infos=tuple(args.info_topics),
        depths=tuple(args.depth_topics),
        depth=not args.no_depth,
        topics=tuple(args.topics),
        all_topics=args.all_topics,
        remap=parse_remap(args.remap),
        qos=args.qos,
        qos_depth=args.qos_depth,
        topic_qos=dict(_pair(item) for item in args.topic_qos),
        wait_for_subscribers_s=args.wait_for_subscribers,
        drain_s=args.drain,
        clock=not args.no_clock,
    )
    options.check()
    if args.stats is not None:
        from cosmos_reasoner_ros.bag.safe_paths import writable_file

        writable_file(args.stats, "statistics file")
    # rclpy's own signal handler would invalidate the context under the publishing threads: the player stops
    # and closes its publishers itself. Ctrl-C before the playback (the bag's check) ends with code 130.
    with initialized(signal_handler_options=SignalHandlerOptions.NO):
        node = rclpy.create_node("cosmos_reasoner_bag_play")
        try:
            player = Player(node, args.bag, options)
            try:
                stats = _play_until_signalled(player)
            finally:
                player.close()
        finally:
            node.destroy_node()
    summary = stats.summary()
    if args.stats:
        try:
            args.stats.write_text(json.dumps(summary))
        except OSError as exc:
            raise BagError(f"cannot write {args.stats}: {exc.strerror or exc}") from None
    print(json.dumps(summary))
    return 0


def _play_until_signalled(player: Any) -> Any:
    """`player.run` on a thread of its own until it ends or SIGINT / SIGTERM asks it to stop (exit 0).

    The handlers are installed whatever the process inherited, as ROS 2 tools do: a shell starts a
    background job with SIGINT ignored, and Python then leaves it ignored (no KeyboardInterrupt): `play
    --loop` run by a test suite in the background played on for hours after its SIGINT. The signals only set
    a flag that this thread polls: a KeyboardInterrupt raised wherever the playing thread happens to be
    (inside a publish, a lock, a finalizer, where Python drops it as "Exception ignored") could leave the
    player's state half changed."""
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def play() -> None:
        try:
            outcome["stats"] = player.run(stop)
        except BaseException as exc:  # handed to the main thread, which raises it
            outcome["error"] = exc

    with stop_signals() as signalled:
        worker = threading.Thread(target=play, name="bag-play")
        worker.start()
        while worker.is_alive():
            if signalled:
                stop.set()
            worker.join(0.1)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["stats"]
