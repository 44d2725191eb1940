"""The `~/reason` action of reasoner_node: every goal is accepted and ends with a ReasonerResult (a refusal is
an aborted goal whose result says why), feedback follows the request's stages (streamed text throttled), and a
cancel request reaches the request in flight, which then ends CANCELED with a `cancelled` result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rclpy.action.server import ActionServer, CancelResponse, GoalResponse, ServerGoalHandle
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.task import Future

from cosmos_reasoner_ros.action import Reason
from cosmos_reasoner_ros.msg import ReasonerResult
from cosmos_reasoner_ros.pipeline import STAGES, Outcome, ProgressCallback, RequestSpec
from cosmos_reasoner_ros.scheduler import Job

__all__ = ["ReasonActionServer"]

Submit = Callable[[RequestSpec, ProgressCallback, Callable[[Outcome], None], bool], Job]


class ReasonActionServer:
    """Wires Reason goals to the node: `new_spec(goal)` makes the request, `submit` queues it (never blocks),
    `cancel(job)` stops it, `result_msg(outcome)` is the result."""

    def __init__(
        self,
        node: Node,
        new_spec: Callable[[Any], RequestSpec],
        submit: Submit,
        cancel: Callable[[Job], None],
        result_msg: Callable[[Outcome], ReasonerResult],
        feedback_rate_hz: float,
        qos: QoSProfile,
        callback_group: CallbackGroup,
    ) -> None:
        self._node, self._new_spec, self._submit, self._cancel = node, new_spec, submit, cancel
        self._result_msg = result_msg
        self._min_gap = 1.0 / feedback_rate_hz
        self._jobs: dict[bytes, Job] = {}
        self._lock = threading.Lock()
        self._server: ActionServer[Any, Any, Any] = ActionServer(
            node,
            Reason,
            "~/reason",
            execute_callback=self._execute,
            goal_callback=lambda _goal: GoalResponse.ACCEPT,  # refusals come as results, with their reason
            cancel_callback=self._on_cancel,
            callback_group=callback_group,
            # Goals come in bursts like service calls: the queues hold them (the defaults drop past 10).
            goal_service_qos_profile=qos,
            result_service_qos_profile=qos,
            cancel_service_qos_profile=qos,
        )

    def destroy(self) -> None:
        self._server.destroy()

    def _feedback(self, goal_handle: ServerGoalHandle[Any, Any, Any], accepted: float) -> ProgressCallback:
        last_time, last_stage = 0.0, ""

        def on_progress(stage: str, text: str) -> None:
            nonlocal last_time, last_stage
            now = time.monotonic()
            if stage == last_stage == "streaming" and now - last_time < self._min_gap:
                return  # throttle streamed text, never stage changes
            last_time, last_stage = now, stage
            goal_handle.publish_feedback(
                Reason.Feedback(
                    stage=STAGES.index(stage), stage_name=stage, partial_text=text, elapsed_s=now - accepted
                )
            )

        return on_progress

    async def _execute(self, goal_handle: ServerGoalHandle[Any, Any, Any]) -> Any:
        goal = goal_handle.request
        done: Future[Outcome] = Future(executor=self._node.executor)
        # A done callback makes set_result (called on the delivery thread) wake the executor, which then
        # resumes this coroutine; without one nothing would wake it.
        done.add_done_callback(lambda _f: None)
        feedback = self._feedback(goal_handle, time.monotonic())
        job = self._submit(self._new_spec(goal), feedback, done.set_result, bool(goal.instruction))
        key = bytes(goal_handle.goal_id.uuid)
        with self._lock:
            self._jobs[key] = job
        if goal_handle.is_cancel_requested:  # a cancel that came before the job was registered
            self._cancel(job)
        try:
            outcome = await done
        finally:
            with self._lock:
                self._jobs.pop(key, None)
        assert outcome is not None
        result = Reason.Result(result=self._result_msg(outcome))
        if outcome.error_kind == "cancelled" and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif outcome.success:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result

    def _on_cancel(self, goal_handle: ServerGoalHandle[Any, Any, Any]) -> CancelResponse:
        with self._lock:
            job = self._jobs.get(bytes(goal_handle.goal_id.uuid))
        if job is not None:
            self._cancel(job)
        return CancelResponse.ACCEPT
