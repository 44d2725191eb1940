"""The reasoner_node process: glibc malloc settings, its own SIGINT/SIGTERM handling, the executor, and an
ordered shutdown that publishes the results of requests in flight before the ROS context goes away.

`reasoner_node` (scripts/) and `python -m cosmos_reasoner_ros.node` run `main`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.signals import SignalHandlerOptions
from rclpy.utilities import ok, remove_ros_args, try_shutdown

from cosmos_reasoner_ros.node.diagnostics import ProblemLog
from cosmos_reasoner_ros.node.malloc_tuning import tune_malloc
from cosmos_reasoner_ros.node.parameters import ConfigError
from cosmos_reasoner_ros.node.reasoner_node import ReasonerNode
from cosmos_reasoner_ros.node.service_replies import AnswerCount, failure_place, failure_summary

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


class Spinner:
    """The executor's spin, immune to what a callback raises: rclpy re-raises a callback's exception from
    the next spin_once, and one escaping it ended the process (exit 1, with a traceback). It is logged, once
    per kind and place in a while, and the node keeps spinning; only the ROS context's end stops it."""

    def __init__(self, executor: MultiThreadedExecutor, log: ProblemLog) -> None:
        self._executor, self._log = executor, log

    def spin_once(self, timeout_s: float) -> None:
        try:
            self._executor.spin_once(timeout_sec=timeout_s)
        except (KeyboardInterrupt, ExternalShutdownException):
            raise
        except Exception as exc:
            self._log.report(
                failure_place(exc), f"a callback failed ({failure_summary(exc)}); the node keeps running"
            )


def answer_what_is_queued(
    spinner: Spinner, answered: AnswerCount, quiet_s: float = 0.25, limit_s: float = 2.0
) -> None:
    """Before the node goes: requests already queued at its services and action (a burst sent right before
    the signal) are taken and answered (refused, or with their `cancelled` results) until none was for
    quiet_s, at most limit_s. Before, a node that was quick to shut down left them queued: of 20 triggers
    sent to an unconfigured node right before SIGINT, 18 never got a reply."""
    end = time.monotonic() + limit_s
    last, quiet_since = answered.value, time.monotonic()
    while time.monotonic() < end and time.monotonic() - quiet_since < quiet_s:
        spinner.spin_once(0.02)
        if answered.value != last:
            last, quiet_since = answered.value, time.monotonic()


def stop_once(stop: threading.Event) -> None:
    """The first SIGINT or SIGTERM starts the ordered shutdown (bounded by shutdown_timeout_s); later ones
    are ignored from then on. Before, a later one arriving as the interpreter finished (CPython puts back
    the default action of signals with a Python handler) killed the process: 30 SIGTERMs 20 ms apart gave
    exit code -15 every time, where one gives the documented 0. Ignored signals stay ignored."""
    stop.set()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def main(args: list[str] | None = None) -> int:
    # Arguments outside --ros-args are the node's own: only --help exists (anything else is an error, exit 2).
    usage().parse_args(remove_ros_args(args=sys.argv if args is None else args)[1:])
    # rclpy's own signal handler would shut the context down at once, and results of requests in flight
    # could no longer be published: this process handles SIGINT and SIGTERM itself and shuts down in order.
    tune_malloc()  # before any thread exists: frames must not fragment the heap (see malloc_tuning)
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop_once(stop))
    try:
        try:
            node = ReasonerNode()
        except ConfigError as exc:
            rclpy.logging.get_logger("reasoner_node").fatal(str(exc))
            return 2
        executor = MultiThreadedExecutor(num_threads=node.executor_threads)
        executor.add_node(node)
        spinner = Spinner(executor, ProblemLog(node.get_logger().error))
        try:
            while not stop.is_set() and ok():
                spinner.spin_once(0.1)
            node.get_logger().info(
                "shutting down: cancelling requests in flight and publishing their results"
            )
            closing = threading.Thread(target=node.shutdown, name="reasoner-shutdown")
            closing.start()
            while closing.is_alive() and ok():
                spinner.spin_once(0.05)  # goal results go out while requests end
            closing.join()
            answer_what_is_queued(spinner, node.answered)
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        finally:
            node.destroy_node()
            executor.shutdown()
    finally:
        try_shutdown()
    return 0
