"""reasoner_node in this process for tests and benchmarks: the node and a probe node on one executor thread,
spun as reasoner_node's main spins it (main.Spinner).

Point it at any OpenAI-compatible server with `base_params(server_url, media_dir, ...)` (the scripted server,
or a real vLLM from support.vllm_tier); the probe records everything the node publishes and calls
its service and action.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import rclpy
from cosmos_reasoner_ros.action import Reason
from cosmos_reasoner_ros.msg import ReasonerResult
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Path as PathMsg
from rclpy.action import ActionClient
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image
from std_msgs.msg import String
from std_srvs.srv import Trigger
from visualization_msgs.msg import MarkerArray

from cosmos_reasoner_ros.node.diagnostics import ProblemLog
from cosmos_reasoner_ros.node.main import Spinner
from cosmos_reasoner_ros.node.reasoner_node import ReasonerNode
from support.camera_publisher import camera_process
from support.collector import Collector
from support.processes import wait_until

LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


class Harness:
    """reasoner_node + a probe node on a MultiThreadedExecutor in a background thread, private context."""

    def __init__(self, params: dict[str, Any], camera: str = "front") -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        overrides = [Parameter(k, value=v) for k, v in params.items()]
        self.node = ReasonerNode(parameter_overrides=overrides, context=self.context)
        self.probe = rclpy.create_node("probe", context=self.context)
        self.results = Collector()
        self.next_actions = Collector()
        self.annotated = Collector()
        self.paths = Collector()
        self.markers = Collector()
        self.diagnostics = Collector()
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        self.probe.create_subscription(ReasonerResult, "/reasoner_node/result", self.results, reliable)
        self.probe.create_subscription(String, "/reasoner_node/next_action", self.next_actions, reliable)
        self.probe.create_subscription(Image, "/reasoner_node/annotated_image", self.annotated, LATCHED)
        self.probe.create_subscription(PathMsg, "/reasoner_node/trajectory", self.paths, reliable)
        self.probe.create_subscription(MarkerArray, "/reasoner_node/markers", self.markers, reliable)
        self.probe.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics, 10)
        self.trigger = self.probe.create_client(Trigger, "/reasoner_node/trigger")
        self.action = ActionClient(self.probe, Reason, "/reasoner_node/reason")
        self.instruction_pub = self.probe.create_publisher(String, "/reasoner_node/instruction", reliable)
        # As reasoner_node.main runs it, plus a thread for the probe.
        self.executor = MultiThreadedExecutor(
            num_threads=self.node.executor_threads + 1, context=self.context
        )
        self.executor.add_node(self.node)
        self.executor.add_node(self.probe)
        self.spin_failures: list[str] = []  # what the Spinner logged at error (a callback failed)
        self.spin_races: list[str] = []  # and at info (rclpy's wait-set race, ros2/rclpy#1284)
        self._spin_ends = threading.Event()
        self.thread = threading.Thread(target=self._spin, name="harness-spin", daemon=True)
        self.thread.start()
        self.camera = camera
        self.closed = False

    def _spin(self) -> None:
        """As main spins the node: through main.Spinner, which logs what a spin_once raises (with the node's
        logger) and spins on, until close. rclpy's bare spin(), used before, ended at the first exception, and
        with it every callback of the node and the probe: a transition that destroys a subscription while this
        thread builds its wait set makes rclpy raise InvalidHandle (ros2/rclpy#1284, fixed upstream by
        ros2/rclpy#1590, in Kilted's 9.1.5; the 7.1.6 and 9.1.2 used here have it), and a `cancel` decision
        published during deactivate never reached the probe."""
        logger = self.node.get_logger()

        def failed(line: str) -> None:
            self.spin_failures.append(line)
            logger.error(line)

        def noted(line: str) -> None:
            self.spin_races.append(line)
            logger.info(line)

        spinner = Spinner(self.executor, ProblemLog(failed), race_log=ProblemLog(noted))
        try:
            while not self._spin_ends.is_set() and self.context.ok():
                spinner.spin_once(0.1)
        except (KeyboardInterrupt, ExternalShutdownException):
            pass

    def frames_buffered(self) -> int:
        return self.node.buffers[self.camera].stats().added

    def frames_received(self) -> int:
        return self.node.ingest[self.camera].stats.received

    def wait_frames(self, n: int, timeout_s: float = 30.0) -> None:
        wait_until(lambda: self.frames_buffered() >= n, timeout_s, f"{n} buffered frames")

    def only_this_node(self, service: str) -> None:
        """Fail loudly when another server of `service` is on this ROS domain: it would answer some calls
        (another session's node once did, with its own 'Connection refused')."""
        count = self.probe.count_services(service)
        domain = os.environ.get("ROS_DOMAIN_ID", "0")
        assert count == 1, f"{count} servers of {service} on ROS domain {domain}: another node answers too"

    def call_trigger(self) -> Trigger.Response:
        assert self.trigger.wait_for_service(timeout_sec=20.0)
        self.only_this_node("/reasoner_node/trigger")
        future = self.trigger.call_async(Trigger.Request())
        return wait_until(lambda: future.result() if future.done() else None, 20.0, "the trigger response")

    def trigger_id(self) -> str:
        """Call ~/trigger: the request id its reply starts with (a refusal adds ' rejected: reason')."""
        return str(self.call_trigger().message).split()[0]

    def result_for(self, request_id: str, timeout_s: float = 30.0) -> ReasonerResult:
        return self.results.wait_for(
            lambda items: next((r for r in items if r.request_id == request_id), None), timeout_s, request_id
        )

    def results_for(self, request_id: str) -> list[ReasonerResult]:
        return [r for r in list(self.results.items) if r.request_id == request_id]

    def send_goal(self, goal: Reason.Goal, feedback: list[Any]) -> Any:
        assert self.action.wait_for_server(timeout_sec=20.0)
        self.only_this_node("/reasoner_node/reason/_action/send_goal")
        future = self.action.send_goal_async(goal, feedback_callback=lambda f: feedback.append(f.feedback))
        handle = wait_until(lambda: future.result() if future.done() else None, 20.0, "goal acceptance")
        assert handle.accepted
        return handle

    def only_result(self, request_id: str, timeout_s: float = 60.0) -> ReasonerResult:
        """The one ~/result of a request, once it is certain: it arrived, then every result the node published
        before now arrived too (flush_results), and exactly one is this request's (a second is a duplicate).
        A goal's result can come before the same result on the topic (two transports): counting at once
        found none."""
        self.result_for(request_id, timeout_s)
        self.flush_results(timeout_s)
        found = self.results_for(request_id)
        assert len(found) == 1, f"{len(found)} results of {request_id}"
        return found[0]

    def flush_results(self, timeout_s: float = 60.0) -> str:
        """Return once every ~/result the node published before now has arrived (a duplicate included): one
        more goal, refused at once (an unknown camera), and its ~/result, which the node's one publisher
        sends after all the earlier ones. Its request id."""
        handle = self.send_goal(Reason.Goal(cameras=["no_such_camera"]), [])
        answer = handle.get_result_async()
        result = wait_until(
            lambda: answer.result() if answer.done() else None, timeout_s, "the marker's result"
        )
        request_id = str(result.result.result.request_id)
        self.result_for(request_id, timeout_s)
        return request_id

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.node.destroy_node()
        self.action.destroy()
        self.probe.destroy_node()
        self._spin_ends.set()
        self.executor.shutdown()
        rclpy.shutdown(context=self.context)
        self.thread.join(10)


def goal_summary(res: Any) -> str:
    """A goal's result for an assertion message: its status, and its result's error kind and error (why a
    goal that should have succeeded did not, on the run that failed)."""
    result = res.result.result
    return f"status {res.status}, error_kind {result.error_kind!r}, error {result.error[:300]!r}"


def base_params(server_url: str, media_dir: Path, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "cameras": ["front"],
        "camera.front.topic": "/test_cam/image_raw",
        "camera.front.frame_id": "front_optical",
        "server_url": server_url,
        "media_dir": str(media_dir),
        "clip_seconds": 2.0,
        "sample_fps": 4.0,
        "max_long_side": 640,
        "request_timeout_s": 10.0,
        "max_retries": 0,
        "health_period_s": 0.5,
        "task": "trajectory",
        "instruction": "pick up the cup",
    }
    params.update(extra)
    return params


@contextlib.contextmanager
def depth_camera_node(
    make: Callable[[dict[str, Any]], Harness], params: dict[str, Any], server_url: str, **camera: Any
) -> Iterator[Harness]:
    """A harness (made by `make`, the harness_factory fixture) asking `server_url`, fed by a camera process
    with depth on /test_cam/depth and CameraInfo on /test_cam/info (`camera`: camera_process's size and
    further arguments); yields once both frames and CameraInfo arrived."""
    with camera_process(
        "/test_cam/image_raw", depth_topic="/test_cam/depth", info_topic="/test_cam/info", **camera
    ):
        params["server_url"] = server_url
        h = make(params)
        h.wait_frames(3)
        wait_until(lambda: "front" in h.node.outputs.camera_info, 20.0, "camera info")
        yield h
