"""The `~/reason` action of reasoner_node: every goal is accepted and ends with its ReasonerResults (a refusal
is an aborted goal whose results say why), feedback follows each request's stages (streamed text throttled)
with the time left before the goal's deadline, and a cancel request reaches the requests in flight, which
then end CANCELED with `cancelled` results. At the deadline the requests are cancelled and the goal aborts
with `timeout` results.

A goal may ask several tasks about the same clip: one request each, all in one job; the goal's result lists
them in its order and ends when the last has ended (each is on ~/result as soon as it has).

The server lives as long as the node, across lifecycle transitions: goals are accepted only while the node is
active (`accepting()`), and every accepted goal's result stays available to get_result for the action
server's retention (rclpy's result_timeout, RESULT_RETENTION_S of the node's clock) also after deactivate,
cleanup or shutdown.
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
from cosmos_reasoner_ros.requests import STAGES, GroupSettings, Job, Outcome, ProgressCallback, RequestGroup
from cosmos_reasoner_ros.ros_compat import RESULT_RETENTION_S

__all__ = ["ReasonActionServer"]

Submit = Callable[[RequestGroup, ProgressCallback, Callable[[tuple[Outcome, ...]], None]], Job]


class ReasonActionServer:
    """Wires Reason goals to the node: `new_group(tasks, settings)` makes the requests of one trigger (the
    node's new_group), `submit` queues them (never blocks), `cancel(job)` stops them,
    `result_msg(outcome)` is each result."""

    def __init__(
        self,
        node: Node,
        new_group: Callable[[tuple[str, ...], GroupSettings], RequestGroup],
        submit: Submit,
        cancel: Callable[[Job], None],
        result_msg: Callable[[Outcome], ReasonerResult],
        feedback_rate_hz: float,
        qos: QoSProfile,
        callback_group: CallbackGroup,
        accepting: Callable[[], bool] = lambda: True,
    ) -> None:
        self._node, self._new_group, self._submit, self._cancel = node, new_group, submit, cancel
        self._accepting = accepting
        self._result_msg = result_msg
        self._min_gap = 1.0 / feedback_rate_hz
        self._jobs: dict[bytes, Job] = {}
        self._lock = threading.Lock()
        self._server: ActionServer = ActionServer(
            node,
            Reason,
            "~/reason",
            execute_callback=self._execute,
            goal_callback=self._on_goal,
            cancel_callback=self._on_cancel,
            callback_group=callback_group,
            # Goals come in bursts like service calls: the queues hold them (the defaults drop past 10).
            goal_service_qos_profile=qos,
            result_service_qos_profile=qos,
            cancel_service_qos_profile=qos,
            result_timeout=int(RESULT_RETENTION_S),  # 900 s on every distribution (Kilted's default is 10 s)
        )

    def _on_goal(self, _goal: Any) -> GoalResponse:
        """Every goal while the node is active (a refusal comes as its result, with the reason); none once it
        is not: an inactive node answers at once instead of accepting what it would only cancel."""
        return GoalResponse.ACCEPT if self._accepting() else GoalResponse.REJECT

    def _goal_group(self, goal: Any) -> RequestGroup:
        """The requests a Reason goal asks for: its task (or tasks) with its settings."""
        if goal.task and goal.tasks:
            names: tuple[str, ...] = ()
            problem = "set task or tasks, not both"
        else:
            names, problem = tuple(goal.tasks) or ((goal.task,) if goal.task else ()), ""
        settings = GroupSettings(
            instruction=goal.instruction,
            step=goal.step,
            cameras=tuple(goal.cameras),
            clip_seconds=float(goal.clip_seconds),
            instructions=tuple(goal.instructions),
            deadline_s=float(goal.deadline_s),
            reasoning=not goal.reasoning_off,
            max_result_age_s=float(goal.max_result_age_s),
            explicit_instruction=bool(goal.instruction),
        )
        group = self._new_group(names, settings)
        return RequestGroup(group.specs, group.explicit_instruction, problem or group.problem)

    def destroy(self) -> None:
        self._server.destroy()

    def _feedback(
        self, goal_handle: ServerGoalHandle, accepted: float, group: RequestGroup
    ) -> ProgressCallback:
        tasks = {s.request_id: s.task for s in group.specs}
        first = group.specs[0]
        deadline = accepted + first.deadline_s if first.deadline_s > 0 else None
        last: dict[str, tuple[float, str]] = {}  # request id -> (time, stage) of its last feedback
        lock = threading.Lock()  # several tasks report from their own threads

        def on_progress(stage: str, text: str, request_id: str) -> None:
            now = time.monotonic()
            with lock:
                last_time, last_stage = last.get(request_id, (0.0, ""))
                if stage == last_stage == "streaming" and now - last_time < self._min_gap:
                    return  # throttle streamed text, never stage changes
                last[request_id] = (now, stage)
            goal_handle.publish_feedback(
                Reason.Feedback(
                    stage=STAGES.index(stage),
                    stage_name=stage,
                    partial_text=text,
                    elapsed_s=now - accepted,
                    time_left_s=max(0.0, deadline - now) if deadline is not None else -1.0,
                    task=tasks.get(request_id, ""),
                    request_id=request_id,
                )
            )

        return on_progress

    async def _execute(self, goal_handle: ServerGoalHandle) -> Any:
        goal = goal_handle.request
        accepted = time.monotonic()
        done: Future = Future(executor=self._node.executor)
        # A done callback makes set_result (called on the delivery thread) wake the executor, which then
        # resumes this coroutine; without one nothing would wake it.
        done.add_done_callback(lambda _f: None)
        group = self._goal_group(goal)
        job = self._submit(group, self._feedback(goal_handle, accepted, group), done.set_result)
        key = bytes(goal_handle.goal_id.uuid)
        with self._lock:
            self._jobs[key] = job
        if goal_handle.is_cancel_requested:  # a cancel that came before the job was registered
            self._cancel(job)
        try:
            outcomes = await done
        finally:
            with self._lock:
                self._jobs.pop(key, None)
        assert outcomes
        results = [self._result_msg(outcome) for outcome in outcomes]
        result = Reason.Result(result=results[0], results=results)
        if goal_handle.is_cancel_requested and any(o.error_kind == "cancelled" for o in outcomes):
            goal_handle.canceled()
        elif all(o.success for o in outcomes):
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result

    def _on_cancel(self, goal_handle: ServerGoalHandle) -> CancelResponse:
        with self._lock:
            job = self._jobs.get(bytes(goal_handle.goal_id.uuid))
        if job is not None:
            self._cancel(job)
        return CancelResponse.ACCEPT
