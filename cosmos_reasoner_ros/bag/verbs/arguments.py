"""Option groups that several verbs take: the topics to replay, how a replayed run reaches its server and
writes its media, and how a run is judged."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cosmos_reasoner_ros.parameters.server_url import DEFAULT_SERVER_URL

if TYPE_CHECKING:
    from cosmos_reasoner_ros.bag.replay.plan import EvalOptions

__all__ = ["add_checks", "add_run", "add_topics", "run_options"]


def add_topics(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--camera-topic",
        "--image-topic",
        dest="camera_topics",
        action="append",
        default=[],
        metavar="TOPIC",
        help="camera topic to replay (Image, CompressedImage or foxglove CompressedVideo; repeatable); "
        "default: the bag's only camera topic",
    )
    p.add_argument(
        "--info-topic",
        dest="info_topics",
        action="append",
        default=[],
        metavar="TOPIC",
        help="its CameraInfo topic (one per camera topic); default: the one in the camera's namespace",
    )
    p.add_argument(
        "--depth-topic",
        dest="depth_topics",
        action="append",
        default=[],
        metavar="TOPIC",
        help="its depth topic (one per camera topic); default: the bag's depth topic when unambiguous",
    )
    p.add_argument("--no-depth", action="store_true", help="leave the bag's depth topics out")


def add_checks(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--baseline", type=Path, help="previous results to compare with (results.jsonl or its folder)"
    )
    p.add_argument("--tolerances", type=Path, help="YAML overriding the shipped config/tolerances.yaml")
    p.add_argument(
        "--junit", type=Path, metavar="FILE", help="write JUnit XML (a test case per request and check)"
    )


def add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server-url", default=DEFAULT_SERVER_URL)
    p.add_argument("--timeout", type=float, default=120.0, help="[s] to wait for outstanding answers")
    p.add_argument("--image-format", default="jpg", choices=["jpg", "png"])
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--record",
        action="store_true",
        help="also record the camera and the node's outputs into OUTPUT/outputs",
    )
    p.add_argument(
        "--media-dir",
        type=Path,
        help="where the node writes clips (the server must read it); default OUTPUT/media",
    )


def run_options(args: argparse.Namespace, **fields: Any) -> EvalOptions:
    """A replay's options from those add_run gave, with the verb's own `fields`."""
    from cosmos_reasoner_ros.bag.replay.plan import EvalOptions

    return EvalOptions(
        server_url=args.server_url,
        timeout_s=args.timeout,
        image_format=args.image_format,
        progress=not args.no_progress,
        record=args.record,
        media_dir=args.media_dir,
        **fields,
    )
