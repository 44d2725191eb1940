"""The reasoner_node process: glibc malloc settings, its own SIGINT/SIGTERM handling, the executor, and an
ordered shutdown that publishes the results of requests in flight before the ROS context goes away.

`reasoner_node` (scripts/) and `python -m cosmos_reasoner_ros.node` run `main`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.signals import SignalHandlerOptions
from rclpy.utilities import ok, remove_ros_args, try_shutdown

from cosmos_reasoner_ros.node.malloc_tuning import tune_malloc
from cosmos_reasoner_ros.node.parameters import ConfigError
from cosmos_reasoner_ros.node.reasoner_node import ReasonerNode

__all__ = ["main"]


def usage() -> argparse.ArgumentParser:
    """What `reasoner_node --help` says: the node takes ROS arguments only."""
    return argparse.ArgumentParser(
        prog="reasoner_node",
        description="Buffers camera topics into clips, asks the Cosmos 3 Reasoner about them and publishes "
        "the answers (see README.md). Configured by ROS parameters: every one is documented, with its unit, "
        "in config/reasoner.yaml of the package's share directory.",
        epilog="usage with ROS arguments: reasoner_node --ros-args --params-file my_robot.yaml "
        "[-p name:=value ...] [-r __ns:=/robot1]; or ros2 launch cosmos_reasoner_ros reasoner.launch.py",
    )


def main(args: list[str] | None = None) -> int:
    # Arguments outside --ros-args are the node's own: only --help exists (anything else is an error, exit 2).
    usage().parse_args(remove_ros_args(args=sys.argv if args is None else args)[1:])
    # rclpy's own signal handler would shut the context down at once, and results of requests in flight
    # could no longer be published: this process handles SIGINT and SIGTERM itself and shuts down in order.
    tune_malloc()  # before any thread exists: frames must not fragment the heap (see malloc_tuning)
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        try:
            node = ReasonerNode()
        except ConfigError as exc:
            rclpy.logging.get_logger("reasoner_node").fatal(str(exc))
            return 2
        executor = MultiThreadedExecutor(num_threads=node.executor_threads)
        executor.add_node(node)
        try:
            while not stop.is_set() and ok():
                executor.spin_once(timeout_sec=0.1)
            node.get_logger().info(
                "shutting down: cancelling requests in flight and publishing their results"
            )
            closing = threading.Thread(target=node.shutdown, name="reasoner-shutdown")
            closing.start()
            while closing.is_alive() and ok():
                executor.spin_once(timeout_sec=0.05)  # goal results go out while requests end
            closing.join()
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        finally:
            node.destroy_node()
            executor.shutdown()
    finally:
        try_shutdown()
    return 0
