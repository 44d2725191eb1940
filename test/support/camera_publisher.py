"""The test camera: a publisher process for the node tests and the benchmarks, and its synthetic depth.

Run as `python -m support.camera_publisher` it is the camera process: frames decoded from a video (the robot
clip), resized, published as rgb8 with fresh stamps, optionally with synthetic depth and CameraInfo.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from cosmos_reasoner_ros.bag.rclpy_compat import initialized
from support.paths import ROBOT_CLIP
from support.processes import module_cmd, ros_env

FX, FY = 500.0, 480.0  # synthetic intrinsics at 640x480; scaled with the image size


def intrinsics_k(width: int, height: int) -> list[float]:
    sx, sy = width / 640.0, height / 480.0
    return [FX * sx, 0.0, width / 2.0, 0.0, FY * sy, height / 2.0, 0.0, 0.0, 1.0]


def synthetic_depth_m(width: int, height: int) -> np.ndarray:
    """A slanted plane [m]: depth grows left to right and top to bottom, so a wrong pixel gives a wrong Z."""
    u = np.arange(width, dtype=np.float32)[None, :]
    v = np.arange(height, dtype=np.float32)[:, None]
    return (1.0 + u / width + 0.5 * v / height).astype(np.float32)


def decode_frames(video: Path, width: int, height: int) -> list[np.ndarray]:
    import av
    import cv2

    with av.open(str(video)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    return [cv2.resize(f, (width, height), interpolation=cv2.INTER_AREA) for f in frames]


@contextmanager
def camera_process(
    topic: str,
    width: int,
    height: int,
    rate: float = 15.0,
    video: Path | None = None,
    depth_topic: str = "",
    info_topic: str = "",
    depth_encoding: str = "32FC1",
    frame_id: str = "camera_optical_frame",
    compressed: bool = False,
    zero_stamps: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """The camera publisher as a child process for the duration of the block (terminated and reaped after)."""
    cmd = [
        *module_cmd("support.camera_publisher"),
        "--topic",
        topic,
        "--width",
        str(width),
        "--height",
        str(height),
        "--rate",
        str(rate),
        "--frame-id",
        frame_id,
        "--depth-encoding",
        depth_encoding,
    ]
    if video is not None:
        cmd += ["--video", str(video)]
    cmd += ["--depth-topic", depth_topic] if depth_topic else []
    cmd += ["--info-topic", info_topic] if info_topic else []
    cmd += ["--compressed"] if compressed else []
    cmd += ["--zero-stamps"] if zero_stamps else []
    proc = subprocess.Popen(cmd, env=ros_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.terminate()  # SIGTERM: the publisher loop stops and the node is destroyed cleanly
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _publish(args: argparse.Namespace) -> int:
    import cv2
    import rclpy
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo, CompressedImage, Image

    video = Path(args.video) if args.video else ROBOT_CLIP
    frames = decode_frames(video, args.width, args.height)
    depth_m = synthetic_depth_m(args.width, args.height)
    depth_data = (
        np.round(depth_m * 1000).astype(np.uint16).tobytes()
        if args.depth_encoding == "16UC1"
        else depth_m.tobytes()
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with initialized():
        node = rclpy.create_node("test_camera")
        pub = node.create_publisher(
            CompressedImage if args.compressed else Image, args.topic, qos_profile_sensor_data
        )
        jpegs = [cv2.imencode(".jpg", cv2.cvtColor(f, cv2.COLOR_RGB2BGR))[1].tobytes() for f in frames]
        depth_pub = (
            node.create_publisher(Image, args.depth_topic, qos_profile_sensor_data)
            if args.depth_topic
            else None
        )
        info_pub = node.create_publisher(CameraInfo, args.info_topic, 10) if args.info_topic else None
        start = time.monotonic()
        i = 0
        try:
            while not stop.is_set() and rclpy.ok():
                stamp = node.get_clock().now().to_msg()
                if args.compressed:
                    msg = CompressedImage(format="jpeg", data=jpegs[i % len(jpegs)])
                else:
                    msg = Image(height=args.height, width=args.width, encoding="rgb8", step=args.width * 3)
                    msg.data = frames[i % len(frames)].tobytes()
                msg.header.frame_id = args.frame_id
                if not args.zero_stamps:  # drivers that do not stamp leave it zero
                    msg.header.stamp = stamp
                pub.publish(msg)
                if depth_pub is not None:
                    bpp = 2 if args.depth_encoding == "16UC1" else 4
                    depth = Image(
                        height=args.height,
                        width=args.width,
                        encoding=args.depth_encoding,
                        step=args.width * bpp,
                    )
                    depth.header.stamp, depth.header.frame_id = stamp, args.frame_id
                    depth.data = depth_data
                    depth_pub.publish(depth)
                if info_pub is not None:  # also without depth: the ground plane of the Nav2 handoff needs K
                    info = CameraInfo(
                        width=args.width, height=args.height, k=intrinsics_k(args.width, args.height)
                    )
                    info.header.stamp, info.header.frame_id = stamp, args.frame_id
                    info_pub.publish(info)
                i += 1
                # sleep, not stop.wait(): the SIGTERM handler's set() would wait for the lock wait() holds
                time.sleep(max(0.0, start + i / args.rate - time.monotonic()))
        except KeyboardInterrupt:
            pass
        node.destroy_node()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description="test camera: video frames (and synthetic depth) on ROS topics"
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--rate", type=float, default=15.0)
    parser.add_argument("--video", default="")
    parser.add_argument("--frame-id", default="camera_optical_frame")
    parser.add_argument("--depth-topic", default="")
    parser.add_argument("--info-topic", default="")
    parser.add_argument("--depth-encoding", default="32FC1", choices=["32FC1", "16UC1"])
    parser.add_argument(
        "--compressed", action="store_true", help="publish sensor_msgs/CompressedImage (jpeg)"
    )
    parser.add_argument("--zero-stamps", action="store_true", help="leave header.stamp zero")
    return _publish(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
