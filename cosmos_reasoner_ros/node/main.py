"""The reasoner_node process: glibc malloc settings, its own SIGINT/SIGTERM handling, the executor, and an
ordered shutdown that publishes the results of requests in flight before the ROS context goes away.

`reasoner_node` (scripts/) and `python -m cosmos_reasoner_ros.node` run `main`.

Signals: SIGINT and SIGTERM, in any order, number and spacing, end the process with exit code 0 and no
traceback. Their handler only sets an event, and stays the handler until main() returns: a handler that set
SIG_IGN (as before) made CPython report a signal already pending as "OSError: Signal 15 ignored due to race
condition", with a traceback. In the node's own process the handler goes in before the heavy imports below
(rclpy, the SDK, numpy: about a second), so that a signal then stops the node before it starts; main() then
leaves both signals ignored for the interpreter's end, which would otherwise put back their default action.
"""

from __future__ import annotations

import ctypes
import inspect
import itertools
import signal
import sys
import threading
import time
import traceback
from types import FrameType

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopFlag:
    """Set by the signal handler, polled by the main loop: a plain attribute, no lock. A handler runs between
    any two bytecodes of the main thread, also inside another handler: threading.Event.set takes a lock, and a
    second signal arriving while the first handler held it deadlocked the process for good (3000 alternating
    SIGINT/SIGTERM: 10 hangs in 20; one in CI during the imports)."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


_STOP = StopFlag()  # a SIGINT or SIGTERM came: the process ends (in order)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _STOP.set()


def install_signal_handlers() -> StopFlag:
    """SIGINT and SIGTERM set the returned event (idempotent: every later signal too, nothing else)."""
    for signum in _SIGNALS:
        if signal.getsignal(signum) is not _on_signal:
            signal.signal(signum, _on_signal)
    return _STOP


def _started_as_node() -> bool:
    """Whether this interpreter was started to run the node (reasoner_node, ros2 run, launch, python -m),
    not a process that imports the package (tests, the bag tools), whose handlers are its own."""
    argv = getattr(sys, "orig_argv", sys.argv)
    as_module = any(pair == ("-m", "cosmos_reasoner_ros.node") for pair in itertools.pairwise(argv))
    return as_module or any(arg.rsplit("/", 1)[-1] == "reasoner_node" for arg in argv[:3])


if _started_as_node():
    install_signal_handlers()

import argparse  # noqa: E402 (after the handlers: see the module's docstring)

import rclpy  # noqa: E402
from rclpy.exceptions import InvalidHandle  # noqa: E402
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor  # noqa: E402
from rclpy.signals import SignalHandlerOptions  # noqa: E402
from rclpy.utilities import ok, remove_ros_args, try_shutdown  # noqa: E402

from cosmos_reasoner_ros.node.diagnostics import ProblemLog  # noqa: E402
from cosmos_reasoner_ros.node.malloc_tuning import tune_malloc  # noqa: E402
from cosmos_reasoner_ros.node.parameters import ConfigError  # noqa: E402
from cosmos_reasoner_ros.node.reasoner_node import ReasonerNode  # noqa: E402
from cosmos_reasoner_ros.node.service_replies import (  # noqa: E402
    AnswerCount,
    failure_place,
    failure_summary,
)

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


def destroyed_while_gathered(exc: BaseException) -> bool:
    """Whether `exc` is rclpy's InvalidHandle raised while the executor gathered its next wait set: a
    subscription or timer that a lifecycle transition on another thread destroyed meanwhile (the rclpy of
    Jazzy 7.1.6 and Kilted 9.1.2 adds a handler it could not lock, ros2/rclpy#1284). The next spin gathers
    without it, so it is no callback's failure. The same error raised anywhere else (a callback using what
    was destroyed) is one."""
    if not isinstance(exc, InvalidHandle):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return any(frame.name == "_wait_for_ready_callbacks" for frame in frames)


class Spinner:
    """The executor's spin, immune to what a callback raises: rclpy re-raises a callback's exception from
    the next spin_once, and one escaping it ended the process (exit 1, with a traceback). It is logged, once
    per kind and place in a while, and the node keeps spinning; only the ROS context's end stops it."""

    def __init__(
        self,
        executor: MultiThreadedExecutor,
        log: ProblemLog,
        start_wait_s: float = 0.005,
        race_log: ProblemLog | None = None,
    ) -> None:
        self._executor, self._log = executor, log
        self._race_log = race_log or log
        self._start_wait_s = start_wait_s

    def spin_once(self, timeout_s: float) -> None:
        try:
            self._executor.spin_once(timeout_sec=timeout_s)
        except (KeyboardInterrupt, ExternalShutdownException):
            raise
        except Exception as exc:
            if destroyed_while_gathered(exc):
                self._race_log.report(
                    "rclpy:wait set",
                    "an entity destroyed by a transition was in the executor's next wait set (rclpy's race, "
                    f"ros2/rclpy#1284, fixed upstream by #1590: {failure_summary(exc)}); nothing was lost",
                )
            else:
                self._log.report(
                    failure_place(exc), f"a callback failed ({failure_summary(exc)}); the node keeps running"
                )
        self._let_handlers_start()

    def _let_handlers_start(self) -> None:
        """Sleep (the GIL released) until the handlers the executor handed to its threads have started, at
        most start_wait_s. rclpy's MultiThreadedExecutor yields a handler it handed over and not yet started
        again on its next spin, without waiting, and hands it over again: until a pool thread started it, the
        main thread rebuilt its wait set in a loop, holding the GIL that thread needed to start (issue 40:
        some 7,000 wait sets a second for 45 camera messages, half of the node's CPU)."""
        end = 0.0
        while self._unstarted():
            now = time.monotonic()
            if not end:
                end = now + self._start_wait_s
            elif now >= end:
                return
            time.sleep(0.0002)

    def _unstarted(self) -> bool:
        """Whether a handler the executor holds was handed over and has not started (rclpy's own records;
        False where they are not what this expects: the executor then spins as it always did)."""
        try:
            tasks = list(getattr(self._executor, "_tasks", ()))
            for task, _entity, _node in tasks:
                if task.done() or task.cancelled() or task.executing():
                    continue
                handler = getattr(task, "_handler", None)
                if inspect.iscoroutine(handler) and inspect.getcoroutinestate(handler) != "CORO_CREATED":
                    continue  # a coroutine waiting on something: the executor resumes it when it spins
                return True
        except Exception:
            return False
        return False


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


def ignore_signals_for_good() -> None:
    """SIGINT and SIGTERM ignored from now until the process ends. CPython's end puts back the default action
    of a signal with a Python handler: a SIGTERM then killed the process (30 SIGTERMs 20 ms apart: exit code
    -15 every time, where one gives the documented 0); one it ignores stays ignored. The kernel ignores them
    first, and only then the interpreter's record follows (signal.signal runs what is pending first): a
    signal arriving in between would otherwise find SIG_IGN as its handler, the race condition above."""
    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
    for signum in _SIGNALS:
        libc.signal(int(signum), int(signal.SIG_IGN))
    time.sleep(0.001)  # a handler already running in another thread sets its flag before the next look
    for signum in _SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def main(args: list[str] | None = None) -> int:
    """The process: exit code 0 after a signal or the ROS context's end, 2 for a bad configuration."""
    # The first SIGINT or SIGTERM starts the ordered shutdown (bounded by shutdown_timeout_s); later ones
    # change nothing. rclpy's own handler would shut the context down at once, and results of requests in
    # flight could no longer be published.
    stop = install_signal_handlers()
    try:
        return _run(args, stop)
    finally:
        ignore_signals_for_good()


def _run(args: list[str] | None, stop: StopFlag) -> int:
    # Arguments outside --ros-args are the node's own: only --help exists (anything else is an error, exit 2).
    usage().parse_args(remove_ros_args(args=sys.argv if args is None else args)[1:])
    if stop.is_set():  # a signal during the imports: nothing started, nothing to stop
        return 0
    tune_malloc()  # before any thread exists: frames must not fragment the heap (see malloc_tuning)
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    try:
        try:
            node = ReasonerNode()
        except ConfigError as exc:
            rclpy.logging.get_logger("reasoner_node").fatal(str(exc))
            return 2
        executor = MultiThreadedExecutor(num_threads=node.executor_threads)
        executor.add_node(node)
        logger = node.get_logger()
        spinner = Spinner(executor, ProblemLog(logger.error), race_log=ProblemLog(logger.info))
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
