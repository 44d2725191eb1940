"""`cosmos-reasoner-bag make`: video files or image folders to a bag of camera images (bag/files/make.py)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["HELP", "add_arguments", "main"]

HELP = "video files or image folders to a bag of camera images"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sources", nargs="+", type=Path, help="video files, image files or folders of images")
    p.add_argument("-o", "--output", type=Path, required=True, help="new bag directory")
    p.add_argument("--storage", default="mcap", help="mcap (default) or sqlite3")
    p.add_argument("--rate", type=float, default=0.0, help="[Hz] output rate; 0: the source's own frames")
    p.add_argument("--encoding", default="rgb8", help="rgb8, bgr8 (Image) or jpeg (CompressedImage)")
    p.add_argument("--jpeg-quality", type=int, default=90)
    p.add_argument("--topic", default="/camera/image_raw", help="image topic (jpeg: + /compressed)")
    p.add_argument("--info-topic", default="/camera/camera_info", help="CameraInfo topic; '' for none")
    p.add_argument("--frame-id", default="camera_optical_frame")
    p.add_argument("--fov", type=float, default=60.0, help="[deg] horizontal field of view of CameraInfo")
    p.add_argument("--depth", default="none", help="synthetic depth: none, plane or gradient")
    p.add_argument("--depth-encoding", default="16UC1", help="16UC1 [mm] or 32FC1 [m]")
    p.add_argument("--depth-topic", default="/camera/depth/image_raw")
    p.add_argument("--depth-m", type=float, default=1.5, help="[m] plane distance / gradient middle")
    p.add_argument("--image-fps", type=float, default=10.0, help="[Hz] frame rate of image folders")
    p.add_argument("--max-long-side", type=int, default=0, help="[px] downscale; 0: keep the size")
    p.add_argument(
        "--start",
        type=float,
        default=None,
        help="[s since the epoch] the first frame's stamp (default: now); replays run on the bag's clock",
    )


def main(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag

    made = make_bag(
        args.sources,
        args.output,
        MakeOptions(
            rate_hz=args.rate,
            encoding=args.encoding,
            jpeg_quality=args.jpeg_quality,
            image_topic=args.topic,
            info_topic=args.info_topic,
            frame_id=args.frame_id,
            fov_deg=args.fov,
            depth=args.depth,
            depth_encoding=args.depth_encoding,
            depth_topic=args.depth_topic,
            depth_m=args.depth_m,
            image_fps=args.image_fps,
            max_long_side=args.max_long_side,
            start_ns=None if args.start is None else _start_ns(args.start),
            storage=args.storage,
        ),
    )
    print(
        f"wrote {made.path}: {made.frames} frames {made.width}x{made.height} over {made.duration_s:.2f} s; "
        + ", ".join(f"{t} {n}" for t, n in made.topics.items())
    )
    return 0


def _start_ns(seconds: float) -> int:
    if not math.isfinite(seconds) or not 0 <= seconds < 2**63 / 1e9:
        raise BagError(f"--start must be seconds since the epoch, got {seconds}")
    return round(seconds * 1e9)
