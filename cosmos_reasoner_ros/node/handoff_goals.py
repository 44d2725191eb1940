"""The handoff's Nav2 goals on the ROS side: one action client (FollowPath or NavigateToPose), each goal sent
with a goal id of its own, its response, feedback and result turned into the handoff's events, a cancel by
the goal's handle or, its response not come (or lost), by that id, and each accepted goal's status (the
action's status topic, kept by rclpy on its goal handle) fed to the handoff on its tick. What a response,
result or status means is the handoff's to decide (handoff/goal_events.py); this module only carries it.
"""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Callable
from typing import Any

from action_msgs.msg import GoalStatus
from rclpy.action.client import ActionClient, ClientGoalHandle
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from unique_identifier_msgs.msg import UUID

from cosmos_reasoner_ros.handoff import CancelGoal, Handoff, HandoffSettings, SendGoal, Step
from cosmos_reasoner_ros.node.handoff_messages import base_path_msg

__all__ = ["GoalClient"]

_GOAL_IDS_KEPT = 64  # goal ids of the newest goals sent (a goal given up may still be accepted late)
_STATUSES = {
    GoalStatus.STATUS_SUCCEEDED: "succeeded",
    GoalStatus.STATUS_ABORTED: "aborted",
    GoalStatus.STATUS_CANCELED: "canceled",
}


class GoalClient:
    """The goals of one Nav2 action (`action_type`: nav2_msgs' FollowPath or NavigateToPose). Each event
    goes to `handoff`, and the step it gives to `carry_out` (the edge's), at the node's time `now()`."""

    def __init__(
        self,
        node: Node,
        settings: HandoffSettings,
        action_type: Any,
        group: CallbackGroup,
        handoff: Handoff,
        carry_out: Callable[[Step], None],
        now: Callable[[], int],
    ) -> None:
        self._settings, self._type = settings, action_type
        self._handoff, self._carry_out, self._now = handoff, carry_out, now
        self._action: ActionClient = ActionClient(node, action_type, settings.action, callback_group=group)
        self._lock = threading.Lock()
        self._handles: dict[str, Any] = {}  # request id -> the goal's ClientGoalHandle
        # request id -> the goal id it was sent with (a goal with no response is cancelled by it)
        self._goal_ids: collections.OrderedDict[str, UUID] = collections.OrderedDict()

    def server_is_ready(self) -> bool:
        return bool(self._action.server_is_ready())

    def answered(self, request_id: str) -> bool:
        """Whether the goal of `request_id` has a handle: accepted, and its status told no end yet."""
        with self._lock:
            return request_id in self._handles

    def destroy(self) -> None:
        self._action.destroy()

    def send(self, command: SendGoal) -> None:
        s, rid = self._settings, command.request_id
        path = base_path_msg(command.path)
        goal = self._type.Goal()
        if s.mode == "follow_path":
            goal.path = path
            goal.controller_id, goal.goal_checker_id = s.controller_id, s.goal_checker_id
            if hasattr(goal, "progress_checker_id"):
                goal.progress_checker_id = s.progress_checker_id
        else:
            goal.pose = path.poses[-1]
            goal.behavior_tree = s.behavior_tree

        def feedback(message: Any) -> None:
            fb = message.feedback
            distance = getattr(fb, "distance_to_goal", getattr(fb, "distance_remaining", 0.0))
            speed = float(getattr(fb, "speed", 0.0))
            self._carry_out(self._handoff.goal_feedback(rid, float(distance), speed, self._now()))

        def responded(future: Any) -> None:
            try:
                handle = future.result()
            except Exception as exc:
                self._carry_out(self._handoff.goal_response(rid, False, self._now(), f"no response: {exc!r}"))
                return
            if not handle.accepted:
                with self._lock:
                    self._goal_ids.pop(rid, None)
                self._carry_out(self._handoff.goal_response(rid, False, self._now()))
                return
            with self._lock:
                self._handles[rid] = handle
            self._carry_out(self._handoff.goal_response(rid, True, self._now()))
            handle.get_result_async().add_done_callback(ended)

        def ended(future: Any) -> None:
            with self._lock:
                self._handles.pop(rid, None)
                self._goal_ids.pop(rid, None)
            try:
                answer = future.result()
                status = _STATUSES.get(answer.status, "unknown")
                code = int(getattr(answer.result, "error_code", 0))
                message = str(getattr(answer.result, "error_msg", ""))
            except Exception as exc:
                status, code, message = "unknown", 0, f"no result: {exc!r}"
            self._carry_out(self._handoff.goal_result(rid, status, code, message, self._now()))

        goal_id = UUID(uuid=list(uuid.uuid4().bytes))
        with self._lock:
            self._goal_ids[rid] = goal_id
            while len(self._goal_ids) > _GOAL_IDS_KEPT:
                self._goal_ids.popitem(last=False)
        future = self._action.send_goal_async(goal, feedback_callback=feedback, goal_uuid=goal_id)
        future.add_done_callback(responded)

    def cancel(self, command: CancelGoal) -> None:
        """By the goal's handle once its response came, else by the goal id it was sent with."""
        with self._lock:
            handle = self._handles.get(command.request_id)
            goal_id = self._goal_ids.get(command.request_id)
        if handle is None and goal_id is not None:
            handle = self._handle_of(goal_id)
        if handle is not None:
            handle.cancel_goal_async()

    def _handle_of(self, goal_id: UUID) -> ClientGoalHandle:
        """A handle of a goal whose response has not come (or never will), to cancel it by its id. rclpy's
        ActionClient cancels only through a ClientGoalHandle (its _cancel_goal_async, Jazzy and Kilted, checks
        the type and reads only goal_id), and offers no cancel by id; the handle normally comes with the
        response, the part that was lost. ClientGoalHandle's public constructor makes one of the id and an
        accepted response of our own; the client never registers it (only a response it takes does), so its
        status and result stay the real handle's. The request sent is the same action_msgs/CancelGoal by
        goal id that a real handle sends."""
        response = self._type.Impl.SendGoalService.Response()
        response.accepted = True
        return ClientGoalHandle(self._action, goal_id, response)

    def feed_statuses(self) -> None:
        """Each accepted goal's status, as rclpy's ActionClient keeps it from the action's status topic (its
        public ClientGoalHandle.status): an end told there reaches the handoff, which ends the goal from it
        if the result is lost. A handle whose status told the end is let go (its result callback stays)."""
        with self._lock:
            handles = list(self._handles.items())
        for rid, handle in handles:
            status = _STATUSES.get(handle.status)
            if status is None:
                continue
            self._handoff.goal_status(rid, status)
            with self._lock:
                self._handles.pop(rid, None)
