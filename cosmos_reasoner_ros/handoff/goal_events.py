"""Nav2's answers about the goals the handoff sent, as decisions: a goal's response (accepted, rejected), its
feedback (a decision at most every FEEDBACK_PERIOD_S), its result (succeeded, canceled, preempted by a newer
goal, failed), its response lost (none within goal_response_timeout_s: given up as rejected, and cancelled by
its goal id), its result lost (the action's status told the end, and no result came within
result_timeout_s: it ends from the status); and how every decision is made and counted. Handoff (decision.py)
is built on it and owns the state it reads (set in Handoff.__init__)."""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Callable

from cosmos_reasoner_ros.handoff.settings import HandoffSettings
from cosmos_reasoner_ros.handoff.steps import Answer, CancelGoal, Goal, Step
from cosmos_reasoner_ros.requests import DecisionKind, HandoffDecision

__all__ = ["FEEDBACK_PERIOD_S", "STOPPED", "TERMINAL_STATUSES", "GoalEvents"]

K = DecisionKind
FEEDBACK_PERIOD_S = 0.5  # [s] a goal's feedback is published as a decision at most this often (2 Hz)
_MAX_GIVEN_UP = 16  # goals given up (no response in time) whose late response is still cancelled, at most
STOPPED = "stopped"  # the refusals counted without a failed gate: the node stopped before the path was sent
TERMINAL_STATUSES = ("succeeded", "aborted", "canceled")  # the ends a goal's status can tell


class GoalEvents:
    """The goal in flight (and the older ones awaiting their result), Nav2's events about them, and the
    record of every decision; thread-safe under the handoff's lock."""

    settings: HandoffSettings
    _lock: threading.RLock
    _clock: Callable[[], float]
    _goal: Goal | None
    _old_goals: collections.OrderedDict[str, Goal]
    _given_up: collections.OrderedDict[str, Goal]
    _counts: collections.Counter[str]
    _refused: collections.Counter[str]
    _last: HandoffDecision | None
    _last_result: HandoffDecision | None

    def goal_response(self, request_id: str, accepted: bool, now_ns: int, detail: str = "") -> Step:
        with self._lock:
            goal = self._find_goal(request_id)
            if goal is None:
                return self._late_response(request_id, accepted)
            if not accepted:
                self._forget_goal(goal)
                why = detail or "Nav2 rejected the goal"
                return self._record(self._goal_event(goal, K.GOAL_REJECTED, why, now_ns, final=True))
            goal.accepted = True
            step = self._goal_event(goal, K.GOAL_ACCEPTED, detail or "Nav2 accepted the goal", now_ns)
            if goal.cancel_requested:  # asked while the goal's response was on its way
                step += Step(commands=(CancelGoal(request_id),))
            return self._record(step)

    def goal_feedback(self, request_id: str, distance_to_goal: float, speed: float, now_ns: int) -> Step:
        """Nav2's feedback about a goal: kept for /diagnostics, and a goal_feedback decision at most every
        FEEDBACK_PERIOD_S per goal (Nav2 sends it at its controller's rate, 20 Hz and more)."""
        with self._lock:
            goal = self._find_goal(request_id)
            if goal is None:
                return Step()
            goal.distance, goal.speed = float(distance_to_goal), float(speed)
            now = self._clock()
            if not goal.accepted:  # its goal_accepted decision comes first (the response may come later)
                return Step()
            if goal.feedback_at is not None and now - goal.feedback_at < FEEDBACK_PERIOD_S:
                return Step()
            goal.feedback_at = now
            why = f"{goal.distance:.2f} m to go at {goal.speed:.2f} m/s"
            return self._record(self._goal_event(goal, K.GOAL_FEEDBACK, why, now_ns))

    def goal_result(self, request_id: str, status: str, error_code: int, error_msg: str, now_ns: int) -> Step:
        """The goal's end: status "succeeded", "aborted", "canceled" (or "unknown"), with Nav2's error_code
        and error_msg. Aborted with no error code while a newer goal was sent: preempted by it."""
        with self._lock:
            goal = self._find_goal(request_id)
            if goal is None:
                self._given_up.pop(request_id, None)  # a late goal's end: its final decision was made
                return Step()
            current = goal is self._goal
            self._forget_goal(goal)
            kind, why = _end(status, current, error_code)
            if kind == K.GOAL_FAILED:
                why = f"Nav2 {status}: error_code {error_code}" + (f": {error_msg}" if error_msg else "")
            step = self._goal_event(
                goal, kind, why, now_ns, final=True, error_code=error_code, error_msg=error_msg
            )
            return self._record(step)

    def goal_status(self, request_id: str, status: str) -> None:
        """The action's status topic says where a goal is: its first end ("succeeded", "aborted",
        "canceled"; any other status says nothing) is kept, the second source of the goal's end. The goal
        ends from it only when no result comes within result_timeout_s (_status_ends, on the tick): the
        result carries Nav2's error code, and follows its status by milliseconds unless it is lost. A status
        of a goal already ended (or of no goal of ours) changes nothing."""
        with self._lock:
            goal = self._find_goal(request_id)
            if goal is None or goal.status_end is not None or status not in TERMINAL_STATUSES:
                return
            goal.status_end = _end(status, goal is self._goal, 0)
            goal.status_at = self._clock()

    def _status_ends(self, now_ns: int) -> Step:
        """Each goal whose status told its end result_timeout_s ago (steady clock) with no result since (the
        result lost, e.g. its response dropped by DDS) ends as that status says: canceled, succeeded,
        preempted or failed, the reason saying that the status told it."""
        limit = self.settings.result_timeout_s
        now = self._clock()
        step = Step()
        for goal in self._goals():
            if goal.status_end is None or goal.status_at is None or now - goal.status_at < limit:
                continue
            self._forget_goal(goal)
            kind, why = goal.status_end
            why += (
                f"; its result was lost (none within result_timeout_s ({limit:g} s)): the status of"
                f" {self.settings.action} told the end"
            )
            step += self._goal_event(goal, kind, why, now_ns, final=True)
        return step

    def _late_response(self, request_id: str, accepted: bool) -> Step:
        """A response after its goal was given up (or about no goal at all): the goal's one final decision
        was made then; accepted after all, it is cancelled at once (by its handle now), rejected: nothing."""
        given_up = self._given_up.pop(request_id, None)
        if given_up is None or not accepted:
            return Step()
        return Step(commands=(CancelGoal(request_id),))

    def _overdue(self, now_ns: int) -> Step:
        """Each goal sent with no response for goal_response_timeout_s (steady clock; the response lost,
        e.g. dropped by DDS before the reader matched) is given up: its final decision goal_rejected, and a
        cancel by its goal id, in case Nav2 got it and drives; a later response is _late_response's."""
        limit = self.settings.goal_response_timeout_s
        now = self._clock()
        step = Step()
        for goal in self._goals():
            if goal.accepted or goal.sent_at is None or now - goal.sent_at < limit:
                continue
            if goal.status_end is not None:  # Nav2 had it, and ended it: _status_ends decides
                continue
            self._forget_goal(goal)
            request_id = goal.answer.request_id
            self._given_up[request_id] = goal
            while len(self._given_up) > _MAX_GIVEN_UP:
                self._given_up.popitem(last=False)
            why = (
                f"no response from {self.settings.action} within goal_response_timeout_s ({limit:g} s): given"
                " up, and cancelled by its goal id"
            )
            step += self._goal_event(goal, K.GOAL_REJECTED, why, now_ns, final=True)
            step += Step(commands=(CancelGoal(request_id),))
        return step

    def goal_in_flight(self) -> bool:
        """A goal was sent and Nav2 has not ended it (nor rejected it) yet."""
        with self._lock:
            return self._goal is not None and not self.settings.dry_run

    def _goals(self) -> list[Goal]:
        """The goal in flight and the older ones awaiting their end."""
        return ([self._goal] if self._goal is not None else []) + list(self._old_goals.values())

    def _find_goal(self, request_id: str) -> Goal | None:
        if self._goal is not None and self._goal.answer.request_id == request_id:
            return self._goal
        return self._old_goals.get(request_id)

    def _forget_goal(self, goal: Goal) -> None:
        if goal is self._goal:
            self._goal = None
        else:
            self._old_goals.pop(goal.answer.request_id, None)

    def _decide(self, answer: Answer, kind: str, reason: str, now_ns: int, action: str = "") -> Step:
        decision = HandoffDecision(
            request_id=answer.request_id,
            clip_id=answer.clip_id,
            task=answer.task,
            decision=kind,
            reason=reason,
            decided_ns=now_ns,
            gates=tuple(answer.gates),
            path=answer.path,
            dry_run=self.settings.dry_run,
            action=action,
        )
        return Step(decisions=(decision,))

    def _goal_event(
        self,
        goal: Goal,
        kind: str,
        reason: str,
        now_ns: int,
        final: bool = False,
        error_code: int = 0,
        error_msg: str = "",
    ) -> Step:
        step = self._decide(goal.answer, kind, reason, now_ns, action=self.settings.action)
        decision = dataclasses.replace(
            step.decisions[0],
            error_code=int(error_code),
            error_msg=error_msg,
            distance_to_goal=goal.distance,
            speed=goal.speed,
        )
        if final:
            self._last_result = decision
        return Step(decisions=(decision,))

    def _record(self, step: Step) -> Step:
        for decision in step.decisions:
            self._counts[decision.decision] += 1
            if decision.decision == K.REFUSED:
                failed = decision.failed_gate
                self._refused[failed.name if failed else STOPPED] += 1
            if decision.decision != K.GOAL_FEEDBACK:  # the last decision shown is not drowned by feedback
                self._last = decision
        return step


def _end(status: str, current: bool, error_code: int) -> tuple[str, str]:
    """A goal's end as Nav2 tells it (by its result, or by its status: error_code 0), as a decision and its
    reason: aborted with no error code while a newer goal was sent is preempted by it."""
    if status == "succeeded":
        return K.GOAL_SUCCEEDED, "Nav2 reached the path's end"
    if status == "canceled":
        return K.GOAL_CANCELED, "Nav2 cancelled the goal"
    if status == "aborted" and not current and error_code == 0:
        return K.GOAL_PREEMPTED, "Nav2 ended it for the newer goal"
    return K.GOAL_FAILED, f"Nav2 {status} the goal"
