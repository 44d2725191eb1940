"""reasoner_node's ROS interfaces: the services and the Reason action (for the node's life), the subscriptions
and timers (while active), what their callbacks do (decimate and buffer, or enqueue), and the /diagnostics it
publishes. A part of ReasonerNode (reasoner_node.py), which owns the state these read."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.clock import Clock
from rclpy.clock_type import ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import String
from std_srvs.srv import Trigger

from cosmos_reasoner_ros.node.diagnostics import (
    LastRequest,
    ProblemLog,
    StatusReport,
    namesake_status,
    node_status,
)
from cosmos_reasoner_ros.node.intake import instruction_from_cdr
from cosmos_reasoner_ros.node.lifecycle_services import LifecycleServices
from cosmos_reasoner_ros.node.rclpy_compat import with_message_info
from cosmos_reasoner_ros.node.reason_action import ReasonActionServer
from cosmos_reasoner_ros.node.ros_conversion import diagnostic_array, diagnostic_status, result_msg
from cosmos_reasoner_ros.node.service_replies import always_answer

if TYPE_CHECKING:
    from cosmos_reasoner_ros.clips import ClipBuffer
    from cosmos_reasoner_ros.node.configured import Configured
    from cosmos_reasoner_ros.node.core import Core
    from cosmos_reasoner_ros.node.handoff import HandoffEdge
    from cosmos_reasoner_ros.node.health import HealthMonitor
    from cosmos_reasoner_ros.node.ingest import CameraIngest
    from cosmos_reasoner_ros.node.intake import RequestIntake
    from cosmos_reasoner_ros.node.outputs import ResultOutputs
    from cosmos_reasoner_ros.node.parameters import NodeConfig
    from cosmos_reasoner_ros.node.request_gate import RequestGate
    from cosmos_reasoner_ros.node.service_replies import AnswerCount
    from cosmos_reasoner_ros.requests import Outcome, RequestScheduler

__all__ = ["NodeInterfaces", "shorten"]


def shorten(text: str, limit: int = 80) -> str:
    """Text for a log line: at most `limit` characters, with the full length when cut."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


class NodeInterfaces(Node):
    """The interfaces' half of ReasonerNode: creating them, and their callbacks."""

    if TYPE_CHECKING:  # ReasonerNode's, set in its __init__ and configure
        _gate: RequestGate
        _action: ReasonActionServer | None
        _inputs: list[Any]
        _configured: Configured | None
        _state_machine: Any
        answered: AnswerCount
        config: NodeConfig
        handoff: HandoffEdge | None

        @property
        def state(self) -> Configured: ...
        @property
        def core(self) -> Core: ...
        @property
        def buffers(self) -> dict[str, ClipBuffer]: ...
        @property
        def intake(self) -> RequestIntake: ...
        @property
        def ingest(self) -> dict[str, CameraIngest]: ...
        @property
        def outputs(self) -> ResultOutputs: ...
        @property
        def scheduler(self) -> RequestScheduler: ...
        def _frame_id(self, outcome: Outcome) -> str: ...
        def _health_monitor(self) -> HealthMonitor: ...

    def _node_logger(self) -> Any:
        return Node.get_logger(self)  # (rclpy's get_logger is unannotated: typed calls go through here)

    def _create_request_interfaces(self, cfg: NodeConfig) -> None:
        """`~/trigger` and `~/reason`, for the node's life: a request sent in any state, or queued when a
        transition comes, gets its answer (refused with the reason while the node is not active). Before, the
        service went away at deactivate with the calls queued in it: 196 of 200 triggers sent 20 ms before a
        deactivate never got a reply. A managed node's lifecycle services; every service answers every
        request, also one whose callback fails."""
        # Requests arrive in bursts (many clients at once): the queues must hold a burst, or DDS drops calls
        # that then never get a reply; the result queue holds the burst of their results.
        self._requests_qos = QoSProfile(depth=cfg.request_queue_depth, reliability=ReliabilityPolicy.RELIABLE)
        self._requests_group = ReentrantCallbackGroup()
        self.create_service(
            Trigger,
            "~/trigger",
            self._on_trigger,
            qos_profile=self._requests_qos,
            callback_group=self._requests_group,
        )
        self._action = ReasonActionServer(
            self,
            lambda tasks, settings: self.intake.new_group(tasks, settings),
            lambda group, progress, done: self.intake.submit(group, progress, done)[0],
            lambda job: self.scheduler.cancel(job),
            lambda outcome: result_msg(outcome, self._frame_id(outcome)),
            cfg.feedback_rate_hz,
            self._requests_qos,
            self._requests_group,
            accepting=self._accepting_goals,
        )
        if cfg.lifecycle:
            LifecycleServices(
                self,
                self._requests_qos,
                lambda: "the process is shutting down" if self._gate.stopping else "",
                self._node_logger().warning,
            )
        failures = ProblemLog(self._node_logger().error)
        for service in self.services:  # the lifecycle and parameter services too
            always_answer(service, failures.report, self.answered)

    def _accepting_goals(self) -> bool:
        """Asked once per goal: accepted only while active."""
        self.answered.add()
        return self._gate.open

    def _create_inputs(self, cfg: NodeConfig) -> None:
        trigger_group, timer_group = self._requests_group, MutuallyExclusiveCallbackGroup()
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        requests = self._requests_qos
        image_qos = qos_profile_sensor_data if cfg.image_qos == "sensor_data" else reliable
        subscriptions: list[tuple[Any, str, Callable[[Any], None], QoSProfile, Any]] = []
        for cam in cfg.cameras:
            group = MutuallyExclusiveCallbackGroup()  # one camera's callbacks stay ordered
            msg_type = CompressedImage if cam.compressed else Image
            subscriptions.append((msg_type, cam.topic, self._on_image(cam.name), image_qos, group))
            if cam.depth_topic:
                depth, info = self.outputs.depth_callback(cam.name), self.outputs.info_callback(cam.name)
                subscriptions.append((Image, cam.depth_topic, depth, image_qos, group))
                subscriptions.append((CameraInfo, cam.camera_info_topic, info, reliable, group))
        for msg_type, topic, callback, qos, group in subscriptions:
            self._inputs.append(
                self.create_subscription(msg_type, topic, callback, qos, callback_group=group)
            )
        # Raw: rclpy would hand the string over cut at a NUL, and the cut instruction would run.
        self._inputs.append(
            self.create_subscription(
                String,
                "~/instruction",
                self._on_instruction,
                requests,
                callback_group=trigger_group,
                raw=True,
            )
        )
        # Diagnostics tick on the steady clock: with use_sim_time a replay's /clock stands still while the
        # player waits for answers (lock-step), and a timer on the node's clock would stop with it. The
        # periodic trigger stays on the node's clock (bag time in a replay).
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._inputs.append(
            self.create_timer(cfg.diagnostics_period_s, self._publish_diagnostics, timer_group, clock=steady)
        )
        if cfg.trigger_period_s > 0:
            self._inputs.append(
                self.create_timer(cfg.trigger_period_s, self._on_timer, callback_group=timer_group)
            )

    # ------------------------------------------------------------------------------------------ inputs

    def _on_image(self, camera: str) -> Callable[..., None]:
        ingest = self.ingest[camera]

        def on_image(msg: Any, sequence: int | None) -> None:  # sequence: frames lost before are counted
            ingest(msg, self.get_clock().now().nanoseconds, sequence)

        return with_message_info(on_image)

    def _on_instruction(self, raw: bytes) -> None:
        text, problem = instruction_from_cdr(raw)
        problem = self.intake.set_instruction(text, problem)
        if problem:
            self._node_logger().warning(f"instruction refused ({problem}): {shorten(text)}")
        else:
            self._node_logger().info(f"instruction set: {shorten(text)}")

    # ---------------------------------------------------------------------------------------- triggers

    def _not_taking_requests(self, gate_open: bool) -> str:
        """Why a trigger makes no request now ("" when it does). While active it does, also once a shutdown
        signal came (the state is still active): the scheduler refuses it with its one `cancelled` result.
        In every other state (a lifecycle shutdown included) no request exists: no id, no result to wait
        for."""
        state = self._state_machine.current_state[1]
        if gate_open or (self._gate.stopping and state == "active" and self._configured is not None):
            return ""
        return f"the node is not active (lifecycle state {state}): activate it first"

    def _on_trigger(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self._gate.taking() as gate_open:
            refusal = self._not_taking_requests(gate_open)
            if refusal:
                response.success, response.message = False, f"rejected: {refusal}"
                return response
            job, refused = self.intake.submit(self.intake.trigger_group())
        response.success = not refused
        # The request ids first (one per task, space-separated), so a caller can match each ~/result; a
        # refusal says why after them.
        response.message = " ".join(s.request_id for s in job.specs) + (
            f" rejected: {refused}" if refused else ""
        )
        return response

    def _on_timer(self) -> None:
        with self._gate.taking() as gate_open:
            if gate_open:  # a tick racing deactivate makes no request the scheduler would never see
                self.intake.submit(self.intake.trigger_group())

    # ------------------------------------------------------------------------------------- diagnostics

    def status_reports(self) -> list[StatusReport]:
        state = self.state
        with state.lock:
            last = LastRequest(**vars(state.last))
        reports = node_status(
            self.config,
            self._health_monitor(),
            self.scheduler,
            last,
            {name: (ingest.stats, self.buffers[name].stats()) for name, ingest in self.ingest.items()},
            {
                "depth_points_dropped": self.outputs.points_dropped,
                "frames_pre_encoded": self.core.pre_encoder.encoded if self.core.pre_encoder else 0,
                "frames_pre_encode_skipped": self.core.pre_encoder.skipped if self.core.pre_encoder else 0,
                "frames_encoded_kept": self.core.writer.cached_frames,
            },
        )
        if self.handoff is not None:
            reports.append(self.handoff.status_report())
        name = self.get_fully_qualified_name()
        namesake = namesake_status(
            name, self.count_services(f"{name}/trigger"), str(self.context.get_domain_id())
        )
        if namesake is not None:
            reports.append(namesake)
            state.problems.report("namesake", namesake.message)
        return reports

    def diagnostics(self) -> DiagnosticArray:
        statuses = [
            diagnostic_status(r.name, r.level, r.message, r.values, r.hardware_id)
            for r in self.status_reports()
        ]
        return diagnostic_array(statuses, self.get_clock().now().nanoseconds)

    def _publish_diagnostics(self) -> None:
        if self._gate.stopping:
            return
        state = self.state
        state.problems.flush()  # warnings held back: their count, once their period ended
        try:
            state.diagnostics_pub.publish(self.diagnostics())
        except Exception as exc:
            state.problems.report(
                f"diagnostics:{type(exc).__name__}", f"could not publish diagnostics: {exc!r}"
            )
