"""A reasoner_node process driven from outside, with a ledger of everything sent to it and everything it
answered: for the generated-sequence test (support.node_sequences) and bench/sequences.py.

The driver is a ROS client of one node: ~/trigger, ~/reason (goals, cancels, results), the lifecycle and
parameter services, a camera publisher whose frames it makes (good, undecodable, too large, not colour, stamps
ahead, back or with gaps), ~/result and /diagnostics. Each call is kept with when it was sent; each request
the node announced (trigger replies, goal results) with the ~/result messages seen for it. Nothing here
asserts: the ledger answers questions ("which calls are overdue?") that the state machine turns into
invariants.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from support.load import NodeRun, node_process
from support.processes import wait_until

TRIGGER_REFUSED = "rejected: "  # a trigger reply without a request (the node was not active)


def result_problems(msg: Any) -> list[str]:
    """What a ~/result says of itself that cannot be: text streamed before an error but no first token, or
    stamps out of order (trigger, request sent, first token, answer; a zero stamp is a stage not reached)."""
    from cosmos_reasoner_ros.node.ros_conversion import time_to_ns

    problems = []
    stamps = [
        (name, time_to_ns(getattr(msg, f"{name}_stamp")))
        for name in ("trigger", "request_sent", "first_token", "answer")
    ]
    if msg.error_kind and msg.answer and not stamps[2][1]:
        problems.append(f"an error with {len(msg.answer)} characters streamed and no first_token_stamp")
    reached = [(name, ns) for name, ns in stamps if ns]
    for (a, a_ns), (b, b_ns) in itertools.pairwise(reached):
        if a_ns > b_ns:
            problems.append(f"{a}_stamp after {b}_stamp")
    return problems


@dataclasses.dataclass
class Call:
    """One request to a service or the action, and its answer when it came."""

    kind: str  # trigger, change_state, set_parameters, get_parameters, goal, cancel, get_result
    future: Any
    sent: float  # time.monotonic()
    state: str  # the lifecycle state the model had when it was sent
    note: str = ""
    answered_at: float | None = None  # time.monotonic() when the answer came

    @property
    def latency_s(self) -> float | None:
        return None if self.answered_at is None else self.answered_at - self.sent

    @property
    def answered(self) -> bool:
        return bool(self.future.done())

    def reply(self) -> Any:
        return self.future.result() if self.future.done() else None


@dataclasses.dataclass
class Announced:
    """A request the node announced (its id in a trigger reply or a goal's result)."""

    request_id: str
    when: float  # time.monotonic() of the announcement
    cleanup_epoch: int  # the model's count of cleanups then: a cleanup after it releases the result publisher


@dataclasses.dataclass(frozen=True)
class FrameKind:
    """A camera message the driver can make."""

    name: str
    width: int
    height: int
    encoding: str = "rgb8"
    stamp_offset_s: float = 0.0  # added to now
    truncated: bool = False  # data shorter than height x step (undecodable)


FRAME_KINDS = {
    k.name: k
    for k in (
        FrameKind("good", 320, 240),
        FrameKind("truncated", 320, 240, truncated=True),
        FrameKind("huge", 1920, 1080),  # above the test's max_pixels
        FrameKind("depth", 320, 240, encoding="16UC1"),  # not colour
        FrameKind("unknown_encoding", 320, 240, encoding="yuv_foo"),
        FrameKind("ahead", 320, 240, stamp_offset_s=3600.0),  # beyond max_stamp_ahead_s
        FrameKind("back", 320, 240, stamp_offset_s=-30.0),  # a stamp going back
        FrameKind("zero_size", 0, 0),
    )
}


class NodeDriver:
    """Start with `start()`, end with `close()` (idempotent)."""

    def __init__(self, name: str, params: dict[str, Any], work_dir: Path, topic: str) -> None:
        self.name, self.params, self.work_dir, self.topic = name, params, work_dir, topic
        self.calls: list[Call] = []
        self.announced: dict[str, Announced] = {}
        self.results: collections.Counter[str] = collections.Counter()
        self.kinds: dict[str, str] = {}
        self.inconsistent: list[str] = []  # results that contradict themselves (result_problems)
        self.diagnostics: dict[str, str] = {}  # the newest camera status values
        self.diagnostics_at = 0.0
        self.frames_published = 0  # by the camera publisher, ever (its sequence numbers)
        self.stopped_at: float | None = None
        self._lock = threading.Lock()
        self._stack = ExitStack()
        self._frames: dict[str, np.ndarray] = {}
        self.node: NodeRun | None = None

    # -- processes and clients -------------------------------------------------------------------------

    def start(self) -> None:
        import rclpy
        from cosmos_reasoner_ros.action import Reason
        from cosmos_reasoner_ros.msg import ReasonerResult
        from diagnostic_msgs.msg import DiagnosticArray
        from lifecycle_msgs.srv import ChangeState, GetState
        from rcl_interfaces.srv import GetParameters, SetParameters
        from rclpy.action import ActionClient
        from rclpy.context import Context
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from std_srvs.srv import Trigger

        self.node = self._stack.enter_context(node_process(self.params, self.work_dir, self.name))
        self.context = Context()
        rclpy.init(context=self.context)
        self._stack.callback(rclpy.try_shutdown, context=self.context)
        self.ros = rclpy.create_node(f"{self.name}_driver", context=self.context)
        self._stack.callback(self.ros.destroy_node)
        deep = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        path = f"/{self.name}"
        self.ros.create_subscription(ReasonerResult, f"{path}/result", self._on_result, deep)
        self.ros.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        self.trigger = self.ros.create_client(Trigger, f"{path}/trigger", qos_profile=deep)
        self.change_state = self.ros.create_client(ChangeState, f"{path}/change_state", qos_profile=deep)
        self.get_state = self.ros.create_client(GetState, f"{path}/get_state", qos_profile=deep)
        self.set_parameters = self.ros.create_client(SetParameters, f"{path}/set_parameters")
        self.get_parameters = self.ros.create_client(GetParameters, f"{path}/get_parameters")
        self.action = ActionClient(
            self.ros,
            Reason,
            f"{path}/reason",
            goal_service_qos_profile=deep,
            result_service_qos_profile=deep,
            cancel_service_qos_profile=deep,
        )
        self._stack.callback(self.action.destroy)
        self.camera = self.ros.create_publisher(
            Image, self.topic, QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        )
        self.Image, self.Reason, self.Trigger = Image, Reason, Trigger
        self.ChangeState, self.GetState = ChangeState, GetState
        self.SetParameters, self.GetParameters = SetParameters, GetParameters
        self.executor = MultiThreadedExecutor(num_threads=2, context=self.context)
        self.executor.add_node(self.ros)
        spinner = threading.Thread(target=self.executor.spin, daemon=True)
        spinner.start()
        self._stack.callback(spinner.join, 5)
        self._stack.callback(self.executor.shutdown)
        assert self.trigger.wait_for_service(timeout_sec=60), f"no {path}/trigger: {self.log_tail()}"
        assert self.get_parameters.wait_for_service(timeout_sec=60), f"no parameters: {self.log_tail()}"
        # The first call right after discovery can go unanswered: the node may not have matched this client's
        # reply reader yet when it answers (CI, a loaded machine: get_parameters unanswered for 30 s). Round
        # trips that change nothing, sent again until one is answered, before any call the sequences count.
        self._round_trip(self.get_parameters, GetParameters.Request(names=[]), "get_parameters")
        self._round_trip(self.set_parameters, SetParameters.Request(parameters=[]), "set_parameters")

    def _round_trip(self, client: Any, request: Any, what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            future = client.call_async(request)
            until = min(deadline, time.monotonic() + 3.0)
            while time.monotonic() < until and not future.done():
                time.sleep(0.01)
            if future.done():
                return
            client.remove_pending_request(future)
        raise AssertionError(f"{what}: no answer to any call in {timeout_s:g} s: {self.log_tail()}")

    def close(self) -> None:
        self._stack.close()

    def log_tail(self, chars: int = 4000) -> str:
        return self.node.output()[-chars:] if self.node is not None else ""

    @property
    def alive(self) -> bool:
        return self.node is not None and self.node.proc.poll() is None

    # -- ledger ---------------------------------------------------------------------------------------

    def _on_result(self, msg: Any) -> None:
        problems = result_problems(msg)
        with self._lock:
            self.results[msg.request_id] += 1
            self.kinds[msg.request_id] = msg.error_kind or "success"
            self.inconsistent.extend(f"{msg.request_id}: {p}" for p in problems)

    def _on_diagnostics(self, msg: Any) -> None:
        for status in msg.status:
            if status.name.endswith(" camera front"):
                with self._lock:
                    self.diagnostics = {kv.key: kv.value for kv in status.values}
                    self.diagnostics_at = time.monotonic()

    def record(self, kind: str, future: Any, state: str, note: str = "") -> Call:
        call = Call(kind, future, time.monotonic(), state, note)
        future.add_done_callback(lambda _f: setattr(call, "answered_at", time.monotonic()))
        self.calls.append(call)
        return call

    def announce(self, request_ids: list[str], cleanup_epoch: int) -> list[str]:
        """Requests the node said it made; returns those it announced twice (a defect)."""
        now = time.monotonic()
        twice = [i for i in request_ids if i in self.announced]
        for request_id in request_ids:
            self.announced.setdefault(request_id, Announced(request_id, now, cleanup_epoch))
        return twice

    def result_count(self, request_id: str) -> int:
        with self._lock:
            return self.results[request_id]

    def overdue_calls(self, bound_s: float, now: float | None = None) -> list[Call]:
        now = time.monotonic() if now is None else now
        return [c for c in self.calls if not c.answered and now - c.sent > bound_s]

    def camera_status(self, newer_than: float) -> dict[str, str] | None:
        with self._lock:
            return dict(self.diagnostics) if self.diagnostics_at > newer_than else None

    # -- the camera -----------------------------------------------------------------------------------

    def wait_camera_matched(self, subscribed: bool, timeout_s: float = 30.0) -> None:
        """Until the camera publisher sees the node's subscription (or sees it gone)."""
        wait_until(
            lambda: (self.camera.get_subscription_count() > 0) == subscribed,
            timeout_s,
            f"the camera publisher to see the node's subscription {'appear' if subscribed else 'go'}",
        )

    def publish_frames(self, kind: FrameKind, count: int, gap_s: float = 0.0) -> None:
        """`count` frames of `kind`, 10 ms apart; gap_s is added to every stamp (a pause in the stamps)."""
        for _ in range(count):
            msg = self.frame(kind, time.time() + kind.stamp_offset_s + gap_s)
            self.camera.publish(msg)
            self.frames_published += 1
            time.sleep(0.01)

    def frame(self, kind: FrameKind, stamp_s: float) -> Any:
        bytes_per_pixel = 2 if kind.encoding == "16UC1" else 3
        if kind.name not in self._frames:
            rng = np.random.default_rng(len(self._frames))
            size = kind.width * kind.height * bytes_per_pixel
            self._frames[kind.name] = rng.integers(0, 255, size, dtype=np.uint8)
        data = self._frames[kind.name]
        msg = self.Image(
            height=kind.height, width=kind.width, encoding=kind.encoding, step=kind.width * bytes_per_pixel
        )
        msg.header.frame_id = "front_optical"
        msg.header.stamp.sec = int(stamp_s)
        msg.header.stamp.nanosec = int((stamp_s % 1.0) * 1e9)
        msg.data = (data[: len(data) // 2] if kind.truncated else data).tobytes()
        return msg

    # -- asking ---------------------------------------------------------------------------------------

    def lifecycle_state(self, timeout_s: float = 30.0) -> str:
        """get_state, asked again when a reply is lost before DDS matched the reply writer (seen in CI)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            future = self.get_state.call_async(self.GetState.Request())
            end = min(deadline, time.monotonic() + 5.0)
            while not future.done() and time.monotonic() < end:
                time.sleep(0.01)
            if future.done():
                return str(future.result().current_state.label)
        raise AssertionError(f"get_state gave no answer in {timeout_s} s")

    def wait_answered(self, calls: list[Call], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(c.answered for c in calls):
                return True
            time.sleep(0.01)
        return all(c.answered for c in calls)


def trigger_reply_ids(message: str) -> list[str]:
    """The request ids a trigger reply announces (none when it was refused without a request)."""
    if message.startswith(TRIGGER_REFUSED):
        return []
    return message.split(" rejected:", 1)[0].split()
