"""The receiving ROS process of the bag play test and benchmark (`python -m support.bag_subscriber`):
subscribes raw to topics, notes each message's header stamp and receive time, and writes them as JSON."""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from pathlib import Path

from cosmos_reasoner_ros.bag.rclpy_compat import initialized


def _stamp(data: bytes) -> int:
    # CDR: 4-byte encapsulation header, then header.stamp (int32 sec, uint32 nanosec) for any stamped message.
    sec, nanosec = struct.unpack_from("<iI", data, 4)
    return sec * 1_000_000_000 + nanosec


def main() -> int:
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from cosmos_reasoner_ros.bag.replay.play import message_class

    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", action="append", required=True, help="topic=pkg/msg/Type")
    parser.add_argument("--count", type=int, required=True, help="messages to wait for, over all topics")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    received: list[tuple[str, int, float]] = []
    with initialized():
        node = rclpy.create_node("bag_test_subscriber")
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        for spec in args.topic:
            topic, msgtype = spec.split("=")

            def on_msg(data: bytes, topic: str = topic) -> None:
                received.append((topic, _stamp(data), time.monotonic()))

            node.create_subscription(message_class(msgtype), topic, on_msg, qos, raw=True)
        print("ready", flush=True)
        deadline = time.monotonic() + args.timeout
        while len(received) < args.count and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        node.destroy_node()
    args.out.write_text(json.dumps(received))
    return 0


if __name__ == "__main__":
    sys.exit(main())
