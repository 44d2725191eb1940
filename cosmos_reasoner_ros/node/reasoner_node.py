"""`reasoner_node`: camera topics, triggers and the Reason action wired to the request pipeline; results out.

A managed (lifecycle) node when the `lifecycle` parameter is true, as in nav2 bring-ups: `configure` validates
the parameters and builds the core, `activate` starts subscriptions, triggers, timers (and may wait for the
server), `deactivate` stops accepting requests and ends those in flight with their results, `cleanup` and
`shutdown` release everything. Otherwise it configures and activates itself at start (the default).

The wiring only: parameters (node/parameters.py), a trigger's requests (node/intake.py, with
requests/groups.py and requests/checks.py), admission, deadlines and workers (requests/scheduler.py), the
request itself (requests/pipeline.py), the checks before publishing (requests/result_checks.py), health
(node/health.py) and diagnostics (node/diagnostics.py) live in their own ROS-free modules. Image callbacks
only decimate, convert and buffer; service, action and timer callbacks only enqueue; every request ends in
exactly one ReasonerResult, published on the scheduler's delivery thread, also at shutdown. A trigger may ask
several tasks of one clip (one request, and one result, each).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import ParameterDescriptor, ParameterType, SetParametersResult
from rclpy.lifecycle import LifecycleNodeMixin, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.subscription import Subscription
from rclpy.timer import Timer

from cosmos_reasoner_ros.clips import ClipBuffer
from cosmos_reasoner_ros.handoff import read_settings as read_handoff_settings
from cosmos_reasoner_ros.node.configured import Configured
from cosmos_reasoner_ros.node.core import Core
from cosmos_reasoner_ros.node.diagnostics import (
    ProblemLog,
)
from cosmos_reasoner_ros.node.handoff import HandoffEdge
from cosmos_reasoner_ros.node.health import HealthMonitor
from cosmos_reasoner_ros.node.ingest import CameraIngest
from cosmos_reasoner_ros.node.intake import RequestIntake
from cosmos_reasoner_ros.node.interfaces import NodeInterfaces, shorten
from cosmos_reasoner_ros.node.outputs import ResultOutputs
from cosmos_reasoner_ros.node.parameters import ConfigError, NodeConfig, read_config, secret_problems
from cosmos_reasoner_ros.node.reason_action import ReasonActionServer
from cosmos_reasoner_ros.node.request_gate import RequestGate
from cosmos_reasoner_ros.node.service_replies import AnswerCount
from cosmos_reasoner_ros.reasoner import ReasonerClient
from cosmos_reasoner_ros.requests import Job, Outcome, Pipeline, RequestScheduler

__all__ = ["ConfigError", "ReasonerNode"]

_TYPES = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
    list: ParameterType.PARAMETER_STRING_ARRAY,
}


class ReasonerNode(LifecycleNodeMixin, NodeInterfaces):
    def __init__(self, node_name: str = "reasoner_node", **kwargs: Any) -> None:
        Node.__init__(self, node_name, **kwargs)
        # What shutdown() touches exists before anything can fail: a half-built node shuts down cleanly.
        self._gate = RequestGate()  # taking requests between activate and deactivate; shutdown ends it
        self._scheduler: RequestScheduler | None = None
        self._health: HealthMonitor | None = None
        self._action: ReasonActionServer | None = None
        self._inputs: list[Any] = []  # subscriptions and timers created at activate
        self._config_error: ConfigError | None = None
        self._configured: Configured | None = None  # what configure built; cleanup releases it
        # The cameras' ingest of the last configure, kept after cleanup: a goal accepted before it still gets
        # its result with the camera's frame id and the reason its frames were refused.
        self._last_ingest: dict[str, CameraIngest] = {}
        self.handoff: HandoffEdge | None = None  # the Nav2 handoff (handoff.mode), built at configure
        self.answered = AnswerCount()  # requests answered by the services and the action (main's last drain)
        try:
            self._refuse_secrets()
            self.config = cfg = read_config(self._declare)
            self.handoff_settings = read_handoff_settings(self._declare)
        except Exception:
            Node.destroy_node(self)  # the half-built node must not outlive the failed start
            raise
        self.add_on_set_parameters_callback(self._refuse_undeclared)  # after every declaration
        # rcl's lifecycle services are replaced by the node's own (node/lifecycle_services.py), and exist only
        # for a managed node: a plain one looks as it always did. rcl publishes ~/transition_event either way.
        LifecycleNodeMixin.__init__(self, enable_communication_interface=False)
        self._create_request_interfaces(cfg)
        if cfg.lifecycle:
            self.get_logger().info("managed node: waiting for configure (ros2 lifecycle set ... configure)")
            return
        if self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            error = self._config_error or ConfigError("configuration failed (see the log)")
            Node.destroy_node(self)
            raise error
        if self.trigger_activate() != TransitionCallbackReturn.SUCCESS:
            self.shutdown()
            Node.destroy_node(self)
            raise ConfigError("activation failed (see the log)")

    # ------------------------------------------------------------------------------------- configuration

    def _refuse_secrets(self) -> None:
        """Before any declaration (in both modes): a declared value goes out on /parameter_events at once.
        rclpy keeps the overrides (params files, -p, parameter_overrides) resolved for this node's name."""
        overrides = getattr(self, "_parameter_overrides", {})
        problems = secret_problems({name: p.value for name, p in overrides.items()})
        if problems:
            raise ConfigError("invalid parameters:\n  " + "\n  ".join(problems))

    def _refuse_undeclared(self, parameters: list[Any]) -> SetParametersResult:
        """The node's own parameters are read-only (rclpy refuses a set before this is asked); this refuses
        a name the node never declared. rclpy's check of undeclared names skips a falsy one: a set_parameters
        of the name '' succeeded and created that parameter."""
        unknown = [p.name for p in parameters if not self.has_parameter(p.name)]
        if unknown:
            return SetParametersResult(successful=False, reason=f"no parameter {unknown[0][:64]!r} here")
        return SetParametersResult(successful=True)

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

    # ------------------------------------------------------------------------------------------ lifecycle

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._configure(self.config)
        except ConfigError as exc:
            self._config_error = exc
            if self.config.lifecycle:  # a plain node raises it from __init__ (main logs it once)
                self.get_logger().error(str(exc))
            return TransitionCallbackReturn.FAILURE
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        cfg = self.config
        if not self._gate.prepare(self._ensure_scheduler):  # a signal came: no new scheduler after it
            return TransitionCallbackReturn.FAILURE
        health = self._health_monitor()
        health.start()
        if cfg.activate_wait_for_server_s > 0:
            deadline = time.monotonic() + cfg.activate_wait_for_server_s
            while not health.healthy and time.monotonic() < deadline and not self._gate.stopping:
                time.sleep(0.1)
            if not health.healthy:
                self.get_logger().error(
                    f"activate: server {cfg.server_url} not healthy within {cfg.activate_wait_for_server_s} s"
                )
                # The next activate starts a monitor of its own: this one, left running, outlived cleanup
                # and the core it reports to, and a dead thread was then reused with a stale `healthy`.
                self._stop_health()
                return TransitionCallbackReturn.FAILURE
        if self.handoff is not None:  # taking answers again; Nav2 gets its discovery window anew
            self.handoff.activate()
        if not self._gate.open_with(lambda: self._create_inputs(cfg)):
            self._stop_health()
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info(
            f"ready: cameras {', '.join(c.name + '<-' + c.topic for c in cfg.cameras)}; "
            f"server {cfg.server_url}; "
            f"task {cfg.task}; timer {cfg.trigger_period_s or 'off'}; media {cfg.media_dir}"
        )
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """No new requests; those in flight end (cancelled) with their results published; inputs go away.
        The action server stays (refusing new goals): every accepted goal's result, of one that ended before
        or during the transition, stays available to get_result (before, 5 of 160 goals of a storm never got
        theirs, and a result asked after deactivate got no answer at all)."""
        self._stop_inputs()
        if self.handoff is not None:  # nothing sent from now on; the goal it sent cancelled (handoff.on_stop)
            self.handoff.stop("deactivate", wait=False)
        if self._scheduler is not None:
            self._scheduler.shutdown(self.config.shutdown_timeout_s)
        if self.handoff is not None:  # Nav2's answer to that cancel, awaited meanwhile
            self.handoff.wait_stopped()
        self._stop_health()
        for buffer in self.buffers.values():
            buffer.clear()  # frames from before the pause would make the first clip after it a lie
        self.get_logger().info("deactivated: not accepting requests")
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """From any state: nothing accepted from now on (topics and timers go; triggers and goals are
        refused with the reason), what is in flight ends with its results. Goal results stay retrievable until
        the node is destroyed."""
        self._stop_inputs()
        self.shutdown()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """A transition's callback raised: everything it may have started is released, and the node is
        unconfigured as the state machine then says (before, rclpy's default left inputs, requests and the
        core of a half-done transition running behind an `unconfigured` state)."""
        self.get_logger().error(f"transition from {state.label} failed: releasing everything (unconfigured)")
        self._stop_inputs()
        if self._scheduler is not None:
            self._scheduler.shutdown(self.config.shutdown_timeout_s)
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def _stop_inputs(self) -> None:
        self._gate.close()
        for entity in self._inputs:
            self._destroy_input(entity)
        self._inputs.clear()

    def _destroy_input(self, entity: Any) -> None:
        if isinstance(entity, Subscription):
            self.destroy_subscription(entity)
        elif isinstance(entity, Timer):
            self.destroy_timer(entity)

    def _stop_health(self) -> None:
        health, self._health = self._health, None  # a transition and a signal's shutdown may both stop it
        if health is not None:
            health.stop()

    def _release(self) -> None:
        """Everything configure built: the core (encoders, client), publishers, and the health monitor that
        used its client."""
        self._stop_health()
        configured, self._configured = self._configured, None
        if configured is not None:
            configured.close_core()
            configured.outputs.destroy()
            self.destroy_publisher(configured.diagnostics_pub)
        handoff, self.handoff = self.handoff, None
        if handoff is not None:
            handoff.destroy()

    # ------------------------------------------------------------------------------------- configuration

    def _configure(self, cfg: NodeConfig) -> None:
        """Validate everything and build the core; the node's own bookkeeping; the output publishers."""
        core = Core.build(cfg, log=self.get_logger().warning)
        try:
            HandoffEdge.check(cfg, self.handoff_settings, core.catalog)
        except ConfigError:
            core.close()
            raise
        for note in core.notes:
            self.get_logger().info(note)
        if cfg.instruction and not core.catalog.spec(cfg.task).placeholders:
            self.get_logger().warning(
                f"task {cfg.task!r} takes no instruction: the instruction parameter is used only by goals "
                "naming tasks that take one"
            )
        problems = ProblemLog(self.get_logger().warning)
        intake = RequestIntake(
            cfg,
            core.catalog,
            lambda: self.scheduler,
            lambda: self.get_clock().now().nanoseconds,
            self.get_name(),
        )
        ingest = {
            c.name: CameraIngest(
                c.name,
                core.buffers[c.name],
                problems,
                use_receive_time=cfg.use_receive_time,
                max_stamp_ahead_s=cfg.max_stamp_ahead_s,
                max_pixels=cfg.max_pixels,
                frame_id=c.frame_id,
                pre_encoder=core.pre_encoder,
                pre_encoding=intake.pre_encoding,
            )
            for c in cfg.cameras
        }
        self._configured = Configured(
            core,
            problems,
            intake,
            ingest,
            ResultOutputs(self, cfg, problems, self._requests_qos),
            self.create_publisher(DiagnosticArray, "/diagnostics", 10),
        )
        self._last_ingest = ingest
        self.handoff = HandoffEdge.create(self, cfg, self.handoff_settings, problems)

    # What configure built (AttributeError outside configure .. cleanup, as before for these names).

    @property
    def state(self) -> Configured:
        if self._configured is None:
            raise AttributeError("the node is not configured")
        return self._configured

    @property
    def core(self) -> Core:
        return self.state.core

    @property
    def buffers(self) -> dict[str, ClipBuffer]:
        return self.state.core.buffers

    @property
    def pipeline(self) -> Pipeline:
        return self.state.core.pipeline

    @property
    def intake(self) -> RequestIntake:
        return self.state.intake

    @property
    def ingest(self) -> dict[str, CameraIngest]:
        return self.state.ingest

    @property
    def outputs(self) -> ResultOutputs:
        return self.state.outputs

    @property
    def recent(self) -> collections.deque[tuple[Outcome, float]]:
        return self.state.recent

    def _ensure_scheduler(self) -> None:
        if self._scheduler is None or self._scheduler.closed:
            self._scheduler = self._new_scheduler()

    def _new_scheduler(self) -> RequestScheduler:
        cfg = self.config
        pipeline = self.pipeline
        return RequestScheduler(
            lambda job, report: pipeline.run_clip(
                job.specs, on_progress=job.progress, cancel=job.cancel, on_outcome=report
            ),
            self._deliver,
            max_in_flight=cfg.max_in_flight,
            busy_policy=cfg.busy_policy,
            workers=cfg.workers or len(cfg.cameras) * cfg.max_in_flight + 1,
            finalize=self._finalize,
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
                configured = self._configured
                if configured is None or configured.core_closed:  # released while this monitor polled
                    return
                core = configured.core
                if healthy:
                    model = self._health.model if self._health else ""
                    outage = self._health.last_outage_s if self._health and self._health.outages else 0.0
                    again = f" again after {outage:.0f} s unreachable" if outage else ""
                    self.get_logger().info(
                        f"server {self.config.server_url} is healthy{again} (model {model})"
                    )
                    # A (re)started server may be another vLLM: the video mode follows its version.
                    line = core.adapt_to_server(core.client.server_version())
                    refused = core.pipeline.request_settings.video_refusal
                    (self.get_logger().error if refused else self.get_logger().info)(line)
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

    # ----------------------------------------------------------------------------------------- outputs

    def _frame_id(self, outcome: Outcome) -> str:
        ingest = self._last_ingest.get(outcome.answer_camera)
        return ingest.frame_id if ingest is not None else ""

    def _finalize(self, job: Job, outcome: Outcome) -> Outcome:
        """Just before publication, on the delivery thread: the outcome's age (and staleness) now, and the
        geometric checks of its answer (with the 3D paths they are about). A request without frames says
        why the node refused the frames that came (the refusal kinds), not only that none were buffered."""
        if outcome.error_kind == "no_frames":
            ingest = self._last_ingest
            cameras = job.group or tuple(ingest)
            refused = "; ".join(r for c in cameras if c in ingest and (r := ingest[c].refusals()))
            if refused:
                outcome = dataclasses.replace(outcome, error=f"{outcome.error} ({refused})")
        now_ns = self.get_clock().now().nanoseconds
        configured = self._configured
        if configured is None:  # after cleanup (deactivate's wait timed out): only the goal's result is left
            return outcome.published(now_ns)
        prepared = configured.outputs.prepare(outcome, now_ns)
        handoff = self.handoff  # the Nav2 handoff's first decision about it rides in its result
        return (
            handoff.consider(prepared, now_ns, self._frame_id(prepared)) if handoff is not None else prepared
        )

    def _deliver(self, job: Job, outcome: Outcome) -> None:
        """On the delivery thread, once per job: the result, then the extras of a success."""
        configured = self._configured
        if configured is None:  # after cleanup: a goal accepted before it still gets its action result
            return
        with configured.lock:
            last = configured.last
            if outcome.success:
                last.latency_s, last.ttft_s = outcome.latency_s, outcome.ttft_s
            else:
                last.error, last.error_kind = outcome.error, outcome.error_kind
            last.stale_cameras = outcome.stale_cameras
        configured.outputs.publish(outcome, self._frame_id(outcome))
        if not outcome.success:
            configured.problems.report(
                f"request:{outcome.error_kind}",
                f"request {outcome.request_id} failed ({outcome.error_kind}): {shorten(outcome.error, 300)}",
            )
        if outcome.stale_cameras:
            configured.problems.report(
                f"stale:{','.join(outcome.stale_cameras)}",
                f"request {outcome.request_id}: left out stale camera(s) "
                + "; ".join(
                    f"{c}: {r}" for c, r in zip(outcome.stale_cameras, outcome.stale_reasons, strict=True)
                ),
            )
        configured.recent.append((outcome.without_frames(), time.monotonic()))

    # ---------------------------------------------------------------------------------------- shutdown

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Stop admitting requests, cancel those in flight and publish their results (within about
        shutdown_timeout_s), then stop the threads. Idempotent, and safe at any point of construction. Goal
        results reach their clients only while an executor spins this node: main() keeps spinning meanwhile.
        """
        if not self._gate.stop():
            return
        if self.handoff is not None:  # the goal it sent cancelled (handoff.on_stop), while main still spins
            self.handoff.stop("shutdown", wait=False)
        config = getattr(self, "config", None)
        timeout = timeout_s if timeout_s is not None else (config.shutdown_timeout_s if config else 3.0)
        if self._scheduler is not None and not self._scheduler.shutdown(timeout):
            self.get_logger().warning(f"shutdown: results still unpublished after {timeout:g} s")
        if self.handoff is not None:  # Nav2's answer to that cancel, awaited meanwhile
            self.handoff.wait_stopped()
        self._stop_health()
        # Encoding threads and the client: no request is left to use them. The publishers stay until the node
        # is destroyed, so that a late trigger still gets its one (cancelled) result.
        if self._configured is not None:
            self._configured.close_core()

    @property
    def executor_threads(self) -> int:
        """Executor threads this node can keep busy: one per camera (each camera's callbacks are mutually
        exclusive) plus one for triggers, goals and timers. rclpy's default is one per CPU, and on a robot's
        many cores each extra thread only runs its own Python wait loop and competes for the GIL with the
        request workers. A managed node has one more: a transition may wait (activate for the server,
        deactivate for the results in flight) while triggers, goals and the lifecycle queries are answered."""
        return len(self.config.cameras) + 1 + self.config.lifecycle

    def destroy_node(self) -> None:
        self.shutdown()
        if self._action is not None:
            self._action.destroy()
            self._action = None
        handoff, self.handoff = self.handoff, None  # its action client, as the Reason server above
        if handoff is not None:
            handoff.destroy()
        Node.destroy_node(self)
