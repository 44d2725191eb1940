"""`reasoner_node`: camera topics, triggers and the Reason action wired to the request pipeline; results out.

The wiring only: parameters (parameters.py), admission and workers (scheduler.py), the request itself
(pipeline.py), health (health.py) and diagnostics (diagnostics.py) live in their own ROS-free modules. Image
callbacks only decimate, convert and buffer; service, action and timer callbacks only enqueue; every request
ends in exactly one ReasonerResult, published on the scheduler's delivery thread, also at shutdown.
"""

from __future__ import annotations

import collections
import itertools
import math
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import ParameterDescriptor, ParameterType
from rclpy.action.server import ActionServer, CancelResponse, GoalResponse, ServerGoalHandle
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.signals import SignalHandlerOptions
from rclpy.task import Future
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import String
from std_srvs.srv import Trigger

from cosmos_reasoner_ros.action import Reason
from cosmos_reasoner_ros.client import ReasonerClient
from cosmos_reasoner_ros.core import Core
from cosmos_reasoner_ros.diagnostics import (
    CameraStats,
    LastRequest,
    ProblemLog,
    StatusReport,
    camera_status,
    requests_status,
    server_status,
)
from cosmos_reasoner_ros.errors import (
    FrameError,
    FrameTooLarge,
    ImplausibleStamp,
    NonColourImage,
    TaskError,
)
from cosmos_reasoner_ros.health import HealthMonitor
from cosmos_reasoner_ros.image_conversion import Frame, message_stamp_ns, message_to_array
from cosmos_reasoner_ros.outputs import ResultOutputs
from cosmos_reasoner_ros.parameters import (
    CAMERA_PARAMETERS,
    PARAMETERS,
    CameraConfig,
    ConfigError,
    NodeConfig,
)
from cosmos_reasoner_ros.pipeline import STAGES, Outcome, RequestSpec
from cosmos_reasoner_ros.ros_conversion import (
    diagnostic_array,
    diagnostic_status,
    result_msg,
)
from cosmos_reasoner_ros.scheduler import Job, RequestScheduler

__all__ = ["ConfigError", "ReasonerNode", "main"]

_TYPES = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
    list: ParameterType.PARAMETER_STRING_ARRAY,
}


def shorten(text: str, limit: int = 80) -> str:
    """Text for a log line: at most `limit` characters, with the full length when cut."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


class ReasonerNode(Node):
    def __init__(self, node_name: str = "reasoner_node", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        # What destroy_node() touches exists before anything can fail: a half-built node shuts down cleanly.
        self._shutting_down = False
        self._scheduler: RequestScheduler | None = None
        self._health: HealthMonitor | None = None
        self._action: ActionServer[Any, Any, Any] | None = None
        try:
            self.config = cfg = self._declare_and_read()
            self._configure(cfg)
        except Exception:
            self.shutdown()
            super().destroy_node()  # the half-built node must not outlive the failed start
            raise
        self._create_interfaces(cfg)
        self._health_monitor().start()
        self.get_logger().info(
            f"ready: cameras {', '.join(c.name + '<-' + c.topic for c in cfg.cameras)}; "
            f"server {cfg.server_url}; "
            f"task {cfg.task}; timer {cfg.trigger_period_s or 'off'}; media {cfg.media_dir}"
        )

    # ------------------------------------------------------------------------------------- configuration

    def _declare_and_read(self) -> NodeConfig:
        values: dict[str, Any] = {name: self._declare(name, d, doc) for name, (d, doc) in PARAMETERS.items()}
        cameras = []
        for cam in values.pop("cameras"):
            c = {k: self._declare(f"camera.{cam}.{k}", d, doc) for k, (d, doc) in CAMERA_PARAMETERS.items()}
            if not c["topic"]:
                c["topic"] = f"/{cam}/image_raw" + ("/compressed" if c["compressed"] else "")
            cameras.append(CameraConfig(name=cam, **c))
        return NodeConfig(cameras=tuple(cameras), **values)

    def _declare(self, name: str, default: Any, doc: str) -> Any:
        # Floats accept integers too (`clip_seconds: 4` in YAML); every other type is checked by rclpy.
        is_float = isinstance(default, float)
        descriptor = ParameterDescriptor(
            description=doc, type=_TYPES[type(default)], read_only=True, dynamic_typing=is_float
        )
        value = self.declare_parameter(name, default, descriptor).value
        if is_float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"invalid parameters:\n  {name}: must be a number, got {value!r}")
            value = float(value)
        return list(value) if isinstance(default, list) else value

    def _configure(self, cfg: NodeConfig) -> None:
        """Validate everything and build the core; then the node's own bookkeeping and the scheduler."""
        self.core: Core = Core.build(cfg)
        core = self.core
        self.catalog, self.buffers, self.buffer, self.pipeline = (
            core.catalog,
            core.buffers,
            core.buffer,
            core.pipeline,
        )
        if cfg.instruction and not core.catalog.spec(cfg.task).placeholders:
            self.get_logger().warning(
                f"task {cfg.task!r} takes no instruction: the instruction parameter is used only by goals "
                "naming tasks that take one"
            )
        self._problems = ProblemLog(self.get_logger().warning)
        self._lock = threading.Lock()
        self._instruction = cfg.instruction
        self._ids = itertools.count(1)
        self._goal_jobs: dict[bytes, Job] = {}
        self._stats = {c.name: CameraStats() for c in cfg.cameras}
        self._frame_ids = {c.name: c.frame_id for c in cfg.cameras}
        self._last = LastRequest()
        self._last_trigger = -math.inf
        # (outcome without frames, time.monotonic() when its messages were published): request-path timings
        # for benchmarks and tests; bounded, and nothing in it pins frames or inline media.
        self.recent: collections.deque[tuple[Outcome, float]] = collections.deque(maxlen=100)
        self._scheduler = RequestScheduler(
            lambda job: self.pipeline.run(job.spec, on_progress=job.on_progress, cancel=job.cancel),
            self._deliver,
            max_in_flight=cfg.max_in_flight,
            busy_policy=cfg.busy_policy,
            workers=cfg.workers or len(cfg.cameras) * cfg.max_in_flight + 1,
        )

    @property
    def client(self) -> ReasonerClient:
        return self.core.client

    @property
    def scheduler(self) -> RequestScheduler:
        assert self._scheduler is not None
        return self._scheduler

    def _health_monitor(self) -> HealthMonitor:
        if self._health is None:

            def on_change(healthy: bool, error: str) -> None:
                if healthy:
                    model = self._health.model if self._health else ""
                    self.get_logger().info(f"server {self.config.server_url} is healthy (model {model})")
                else:
                    self.get_logger().warning(f"server {self.config.server_url} is not reachable: {error}")

            self._health = HealthMonitor(
                self.client.health,
                self.client.model_id,
                self.config.health_period_s,
                on_change,
                self.config.model,
            )
        return self._health

    # ------------------------------------------------------------------------------------------ interfaces

    def _create_interfaces(self, cfg: NodeConfig) -> None:
        trigger_group = ReentrantCallbackGroup()
        timer_group = MutuallyExclusiveCallbackGroup()
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        # Requests arrive in bursts (many clients at once): the queues must hold a burst, or DDS drops calls
        # that then never get a reply; the result queue holds the burst of their results.
        requests = QoSProfile(depth=cfg.request_queue_depth, reliability=ReliabilityPolicy.RELIABLE)
        self.outputs = ResultOutputs(self, cfg, self._problems, requests)
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)

        image_qos = qos_profile_sensor_data if cfg.image_qos == "sensor_data" else reliable
        for cam in cfg.cameras:
            group = MutuallyExclusiveCallbackGroup()  # one camera's callbacks stay ordered
            msg_type = CompressedImage if cam.compressed else Image
            self.create_subscription(
                msg_type, cam.topic, self._image_callback(cam.name), image_qos, callback_group=group
            )
            if cam.depth_topic:
                self.create_subscription(
                    Image,
                    cam.depth_topic,
                    self.outputs.depth_callback(cam.name),
                    image_qos,
                    callback_group=group,
                )
                self.create_subscription(
                    CameraInfo,
                    cam.camera_info_topic,
                    self.outputs.info_callback(cam.name),
                    reliable,
                    callback_group=group,
                )
        self.create_subscription(
            String, "~/instruction", self._on_instruction, requests, callback_group=trigger_group
        )
        self.create_service(
            Trigger, "~/trigger", self._on_trigger, qos_profile=requests, callback_group=trigger_group
        )
        self._action = ActionServer(
            self,
            Reason,
            "~/reason",
            execute_callback=self._execute_goal,
            goal_callback=lambda _goal: GoalResponse.ACCEPT,  # refusals come as results, with their reason
            cancel_callback=self._cancel_goal,
            callback_group=trigger_group,
            goal_service_qos_profile=requests,
            result_service_qos_profile=requests,
            cancel_service_qos_profile=requests,
        )
        if cfg.trigger_period_s > 0:
            self.create_timer(cfg.trigger_period_s, self._on_timer, callback_group=timer_group)
        self.create_timer(cfg.diagnostics_period_s, self._publish_diagnostics, callback_group=timer_group)

    # ------------------------------------------------------------------------------------------ inputs

    def _image_callback(self, camera: str) -> Callable[[Any], None]:
        buffer, stats, cfg = self.buffers[camera], self._stats[camera], self.config
        frame_id_override, pre_encoder = self._frame_ids[camera], self.core.pre_encoder

        def on_image(msg: Any) -> None:
            stats.received += 1
            stats.last_receive = time.monotonic()
            try:
                now = self.get_clock().now().nanoseconds
                stamp = message_stamp_ns(msg, now, cfg.use_receive_time, max_ahead_s=cfg.max_stamp_ahead_s)
                if not buffer.wants(stamp):  # decimate before paying for decoding
                    stats.skipped += 1
                    return
                # add() resizes or copies: no second copy here.
                image = message_to_array(msg, copy=False, max_pixels=cfg.max_pixels, colour_only=True)
                frame_id = frame_id_override or msg.header.frame_id
                kept = buffer.add(Frame(camera=camera, stamp_ns=stamp, image=image, frame_id=frame_id))
                if kept is None:
                    stats.dropped += 1
                    return
                stats.added += 1
                if pre_encoder is not None and self._pre_encoding():
                    pre_encoder.submit(kept)
                if not self._frame_ids[camera]:
                    self._frame_ids[camera] = frame_id
            except FrameError as exc:
                stats.invalid += 1
                stats.too_large += isinstance(exc, FrameTooLarge)
                stats.bad_stamp += isinstance(exc, ImplausibleStamp)
                stats.not_colour += isinstance(exc, NonColourImage)
                stats.last_error = str(exc)
                # Numbers vary between frames of one problem (sizes, stamps): one key per kind of message.
                key = re.sub(r"\d+", "#", str(exc))
                self._problems.report(f"frame:{camera}:{key}", f"camera {camera}: dropped a frame: {exc}")
            except Exception as exc:  # a bug must not stop the camera stream
                stats.invalid += 1
                stats.last_error = f"{type(exc).__name__}: {exc}"
                self._problems.report(f"frame-bug:{camera}:{type(exc).__name__}", f"camera {camera}: {exc!r}")

        return on_image

    def _on_instruction(self, msg: String) -> None:
        text = msg.data
        problem = self._instruction_problem(text)
        if problem:
            self.get_logger().warning(f"instruction refused ({problem}): {shorten(text)}")
            return
        with self._lock:
            self._instruction = text
        self.get_logger().info(f"instruction set: {shorten(text)}")

    def _instruction_problem(self, text: str) -> str:
        if len(text) > self.config.max_instruction_chars:
            limit = self.config.max_instruction_chars
            return f"{len(text)} characters, more than max_instruction_chars ({limit})"
        if "\x00" in text:
            return "it contains a NUL character"
        return ""

    # ---------------------------------------------------------------------------------------- triggers

    def new_spec(
        self,
        task: str = "",
        instruction: str = "",
        step: str = "",
        cameras: tuple[str, ...] = (),
        clip_seconds: float = 0.0,
    ) -> RequestSpec:
        with self._lock:
            default_instruction = self._instruction
        return RequestSpec(
            request_id=f"{self.get_name()}-{next(self._ids)}-{uuid.uuid4().hex[:8]}",
            task=task or self.config.task,
            instruction=instruction or default_instruction,
            step=step,
            cameras=cameras,
            clip_seconds=clip_seconds,
            trigger_time=time.monotonic(),
        )

    def _spec_problem(self, spec: RequestSpec, explicit_instruction: bool) -> str:
        """Why a request cannot be run as asked (an invalid_request result), or ''."""
        cfg = self.config
        unknown = [c for c in spec.cameras if c not in self.buffers]
        if unknown:
            return f"unknown cameras {unknown}; configured: {', '.join(self.buffers)}"
        if not (math.isfinite(spec.clip_seconds) and 0 <= spec.clip_seconds <= cfg.buffer_seconds):
            return (
                f"clip_seconds must be 0 (the default) or up to buffer_seconds ({cfg.buffer_seconds}), "
                f"got {spec.clip_seconds}"
            )
        if spec.task not in self.catalog:
            return f"unknown task {spec.task!r}; known: {', '.join(self.catalog.names())}"
        for name, text in (("instruction", spec.instruction), ("step", spec.step)):
            problem = self._instruction_problem(text)
            if problem:
                return f"{name}: {problem}"
        if explicit_instruction and spec.instruction and not self.catalog.spec(spec.task).placeholders:
            return (
                f"task {spec.task!r} takes no instruction (tasks that do: assisted_next_action, custom, ...)"
            )
        return ""

    def submit(
        self,
        spec: RequestSpec,
        on_progress: Callable[[str, str], None] | None = None,
        on_done: Callable[[Outcome], None] | None = None,
        cancel: threading.Event | None = None,
        explicit_instruction: bool = False,
    ) -> tuple[Job, str]:
        """Queue one request (never blocks); its outcome is published exactly once. Returns the job and, when
        it was not admitted, the reason."""
        self._last_trigger = time.monotonic()
        group = tuple(sorted(spec.cameras or (c.name for c in self.config.cameras)))
        job = Job(
            spec=spec,
            group=group,
            on_progress=on_progress,
            on_done=on_done,
            cancel=cancel or threading.Event(),
        )
        problem = self._spec_problem(spec, explicit_instruction)
        if problem:
            self.scheduler.fail(job, TaskError(problem))
            return job, problem
        admission = self.scheduler.submit(job)
        return job, admission.reason

    def _pre_encoding(self) -> bool:
        cfg = self.config
        return (
            cfg.pre_encode == "on"
            or cfg.trigger_period_s > 0
            or time.monotonic() - self._last_trigger < cfg.buffer_seconds
        )

    def _on_trigger(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        job, refused = self.submit(self.new_spec())
        response.success = not refused
        # The request id first, so a caller can match the ~/result; a refusal says why after it.
        response.message = job.spec.request_id + (f" rejected: {refused}" if refused else "")
        return response

    def _on_timer(self) -> None:
        self.submit(self.new_spec())

    async def _execute_goal(self, goal_handle: ServerGoalHandle[Any, Any, Any]) -> Any:
        goal = goal_handle.request
        accepted = time.monotonic()
        done: Future[Outcome] = Future(executor=self.executor)
        # A done callback makes set_result (called on the delivery thread) wake the executor, which then
        # resumes this coroutine; without one nothing would wake it.
        done.add_done_callback(lambda _f: None)
        min_gap = 1.0 / self.config.feedback_rate_hz
        last_time, last_stage = 0.0, ""

        def on_progress(stage: str, text: str) -> None:
            nonlocal last_time, last_stage
            now = time.monotonic()
            if stage == last_stage == "streaming" and now - last_time < min_gap:
                return  # throttle streamed text, never stage changes
            last_time, last_stage = now, stage
            feedback = Reason.Feedback(
                stage=STAGES.index(stage), stage_name=stage, partial_text=text, elapsed_s=now - accepted
            )
            goal_handle.publish_feedback(feedback)

        spec = self.new_spec(
            goal.task, goal.instruction, goal.step, tuple(goal.cameras), float(goal.clip_seconds)
        )
        key = bytes(goal_handle.goal_id.uuid)
        cancel = threading.Event()
        job, _ = self.submit(
            spec,
            on_progress=on_progress,
            on_done=done.set_result,
            cancel=cancel,
            explicit_instruction=bool(goal.instruction),
        )
        with self._lock:
            self._goal_jobs[key] = job
        if goal_handle.is_cancel_requested:  # a cancel that came before the job was registered
            self.scheduler.cancel(job)
        try:
            outcome = await done
        finally:
            with self._lock:
                self._goal_jobs.pop(key, None)
        assert outcome is not None
        result = Reason.Result(result=result_msg(outcome, self._frame_id(outcome)))
        if outcome.error_kind == "cancelled" and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif outcome.success:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result

    def _cancel_goal(self, goal_handle: ServerGoalHandle[Any, Any, Any]) -> CancelResponse:
        with self._lock:
            job = self._goal_jobs.get(bytes(goal_handle.goal_id.uuid))
        if job is not None:
            self.scheduler.cancel(job)
        return CancelResponse.ACCEPT

    # ----------------------------------------------------------------------------------------- outputs

    def _frame_id(self, outcome: Outcome) -> str:
        return self._frame_ids.get(outcome.answer_camera, "") if outcome.answer_camera else ""

    def _deliver(self, job: Job, outcome: Outcome) -> None:
        """On the delivery thread, once per job: the result, then the extras of a success."""
        with self._lock:
            if outcome.success:
                self._last.latency_s, self._last.ttft_s = outcome.latency_s, outcome.ttft_s
            else:
                self._last.error, self._last.error_kind = outcome.error, outcome.error_kind
            self._last.stale_cameras = outcome.stale_cameras
        self.outputs.publish(outcome, self._frame_id(outcome))
        if not outcome.success:
            self._problems.report(
                f"request:{outcome.error_kind}",
                f"request {outcome.request_id} failed ({outcome.error_kind}): {shorten(outcome.error, 300)}",
            )
        if outcome.stale_cameras:
            self._problems.report(
                f"stale:{','.join(outcome.stale_cameras)}",
                f"request {outcome.request_id}: left out stale camera(s) "
                + "; ".join(
                    f"{c}: {r}" for c, r in zip(outcome.stale_cameras, outcome.stale_reasons, strict=True)
                ),
            )
        self.recent.append((outcome.without_frames(), time.monotonic()))

    # ------------------------------------------------------------------------------------- diagnostics

    def status_reports(self) -> list[StatusReport]:
        cfg, health, scheduler = self.config, self._health_monitor(), self.scheduler
        pre_encoder = self.core.pre_encoder
        with self._lock:
            last = LastRequest(**vars(self._last))
        reports = [server_status(cfg.server_url, health.model, health.healthy, health.error)]
        extra = {
            "depth_points_dropped": self.outputs.points_dropped,
            "frames_pre_encoded": pre_encoder.encoded if pre_encoder else 0,
            "frames_pre_encode_skipped": pre_encoder.skipped if pre_encoder else 0,
            "frames_encoded_kept": self.core.writer.cached_frames,
        }
        reports.append(
            requests_status(scheduler.counts(), scheduler.in_flight(), scheduler.waiting(), last, extra)
        )
        now = time.monotonic()
        stale_after = max(2.0, 5.0 / cfg.sample_fps)
        for cam in cfg.cameras:
            reports.append(
                camera_status(
                    cam.name,
                    cam.topic,
                    self._stats[cam.name],
                    self.buffers[cam.name].stats(),
                    now,
                    stale_after,
                )
            )
        return reports

    def diagnostics(self) -> DiagnosticArray:
        statuses = [
            diagnostic_status(r.name, r.level, r.message, r.values, r.hardware_id)
            for r in self.status_reports()
        ]
        return diagnostic_array(statuses, self.get_clock().now().nanoseconds)

    def _publish_diagnostics(self) -> None:
        try:
            self.diagnostics_pub.publish(self.diagnostics())
        except Exception as exc:
            self._problems.report(
                f"diagnostics:{type(exc).__name__}", f"could not publish diagnostics: {exc!r}"
            )

    # ---------------------------------------------------------------------------------------- shutdown

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Stop admitting requests, cancel those in flight and publish their results (within about
        shutdown_timeout_s), then stop the threads. Idempotent, and safe at any point of construction. Goal
        results reach their clients only while an executor spins this node: main() keeps spinning meanwhile.
        """
        if self._shutting_down:
            return
        self._shutting_down = True
        config = getattr(self, "config", None)
        timeout = timeout_s if timeout_s is not None else (config.shutdown_timeout_s if config else 3.0)
        if self._scheduler is not None and not self._scheduler.shutdown(timeout):
            self.get_logger().warning(f"shutdown: results still unpublished after {timeout:g} s")
        if self._health is not None:
            self._health.stop()
        core: Core | None = getattr(self, "core", None)
        if core is not None:
            core.close()  # encoding threads and the client: no request is left to use them

    @property
    def executor_threads(self) -> int:
        """Executor threads this node can keep busy: one per camera (each camera's callbacks are mutually
        exclusive) plus one for triggers, goals and timers. rclpy's default is one per CPU, and on a robot's
        many cores each extra thread only runs its own Python wait loop and competes for the GIL with the
        request workers."""
        return len(self.config.cameras) + 1

    def destroy_node(self) -> None:
        self.shutdown()
        if self._action is not None:
            self._action.destroy()
            self._action = None
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    # rclpy's own signal handler would shut the context down at once, and results of requests in flight
    # could no longer be published: this process handles SIGINT and SIGTERM itself and shuts down in order.
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
            while not stop.is_set() and rclpy.ok():
                executor.spin_once(timeout_sec=0.1)
            node.get_logger().info(
                "shutting down: cancelling requests in flight and publishing their results"
            )
            closing = threading.Thread(target=node.shutdown, name="reasoner-shutdown")
            closing.start()
            while closing.is_alive() and rclpy.ok():
                executor.spin_once(timeout_sec=0.05)  # goal results go out while requests end
            closing.join()
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        finally:
            node.destroy_node()
            executor.shutdown()
    finally:
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
