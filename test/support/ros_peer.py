"""A second ROS process for the interface tests (`python -m support.ros_peer`): publishes, then exits."""

from __future__ import annotations

import argparse
import sys
import time

import rclpy
from cosmos_reasoner_ros.msg import ReasonerResult
from rclpy.qos import QoSProfile, qos_profile_sensor_data
from sensor_msgs.msg import Image

from cosmos_reasoner_ros.bag.rclpy_compat import initialized
from support.interface_samples import sample_result


def _wait_for_subscriber(
    node: rclpy.node.Node, publisher: rclpy.publisher.Publisher, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while publisher.get_subscription_count() == 0:
        if time.monotonic() > deadline:
            raise SystemExit("no subscriber appeared")
        rclpy.spin_once(node, timeout_sec=0.05)


def publish_result(node: rclpy.node.Node, text: str) -> None:
    # Transient local so a late-joining subscriber still gets it; the test asserts every field survived.
    from rclpy.qos import DurabilityPolicy

    qos = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    pub = node.create_publisher(ReasonerResult, "result", qos)
    pub.publish(sample_result(text))
    # Stay alive until the test has read the sample and closes our stdin: waiting for a subscription count
    # instead would race with a subscriber that reads the latched sample and leaves within one poll.
    sys.stdin.read()


def publish_images(node: rclpy.node.Node, count: int, rate_hz: float, width: int, height: int) -> None:
    pub = node.create_publisher(Image, "images", qos_profile_sensor_data)
    _wait_for_subscriber(node, pub, 60.0)
    time.sleep(0.5)  # discovery is symmetric only after both endpoints matched
    payload = bytearray(width * height * 3)
    start = time.monotonic()
    for i in range(count):
        msg = Image(height=height, width=width, encoding="rgb8", step=width * 3)
        msg.header.frame_id = str(i)
        payload[0:4] = i.to_bytes(4, "little")
        msg.data = bytes(payload)
        pub.publish(msg)
        time.sleep(max(0.0, start + (i + 1) / rate_hz - time.monotonic()))
    time.sleep(1.0)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["result", "images"])
    parser.add_argument("--text", default="")
    parser.add_argument("--count", type=int, default=90)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    args = parser.parse_args()
    with initialized():
        node = rclpy.create_node("interface_test_peer")
        if args.what == "result":
            publish_result(node, args.text)
        else:
            publish_images(node, args.count, args.rate, args.width, args.height)
        node.destroy_node()
    return 0


if __name__ == "__main__":
    sys.exit(main())
