"""Stand-ins for Nav2's servers, in Python, for the handoff's tests: the controller server's FollowPath, the
navigator's NavigateToPose and the planner server's IsPathValid, built on the nav2_msgs that ./run builds from
../shared/nav2-interfaces. Each records what it receives and answers as Nav2 does:

- a goal with an empty path, or naming a controller the server does not have, is aborted with INVALID_PATH or
  INVALID_CONTROLLER (as nav2_controller's controller_server does before following);
- a new goal preempts the one in flight, which ends aborted with an empty result (error_code 0: nav2_util's
  SimpleActionServer.accept_pending_goal);
- a cancel ends the goal canceled; otherwise it ends as scripted: succeeded, aborted with an error code and
  message, or not at all (`hang`, until cancelled or preempted), after `duration_s` of feedback;
- a server that is not active rejects goals; an absent one is simply not created;
- IsPathValid answers valid, or invalid with pose indices, after a delay (a silent planner: longer than the
  caller waits);
- a controller server whose goal responses, cancel answers or results are withheld (WithheldResponses: the
  answer lost, as Fast DDS dropped one in CI, or late) while its status topic still tells each goal's end,
  built of the action's own services and topics, recording every goal id sent and every cancel asked by goal
  id (an rclpy ActionServer answers a cancel of a goal it does not know without telling its callback).

In a test: `with nav2_standins(...) as nav2:` (a node of its own, in this process, on its own executor), or
as a process: `python -m support.nav2_standins --follow-path /follow_path` (launch tests).
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import rclpy
from rclpy.action.server import ActionServer, CancelResponse, GoalResponse, ServerGoalHandle
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.context import Context
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_action_status_default

from support.processes import wait_until

try:  # built by ./run from ../shared/nav2-interfaces; absent elsewhere
    from nav2_msgs.action import FollowPath, NavigateToPose
    from nav2_msgs.srv import IsPathValid
except ImportError:  # pragma: no cover - the callers skip first (missing_reason)
    FollowPath = NavigateToPose = IsPathValid = None

INVALID_CONTROLLER, INVALID_PATH = 101, 103  # FollowPath's result codes
LATCHED = QoSProfile(
    depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


def missing_reason() -> str | None:
    """Why the handoff's ROS tests cannot run here, or None."""
    if FollowPath is None:
        return (
            "needs nav2_msgs, which has no wheels: ./run builds it from ../shared/nav2-interfaces/<distro> "
            "(absent beside this checkout; COSMOS_REASONER_SHARED names it elsewhere)"
        )
    return None


@dataclass
class Script:
    """How the next goals end: outcome "succeed", "abort" (with error_code, error_msg), "hang" (until
    cancelled or preempted), or "reject" (the server is not active)."""

    outcome: str = "succeed"
    duration_s: float = 0.3
    error_code: int = 0
    error_msg: str = ""
    speed: float = 0.25  # [m/s] in the feedback


@dataclass
class Received:
    goal: Any
    at: float  # time.monotonic()
    status: str = ""  # how it ended: succeeded, aborted, canceled, preempted, rejected


@dataclass
class _Current:
    handle: ServerGoalHandle
    preempted: threading.Event = field(default_factory=threading.Event)


class StandInNavigation:
    """One stand-in server of an action (FollowPath or NavigateToPose)."""

    def __init__(
        self, node: Node, action_type: Any, name: str, controllers: tuple[str, ...] = ("FollowPath",)
    ):
        self.action_type, self.name, self.controllers = action_type, name, controllers
        self.script = Script()
        self.received: list[Received] = []
        self.cancels = 0
        self._lock = threading.Lock()
        self._current: _Current | None = None
        group = ReentrantCallbackGroup()
        self.server = ActionServer(
            node,
            action_type,
            name,
            execute_callback=self._execute,
            goal_callback=self._on_goal,
            cancel_callback=self._on_cancel,
            handle_accepted_callback=self._on_accepted,
            callback_group=group,
        )

    def _on_goal(self, goal: Any) -> GoalResponse:
        with self._lock:
            self.received.append(Received(goal, time.monotonic()))
            if self.script.outcome == "reject":
                self.received[-1].status = "rejected"
                return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _on_cancel(self, _handle: ServerGoalHandle) -> CancelResponse:
        with self._lock:
            self.cancels += 1
        return CancelResponse.ACCEPT

    def _on_accepted(self, handle: ServerGoalHandle) -> None:
        with self._lock:
            previous, self._current = self._current, _Current(handle)
        if previous is not None:
            previous.preempted.set()  # it ends aborted with an empty result, as Nav2's does
        handle.execute()

    def _record(self, goal: Any, status: str) -> None:
        with self._lock:
            for item in reversed(self.received):
                if item.goal is goal and not item.status:
                    item.status = status
                    return

    def _execute(self, handle: ServerGoalHandle) -> Any:
        with self._lock:
            current = self._current if self._current and self._current.handle is handle else _Current(handle)
            script = dataclasses.replace(self.script)
        goal, result = handle.request, self.action_type.Result()
        if self.action_type is FollowPath:
            if not goal.path.poses:
                return self._end(handle, goal, "aborted", INVALID_PATH, "Path is empty.")
            if goal.controller_id and goal.controller_id not in self.controllers:
                why = f"FollowPath called with controller name {goal.controller_id}, which does not exist."
                return self._end(handle, goal, "aborted", INVALID_CONTROLLER, why)
        started = time.monotonic()
        while True:
            if current.preempted.is_set():
                return self._end(handle, goal, "preempted", 0, "")
            if handle.is_cancel_requested:
                handle.canceled()
                self._record(goal, "canceled")
                return result
            elapsed = time.monotonic() - started
            if script.outcome != "hang" and elapsed >= script.duration_s:
                break
            if elapsed > 120.0:  # never outlive a test
                break
            feedback = self.action_type.Feedback()
            remaining = max(0.0, script.duration_s - elapsed) * script.speed
            if hasattr(feedback, "distance_to_goal"):
                feedback.distance_to_goal, feedback.speed = float(remaining), float(script.speed)
            else:
                feedback.distance_remaining = float(remaining)
            handle.publish_feedback(feedback)
            time.sleep(0.05)
        if script.outcome == "succeed":
            handle.succeed()
            self._record(goal, "succeeded")
            return result
        return self._end(handle, goal, "aborted", script.error_code, script.error_msg)

    def _end(self, handle: ServerGoalHandle, goal: Any, status: str, code: int, message: str) -> Any:
        result = self.action_type.Result()
        result.error_code, result.error_msg = code, message
        handle.abort()
        self._record(goal, status)
        return result

    def destroy(self) -> None:
        self.server.destroy()


class StandInPlanner:
    """The planner server's IsPathValid: valid (or invalid with pose indices) after a delay."""

    def __init__(self, node: Node, name: str = "/is_path_valid") -> None:
        self.valid = True
        self.invalid_indices: list[int] = []
        self.delay_s = 0.0
        self.requests: list[Any] = []
        self.service = node.create_service(
            IsPathValid, name, self._on_request, callback_group=ReentrantCallbackGroup()
        )

    def _on_request(self, request: Any, response: Any) -> Any:
        self.requests.append(request)
        time.sleep(self.delay_s)
        response.is_valid = self.valid
        response.invalid_pose_indices = list(self.invalid_indices)
        return response


class WithheldResponses:
    """A FollowPath server on the graph (its send_goal, cancel_goal and get_result services, its feedback and
    status topics, as rclpy's ActionClient.server_is_ready looks for them) that withholds, of each goal, the
    answers named in `withhold` (the answer lost, as Fast DDS dropped one in CI, or late) and gives the others
    at once: "goal" its response (never, `respond_after_s` None: lost; or for respond_after_s, then
    accepted), "cancel" the answer to a cancel, "result" its result. A goal it accepted runs until a cancel
    names it (then canceled) or for `run_s` (then succeeded; None: until cancelled), and its status is
    published on the status topic as an rclpy ActionServer publishes it (executing, then its end), whatever
    is withheld."""

    def __init__(
        self,
        node: Node,
        name: str,
        respond_after_s: float | None = None,
        withhold: tuple[str, ...] = ("goal",),
        run_s: float | None = None,
    ) -> None:
        from action_msgs.msg import GoalStatusArray
        from action_msgs.srv import CancelGoal

        self.respond_after_s, self.withhold, self.run_s = respond_after_s, withhold, run_s
        self.goal_ids: list[bytes] = []  # of each goal request, in order
        self.responded: list[bytes] = []  # the goals answered (accepted)
        self.cancel_ids: list[bytes] = []  # of each cancel request, in order
        self.ended_at: dict[bytes, float] = {}  # goal id -> time.time() its end was published on the status
        self._statuses: dict[bytes, int] = {}  # goal id -> its GoalStatus status, in the order accepted
        self._ended: dict[bytes, threading.Event] = {}
        self._closing = threading.Event()
        self._lock = threading.Lock()
        group, impl = ReentrantCallbackGroup(), FollowPath.Impl
        prefix = f"{name}/_action/"
        self._services = [
            node.create_service(
                impl.SendGoalService, prefix + "send_goal", self._on_goal, callback_group=group
            ),
            node.create_service(CancelGoal, prefix + "cancel_goal", self._on_cancel, callback_group=group),
            node.create_service(
                impl.GetResultService, prefix + "get_result", self._on_result, callback_group=group
            ),
        ]
        self._status_pub = node.create_publisher(
            GoalStatusArray, prefix + "status", qos_profile_action_status_default
        )
        self._publishers = [
            node.create_publisher(impl.FeedbackMessage, prefix + "feedback", 10),
            self._status_pub,
        ]
        self._node = node

    def _on_goal(self, request: Any, response: Any) -> Any:
        from action_msgs.msg import GoalStatus

        goal_id = bytes(request.goal_id.uuid)
        with self._lock:
            self.goal_ids.append(goal_id)
            self._ended[goal_id] = threading.Event()
        if "goal" in self.withhold:
            self._closing.wait(self.respond_after_s)  # None: until the test ends (the response lost)
        response.accepted = not self._closing.is_set()
        if response.accepted:
            with self._lock:
                self.responded.append(goal_id)
                self._statuses[goal_id] = GoalStatus.STATUS_EXECUTING
            self._publish_status()
            if self.run_s is not None:
                timer = threading.Timer(self.run_s, self._end, (goal_id, GoalStatus.STATUS_SUCCEEDED))
                timer.daemon = True
                timer.start()
        return response

    def _end(self, goal_id: bytes, status: int) -> None:
        """The goal ends (once): its status published, its result (unless withheld) given."""
        with self._lock:
            if goal_id in self.ended_at:
                return
            self._statuses[goal_id] = status
            self.ended_at[goal_id] = time.time()
        self._publish_status()
        self._ended[goal_id].set()

    def _publish_status(self) -> None:
        from action_msgs.msg import GoalInfo, GoalStatus, GoalStatusArray
        from unique_identifier_msgs.msg import UUID

        stamp = self._node.get_clock().now().to_msg()
        with self._lock:
            statuses = list(self._statuses.items())
        message = GoalStatusArray()
        message.status_list = [
            GoalStatus(goal_info=GoalInfo(goal_id=UUID(uuid=list(goal_id)), stamp=stamp), status=status)
            for goal_id, status in statuses
        ]
        if not self._closing.is_set():
            self._status_pub.publish(message)

    def _on_cancel(self, request: Any, response: Any) -> Any:
        from action_msgs.msg import GoalStatus

        goal_id = bytes(request.goal_info.goal_id.uuid)
        with self._lock:
            self.cancel_ids.append(goal_id)
            accepted = goal_id in self.responded
        if accepted:
            response.goals_canceling = [request.goal_info]
            self._end(goal_id, GoalStatus.STATUS_CANCELED)
        else:
            response.return_code = response.ERROR_UNKNOWN_GOAL_ID
        if "cancel" in self.withhold:
            self._closing.wait()  # the answer lost
        return response

    def _on_result(self, request: Any, response: Any) -> Any:
        from action_msgs.msg import GoalStatus

        goal_id = bytes(request.goal_id.uuid)
        with self._lock:
            ended = self._ended.get(goal_id)
        if ended is not None:
            ended.wait(120.0)
        if "result" in self.withhold:
            self._closing.wait()  # the result lost
        with self._lock:
            response.status = self._statuses.get(goal_id, GoalStatus.STATUS_CANCELED)
        return response

    def destroy(self) -> None:
        self._closing.set()
        for event in list(self._ended.values()):
            event.set()
        for service in self._services:
            self._node.destroy_service(service)
        for publisher in self._publishers:
            self._node.destroy_publisher(publisher)


class Nav2StandIns:
    """A node holding the stand-ins asked for, spun on its own executor thread in a context of its own."""

    def __init__(
        self,
        follow_path: str = "",
        navigate_to_pose: str = "",
        is_path_valid: str = "",
        withheld: str = "",
        respond_after_s: float | None = None,
        withhold: tuple[str, ...] = ("goal",),
        run_s: float | None = None,
    ) -> None:
        """`withheld`: a FollowPath server of that name whose answers named in `withhold` are withheld
        (WithheldResponses)."""
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("nav2_standins", context=self.context)
        self.controller = StandInNavigation(self.node, FollowPath, follow_path) if follow_path else None
        self.navigator = (
            StandInNavigation(self.node, NavigateToPose, navigate_to_pose) if navigate_to_pose else None
        )
        self.planner = StandInPlanner(self.node, is_path_valid) if is_path_valid else None
        self.withheld = (
            WithheldResponses(self.node, withheld, respond_after_s, withhold, run_s) if withheld else None
        )
        # Threads to spare for the answers a WithheldResponses holds back (each blocks one until close).
        self.executor = MultiThreadedExecutor(num_threads=8, context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def goals(self, timeout_s: float = 30.0, count: int = 1) -> list[Received]:
        """The goals received, once at least `count` have come."""
        server = self.controller or self.navigator
        assert server is not None
        wait_until(lambda: len(server.received) >= count, timeout_s, f"{count} goal(s) at the stand-in")
        return list(server.received)

    def close(self) -> None:
        for part in (self.controller, self.navigator, self.withheld):
            if part is not None:
                part.destroy()
        self.node.destroy_node()
        self.executor.shutdown()
        rclpy.shutdown(context=self.context)
        self.thread.join(10)


@contextmanager
def nav2_standins(
    follow_path: str = "",
    navigate_to_pose: str = "",
    is_path_valid: str = "",
    withheld: str = "",
    respond_after_s: float | None = None,
    withhold: tuple[str, ...] = ("goal",),
    run_s: float | None = None,
) -> Iterator[Nav2StandIns]:
    standins = Nav2StandIns(
        follow_path, navigate_to_pose, is_path_valid, withheld, respond_after_s, withhold, run_s
    )
    try:
        yield standins
    finally:
        standins.close()


def main() -> int:
    """The stand-ins as a process (launch tests): until SIGINT or SIGTERM. Each goal received is republished
    on /nav2_standin/received (its path, for the test to compare with what the handoff sent)."""
    parser = argparse.ArgumentParser(description="stand-in Nav2 servers for the handoff's tests")
    parser.add_argument("--follow-path", default="/follow_path")
    parser.add_argument("--is-path-valid", default="")
    parser.add_argument("--outcome", default="succeed", choices=["succeed", "abort", "hang", "reject"])
    parser.add_argument("--duration", type=float, default=0.5)
    parser.add_argument("--error-code", type=int, default=0)
    args = parser.parse_args()
    if missing_reason():
        print(missing_reason(), file=sys.stderr)
        return 2
    from nav_msgs.msg import Path

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    standins = Nav2StandIns(args.follow_path, "", args.is_path_valid)
    assert standins.controller is not None
    standins.controller.script = Script(
        args.outcome, args.duration, args.error_code, "scripted" if args.error_code else ""
    )
    echo = standins.node.create_publisher(Path, "/nav2_standin/received", LATCHED)  # late joiners get it too
    seen = 0
    try:
        while not stop.is_set():
            received = standins.controller.received
            while seen < len(received):
                echo.publish(received[seen].goal.path)
                seen += 1
            time.sleep(0.05)  # not stop.wait(): a signal handler's set() would wait for the lock wait() holds
    finally:
        standins.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
