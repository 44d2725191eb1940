"""The Nav2 handoff's ROS edge (handoff.mode not none): the camera's CameraInfo in, each outcome through the
handoff's decisions (handoff/, plain Python), and out: every decision on ~/handoff/decision, the
~/handoff/confirm service, IsPathValid asked of the planner server, the path sent to Nav2 (FollowPath with
controller_id, goal_checker_id, progress_checker_id, or NavigateToPose with the path's last pose), the goal's
feedback (at most 2 Hz per goal) and result (error_code, error_msg) back as decisions and in /diagnostics.

nav2_msgs is imported here only, and only when the handoff talks to Nav2 (follow_path, navigate_to_pose, or
validate_path): a robot without Nav2 runs the node unchanged. After activate a path waits up to
discovery_timeout_s for Nav2 to be discovered; Nav2 still absent then: one warning, and each path is refused
at the server gate until it appears; the node works on. When the node stops (deactivate, cleanup, shutdown,
a signal's shutdown) the goal it sent is cancelled (on_stop cancel) and Nav2's answer awaited, bounded by
server_timeout_s + result_timeout_s. The goals themselves (sent with an id of their own, cancelled by it
when their response is lost, their status fed to the handoff on its tick): node/handoff_goals.py.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock
from rclpy.clock_type import ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo

from cosmos_reasoner_ros.geometry import BasePath, Intrinsics, transform_path
from cosmos_reasoner_ros.handoff import (
    GATE_NAMES,
    STOPPED,
    CancelGoal,
    Handoff,
    HandoffSettings,
    SendGoal,
    Step,
    ValidatePath,
    camera_intrinsics,
    settings_problems,
)
from cosmos_reasoner_ros.msg import HandoffDecision as HandoffDecisionMsg
from cosmos_reasoner_ros.node.diagnostics import ProblemLog, StatusReport
from cosmos_reasoner_ros.node.handoff_goals import GoalClient
from cosmos_reasoner_ros.node.handoff_messages import base_path_msg, decision_msg
from cosmos_reasoner_ros.node.parameters import ConfigError, NodeConfig
from cosmos_reasoner_ros.reasoner import KINDS, TaskCatalog
from cosmos_reasoner_ros.requests import DecisionKind, HandoffDecision, Outcome
from cosmos_reasoner_ros.srv import ConfirmHandoff

__all__ = ["HandoffEdge"]

_TICK_S = 0.1  # [s] the handoff's clock: validations unanswered, proposals unconfirmed, clips incomplete
_KEPT = 200  # decisions kept for inspection (tests, benchmarks)


def _nav2_interfaces() -> tuple[Any, Any, Any] | str:
    """nav2_msgs' FollowPath, NavigateToPose and IsPathValid, or why they cannot be imported."""
    try:
        from nav2_msgs.action import FollowPath, NavigateToPose
        from nav2_msgs.srv import IsPathValid
    except ImportError as exc:
        return (
            f"nav2_msgs is not importable ({exc}): install your distribution's nav2_msgs "
            "(ros-<distro>-nav2-msgs, or COSMOS_REASONER_NAV2=1 rosdep install)"
        )
    return FollowPath, NavigateToPose, IsPathValid


class HandoffEdge:
    """Checked and built at configure (`check`, `create`: None when the handoff is off), destroyed at
    cleanup. `consider` is called on the delivery thread for every outcome before it is published."""

    @staticmethod
    def check(cfg: NodeConfig, settings: HandoffSettings, catalog: TaskCatalog) -> None:
        """ConfigError naming each bad handoff parameter (none when the handoff is off)."""
        points_tasks = [n for n in catalog.names() if KINDS[catalog.spec(n).answer_kind].path]
        found = settings_problems(settings, [c.name for c in cfg.cameras], points_tasks)
        if found:
            raise ConfigError("invalid parameters:\n  " + "\n  ".join(found))

    @classmethod
    def create(
        cls, node: Node, cfg: NodeConfig, settings: HandoffSettings, problems: ProblemLog
    ) -> HandoffEdge | None:
        """The edge of checked settings (check), None when handoff.mode is none."""
        return cls(node, cfg, settings, problems) if settings.enabled else None

    def __init__(self, node: Node, cfg: NodeConfig, settings: HandoffSettings, problems: ProblemLog) -> None:
        self._node, self._settings, self._problems = node, settings, problems
        self.camera = settings.camera or cfg.cameras[0].name
        camera = cfg.camera(self.camera)
        self.camera_info_topic = (
            settings.camera_info_topic or camera.camera_info_topic or f"/{self.camera}/camera_info"
        )
        self._camera_frame = settings.frame_id or camera.frame_id
        self._lock = threading.Lock()
        self._intrinsics: Intrinsics | None = None
        self._info_problem = ""  # why the newest CameraInfo is unusable ("": usable, or none yet)
        self._info_frame = ""
        self.decisions: collections.deque[HandoffDecision] = collections.deque(maxlen=_KEPT)
        group = MutuallyExclusiveCallbackGroup()
        self._nav2_problem = ""
        self._types: tuple[Any, Any, Any] | None = None
        action_type: Any = None  # FollowPath or NavigateToPose
        self._path_valid: Any = None
        if settings.sends or settings.validate_path:
            found = _nav2_interfaces()
            if isinstance(found, str):
                self._nav2_problem = found
                node.get_logger().error(
                    f"handoff: {found}; no path can be sent or validated (the node works on)"
                )
            else:
                self._types = found
                follow_path, navigate_to_pose, is_path_valid = found
                if settings.sends:
                    action_type = follow_path if settings.mode == "follow_path" else navigate_to_pose
                if settings.validate_path:
                    self._path_valid = node.create_client(
                        is_path_valid, settings.is_path_valid_service, callback_group=group
                    )
        self._tf: Any = None  # IsPathValid reads positions in the planner's frame: tf2 moves the path there
        self._tf_listener: Any = None
        self._tf_problem = ""
        if settings.validate_path:
            try:
                import tf2_ros
            except ImportError as exc:
                frame = settings.path_valid_frame
                self._tf_problem = f"tf2_ros is not importable ({exc}): IsPathValid needs the path in {frame}"
                node.get_logger().error(f"handoff: {self._tf_problem}; every path is refused at path_valid")
            else:
                self._tf = tf2_ros.Buffer()
                self._tf_listener = tf2_ros.TransformListener(self._tf, node)
        self.handoff = Handoff(
            settings,
            self._server_problem,
            self.camera,
            path_valid_problem=self._path_valid_problem,
            discoverable=not self._nav2_problem,
        )
        self._goals = (
            None
            if action_type is None
            else GoalClient(node, settings, action_type, group, self.handoff, self._carry_out, self._now)
        )
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        self._publisher = node.create_publisher(HandoffDecisionMsg, "~/handoff/decision", reliable)
        # Best effort matches camera drivers' CameraInfo of either reliability.
        self._info_sub = node.create_subscription(
            CameraInfo, self.camera_info_topic, self._on_info, qos_profile_sensor_data, callback_group=group
        )
        self._confirm = node.create_service(
            ConfirmHandoff, "~/handoff/confirm", self._on_confirm, callback_group=group
        )
        self._started = time.monotonic()
        self._absence_reported = False
        self._path_valid_absence_reported = False
        self._stop_deadline = 0.0  # time.monotonic() until which a goal cancelled at stop is awaited
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._timer = node.create_timer(_TICK_S, self._on_tick, group, clock=steady)
        where = f"{settings.action}" if settings.sends else "nothing (dry run)"
        node.get_logger().info(
            f"handoff: {settings.mode}, answers of {settings.tasks} on camera {self.camera} (CameraInfo "
            f"{self.camera_info_topic}) to {where}"
        )

    def activate(self) -> None:
        """Lifecycle activate: answers are taken, and Nav2 gets discovery_timeout_s to be discovered anew."""
        self.handoff.activate()
        self._started = time.monotonic()
        self._absence_reported = self._path_valid_absence_reported = False

    def stop(self, why: str, wait: bool = True) -> None:
        """The node stops (`why`: deactivate, cleanup, shutdown): nothing more is sent; under on_stop cancel
        the goal it sent is cancelled and (`wait`, else with wait_stopped after other work) its end awaited up
        to server_timeout_s + result_timeout_s from now (an executor thread must spin meanwhile: a
        transition's does, main spins through shutdown), published as a goal event: its result's, or, the
        result lost, its status's."""
        step = self.handoff.stop(self._now(), why)
        self._carry_out(step)
        if any(d.decision == DecisionKind.CANCEL for d in step.decisions):
            self._stop_deadline = time.monotonic() + self._stop_wait_s()
        if wait:
            self.wait_stopped()

    def wait_stopped(self) -> None:
        """Until the goal cancelled at stop has ended (its result, or its status and no result within
        result_timeout_s), at most until server_timeout_s + result_timeout_s after the cancel; a warning when
        Nav2 told no end. Nothing to wait for: returns at once."""
        deadline, self._stop_deadline = self._stop_deadline, 0.0
        if not deadline:
            return
        while self.handoff.goal_in_flight() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.handoff.goal_in_flight():
            self._node.get_logger().warning(
                f"handoff: no end of the cancelled goal from {self._settings.action} (neither its result "
                f"nor its status) within server_timeout_s + result_timeout_s ({self._stop_wait_s():g} s): "
                "the goal may still run (the node stops anyway)"
            )

    def _stop_wait_s(self) -> float:
        """The stop's wait: server_timeout_s for Nav2's end of the cancelled goal, and result_timeout_s more
        for its result once the status told the end (the goal ends from the status if the result is lost)."""
        return self._settings.server_timeout_s + self._settings.result_timeout_s

    def destroy(self) -> None:
        self.stop("cleanup")
        node = self._node
        node.destroy_timer(self._timer)
        node.destroy_service(self._confirm)
        node.destroy_subscription(self._info_sub)
        node.destroy_publisher(self._publisher)
        if self._path_valid is not None:
            node.destroy_client(self._path_valid)
        if self._goals is not None:
            self._goals.destroy()
        unregister = getattr(self._tf_listener, "unregister", None)
        if unregister is not None:
            unregister()

    # -- in ----------------------------------------------------------------------------------------------

    def _now(self) -> int:
        return int(self._node.get_clock().now().nanoseconds)

    def _on_info(self, msg: CameraInfo) -> None:
        """The newest CameraInfo decides: an unusable one (K zero, negative, not finite; no size) makes
        ground-plane paths refused with its reason until a usable one comes."""
        found = camera_intrinsics(list(msg.k), msg.width, msg.height)
        if isinstance(found, str):
            self._problems.report(f"handoff:camera_info:{self.camera}", f"handoff: {found}")
            with self._lock:
                self._info_problem = found
            return
        with self._lock:
            self._intrinsics, self._info_frame, self._info_problem = found, msg.header.frame_id, ""

    def consider(self, outcome: Outcome, now_ns: int, frame_id: str) -> Outcome:
        """The outcome as published at now_ns (the node's clock) with the handoff's first decision about it
        (unchanged when the handoff does not take it); that decision and what follows from it are published
        and carried out. `frame_id`: the images' (the path's frame when neither handoff.frame_id, the camera's
        frame_id nor its CameraInfo names one)."""
        if not self.handoff.takes(outcome):
            return outcome
        with self._lock:
            info_frame = self._info_frame
            intrinsics: Intrinsics | str | None = self._info_problem or self._intrinsics
        step = self.handoff.consider(
            outcome, now_ns, intrinsics, self._camera_frame or info_frame or frame_id
        )
        self._carry_out(step)
        first = next((d for d in step.decisions if d.request_id == outcome.request_id), None)
        return outcome.with_handoff(first) if first is not None else outcome  # the handoff stage ends here

    def _on_confirm(
        self, request: ConfirmHandoff.Request, response: ConfirmHandoff.Response
    ) -> ConfirmHandoff.Response:
        step, answered, message = self.handoff.confirm(request.request_id, bool(request.accept), self._now())
        self._carry_out(step)
        response.success = answered
        response.decision = step.decisions[0].decision if step.decisions else ""
        response.message = message
        return response

    def _on_tick(self) -> None:
        if self._goals is not None:
            self._goals.feed_statuses()
        self._carry_out(self.handoff.tick(self._now()))
        self._problems.flush()  # repeats held back are stated with their count once their period ends
        if self.handoff.discovering():
            return
        if self._settings.sends and not self._absence_reported and (problem := self._server_problem()):
            self._absence_reported = True
            self._warn_absent(problem, "the server gate")
        if (
            self._settings.validate_path
            and not self._path_valid_absence_reported
            and (problem := self._path_valid_problem())
        ):
            self._path_valid_absence_reported = True
            self._warn_absent(problem, "path_valid")

    def _warn_absent(self, problem: str, gate: str) -> None:
        """Once per activation: a Nav2 server the handoff needs is still absent after discovery."""
        self._node.get_logger().warning(
            f"handoff: {problem} {self._settings.discovery_timeout_s:g} s after activate; paths are "
            f"refused at {gate} until it is there (the node works on)"
        )

    # -- out ---------------------------------------------------------------------------------------------

    def _server_problem(self) -> str:
        if self._nav2_problem:
            return self._nav2_problem
        if self._goals is None:
            return ""
        if not self._goals.server_is_ready():
            server = "controller server" if self._settings.mode == "follow_path" else "bt_navigator"
            return f"no Nav2 action server on {self._settings.action} (is Nav2's {server} up and active?)"
        return ""

    def _path_valid_problem(self) -> str:
        """Why IsPathValid cannot be asked now ("": its service is discovered)."""
        if self._nav2_problem:
            return self._nav2_problem
        if self._path_valid is None or self._path_valid.service_is_ready():
            return ""
        return f"no IsPathValid service on {self._settings.is_path_valid_service} (Nav2's planner server)"

    def _carry_out(self, step: Step) -> None:
        """Publish the decisions, then the commands: ask IsPathValid, send or cancel a goal. A `cancel` of a
        goal with no response yet is also asked by its goal id at once (the core asks again once the goal is
        accepted): its response may be lost while Nav2 drives."""
        for decision in step.decisions:
            self._publish(decision)
        for decision in step.decisions:
            rid = decision.request_id
            if decision.decision == DecisionKind.CANCEL and self._goals and not self._goals.answered(rid):
                self._carry_out(Step(commands=(CancelGoal(rid),)))
        for command in step.commands:
            try:
                if isinstance(command, ValidatePath):
                    self._validate(command)
                elif isinstance(command, SendGoal):
                    if self._goals is None:
                        raise RuntimeError("no Nav2 action client")
                    self._goals.send(command)
                elif isinstance(command, CancelGoal) and self._goals is not None:
                    self._goals.cancel(command)
            except Exception as exc:  # a failing call must not cost the outcome its result
                self._problems.report(
                    f"handoff:{type(command).__name__}", f"handoff: {command!r} failed: {exc!r}"
                )
                if isinstance(command, ValidatePath):
                    self._carry_out(
                        self.handoff.validated(command.request_id, None, (), repr(exc), self._now())
                    )
                elif isinstance(command, SendGoal):
                    self._carry_out(
                        self.handoff.goal_response(command.request_id, False, self._now(), repr(exc))
                    )

    def _publish(self, decision: HandoffDecision) -> None:
        self.decisions.append(decision)
        kind = decision.decision
        line = f"handoff: request {decision.request_id} {kind}: {decision.reason}"
        if kind in (DecisionKind.REFUSED, DecisionKind.GOAL_REJECTED, DecisionKind.GOAL_FAILED):
            gate = decision.failed_gate
            self._problems.report(f"handoff:{kind}:{gate.name if gate else ''}", line)
        elif kind in (DecisionKind.SENT, DecisionKind.CANCEL, DecisionKind.GOAL_SUCCEEDED):
            self._node.get_logger().info(line)
        try:
            self._publisher.publish(decision_msg(decision))
        except Exception as exc:
            self._problems.report(
                f"handoff:publish:{type(exc).__name__}", f"handoff: could not publish: {exc!r}"
            )

    def _validate(self, command: ValidatePath) -> None:
        client, rid = self._path_valid, command.request_id
        if client is None or self._types is None:
            self._carry_out(
                self.handoff.validated(rid, None, (), self._nav2_problem or "no client", self._now())
            )
            return
        if not client.service_is_ready():
            why = f"no IsPathValid service on {self._settings.is_path_valid_service} (Nav2's planner server)"
            self._carry_out(self.handoff.validated(rid, None, (), why, self._now()))
            return
        try:
            in_frame = self._in_planner_frame(command.path)
        except Exception as exc:  # no transform (yet) at the clip's end, or no tf2 at all
            self._carry_out(self.handoff.validated(rid, None, (), str(exc)[:300], self._now()))
            return
        request = self._types[2].Request()
        request.path = base_path_msg(in_frame)
        if hasattr(request, "max_cost"):  # Kilted and later
            request.max_cost = self._settings.path_valid_max_cost
            request.consider_unknown_as_obstacle = self._settings.path_valid_unknown_is_obstacle

        def done(future: Any) -> None:
            try:
                answer = future.result()
                step = self.handoff.validated(
                    rid,
                    bool(answer.is_valid),
                    tuple(int(i) for i in answer.invalid_pose_indices),
                    "",
                    self._now(),
                )
            except Exception as exc:
                step = self.handoff.validated(rid, None, (), repr(exc), self._now())
            self._carry_out(step)

        client.call_async(request).add_done_callback(done)

    def _in_planner_frame(self, path: BasePath) -> BasePath:
        """The path in handoff.path_valid_frame, where Nav2's IsPathValid reads positions (it transforms
        nothing), through tf2 at the path's stamp; LookupError saying why not."""
        from rclpy.time import Time

        if self._tf is None:
            raise LookupError(self._tf_problem or "no tf2 buffer")
        frame = self._settings.path_valid_frame
        try:
            found = self._tf.lookup_transform(frame, path.frame_id, Time(nanoseconds=path.stamp_ns))
        except Exception as exc:
            raise LookupError(
                f"no transform from {path.frame_id} to {frame} at the clip's end: {exc}"
            ) from None
        t, r = found.transform.translation, found.transform.rotation
        return transform_path(path, (t.x, t.y, t.z), (r.x, r.y, r.z, r.w), frame)

    # -- diagnostics -------------------------------------------------------------------------------------

    def status_report(self) -> StatusReport:
        status = self.handoff.status()
        s = self._settings
        problem = self._server_problem() if s.sends else ""
        with self._lock:
            has_info, info_problem = self._intrinsics is not None, self._info_problem
        last = status.last
        result = status.last_result
        values: dict[str, object] = {
            "mode": s.mode,
            "action": s.action,
            "camera": self.camera,
            "camera_info": info_problem
            or ("received" if has_info else f"none yet on {self.camera_info_topic}"),
            "nav2": problem or ("on the graph" if s.sends else "not used"),
            "goal": status.goal,
            "goal_state": status.goal_state,
            "distance_to_goal": status.distance_to_goal,
            "speed": status.speed,
            "last_decision": last.decision if last else "",
            "last_reason": last.reason if last else "",
            "last_goal_end": result.decision if result else "",
            "last_error_code": result.error_code if result else 0,
            "last_error_msg": result.error_msg if result else "",
        }
        values.update({f"decisions_{kind}": n for kind, n in sorted(status.counts.items())})
        # Every refusal, by the gate that failed (every gate shown, 0 included: a count that stays 0 says so).
        values.update({f"refused_{gate}": status.refused.get(gate, 0) for gate in (*GATE_NAMES, STOPPED)})
        if problem:
            level, message = "warn", problem
        elif last is not None:
            level, message = "ok", f"{last.decision}: {last.reason}"
        else:
            level, message = "ok", "no answer handed off yet"
        return StatusReport("reasoner_node: handoff", level, message[:300], values)
