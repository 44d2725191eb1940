"""The handoff's decisions, without ROS: a state machine fed by the node's outcomes, the planner's IsPathValid
answers, confirmations, the Nav2 goal's response, feedback and result, and the clock; each call returns a
Step: the decisions made (to publish) and the commands for the ROS edge (ask IsPathValid, send a goal, cancel
one).

Rules it keeps, whatever the order of events (test/handoff/test_decision.py drives it with generated
sequences):
- Nothing is sent unless every gate passed, the age gate checked again at the moment of sending.
- One proposal at a time: a newer answer's path supersedes one still validating or awaiting confirmation.
- An answer whose clip is not newer than the path sent or proposed never preempts it.
- A newer answer that is refused leaves the goal in flight or cancels it (handoff.on_refusal).
- Each answer the handoff takes gets exactly one first decision (its ReasonerResult's), and every goal sent
  ends in exactly one goal event (rejected, succeeded, failed, canceled or preempted) once Nav2 reports it.
- Bounded: groups awaiting agreement and goals awaiting their result are few; the oldest go first.
- Discovery: for discovery_timeout_s after activate (a fresh process takes 0.1-3 s to see a server), a
  path whose Nav2 action server (or IsPathValid) is not discovered yet waits for it (a `waiting` decision)
  instead of being refused; the age gate still holds it to max_age_s.
- Stop (deactivate, cleanup, shutdown): nothing is taken, proposed or sent until activate; under on_stop
  cancel the goal in flight is cancelled (its end still comes back as a goal event).
- Feedback: each goal's feedback is a decision at most every FEEDBACK_PERIOD_S (steady clock).
- A goal's response lost: none within goal_response_timeout_s (steady clock) ends the goal as goal_rejected
  and cancels it by its id; a response after that is no second decision (accepted: cancelled at once).
- A goal's result lost: once the action's status says the goal ended (succeeded, canceled, aborted), no
  result within result_timeout_s (steady clock) ends it from the status; whichever comes first, the result
  or that end, is its one final decision (a cancel's answer is not awaited: the end of a cancelled goal is
  its result or its status)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from cosmos_reasoner_ros.errors import BusyError, RequestCancelled, TaskError
from cosmos_reasoner_ros.geometry import Intrinsics, ns_to_seconds, seconds_to_ns
from cosmos_reasoner_ros.handoff import gates
from cosmos_reasoner_ros.handoff.goal_events import FEEDBACK_PERIOD_S, STOPPED, GoalEvents
from cosmos_reasoner_ros.handoff.ground_path import ground_path
from cosmos_reasoner_ros.handoff.settings import HandoffSettings
from cosmos_reasoner_ros.handoff.steps import (
    Answer,
    CancelGoal,
    Command,
    Goal,
    HandoffStatus,
    Proposal,
    SendGoal,
    Step,
    ValidatePath,
)
from cosmos_reasoner_ros.requests import Check, DecisionKind, HandoffDecision, Outcome

__all__ = [
    "FEEDBACK_PERIOD_S",
    "STOPPED",
    "CancelGoal",
    "Command",
    "Handoff",
    "HandoffStatus",
    "SendGoal",
    "Step",
    "ValidatePath",
]

K = DecisionKind
_MAX_GROUPS = 8  # clips awaiting agreement at most
_MAX_OLD_GOALS = 16  # preempted or cancelled goals awaiting their result at most
GOAL_STATUSES = ("succeeded", "aborted", "canceled", "unknown")
# Error kinds of requests that never asked the Reasoner (errors.py): a trigger refused while busy or invalid,
# a request cancelled by its caller or at shutdown. They say nothing about the scene.
NOT_ANSWERS = frozenset({BusyError.kind, TaskError.kind, RequestCancelled.kind})
_WAIT_SEND, _WAIT_VALIDATE = "send", "validate"  # what a path waiting for discovery goes on to


class Handoff(GoalEvents):
    """The decisions of one node's handoff; thread-safe (outcomes arrive on the delivery thread, answers and
    goal events on executor threads)."""

    def __init__(
        self,
        settings: HandoffSettings,
        server_problem: Callable[[], str] = lambda: "",
        camera: str = "",
        path_valid_problem: Callable[[], str] = lambda: "",
        clock: Callable[[], float] = time.monotonic,
        discoverable: bool = True,
    ) -> None:
        """`server_problem`, `path_valid_problem`: why no goal can be sent, no IsPathValid asked now ("":
        there); `clock`: steady seconds (discovery, feedback); `discoverable`: a missing server may yet be
        discovered (False: nav2_msgs is absent, nothing waits). Made active: as after activate."""
        self.settings = settings
        self.camera = camera or settings.camera
        self.plane = settings.ground_plane()
        self.limits = settings.path_limits()
        self._tasks = frozenset(settings.task_names())
        self._server_problem = server_problem  # why no goal can be sent now ("": the server is there)
        self._path_valid_problem = path_valid_problem
        self._clock = clock
        self._discoverable = discoverable
        self._active_since = clock()
        self._stopped = False
        self._lock = threading.RLock()
        self._groups: collections.OrderedDict[str, list[Answer]] = collections.OrderedDict()
        self._proposal: Proposal | None = None
        self._goal: Goal | None = None
        self._old_goals: collections.OrderedDict[str, Goal] = collections.OrderedDict()
        self._given_up: collections.OrderedDict[str, Goal] = collections.OrderedDict()
        self._latest_ns = 0  # the clip end of the newest path sent or proposed
        self._counts: collections.Counter[str] = collections.Counter()
        self._refused: collections.Counter[str] = collections.Counter()
        self._last: HandoffDecision | None = None
        self._last_result: HandoffDecision | None = None

    # -- inputs ------------------------------------------------------------------------------------------

    def takes(self, outcome: Outcome) -> bool:
        """The handoff decides about answers of its tasks on its camera (a request that got no clip: asked of
        its camera, or of every camera). A request that never asked the Reasoner (busy, invalid, cancelled)
        is no answer: nothing is decided about it, and the goal in flight is left as it is."""
        if self._stopped or outcome.task not in self._tasks or outcome.error_kind in NOT_ANSWERS:
            return False
        if outcome.answer_camera:
            return outcome.answer_camera == self.camera
        return not outcome.cameras or self.camera in outcome.cameras

    def consider(
        self, outcome: Outcome, now_ns: int, intrinsics: Intrinsics | str | None, frame_id: str
    ) -> Step:
        """An outcome as it is published (after the node's geometric checks): its first decision, and what to
        do. Nothing for an outcome the handoff does not take (nor while stopped). `intrinsics`: the camera's
        (None: no CameraInfo yet; a string: why the newest is unusable)."""
        if not self.takes(outcome):
            return Step()
        s = self.settings
        answer = Answer(
            outcome.request_id, outcome.clip_id, outcome.task, outcome.clip_end_ns or outcome.trigger_ns
        )
        answer.gates.append(gates.answer_gate(outcome))
        required = s.required_checks()
        if answer.passed and required:
            answer.gates.append(gates.checks_gate(outcome, required))
        if answer.passed:
            made = ground_path(outcome, intrinsics, self.plane, self.limits, frame_id)
            answer.gates.append(gates.ground_path_gate(made, s.max_start_distance_m))
            if answer.passed and not isinstance(made, str):
                answer.path = made
        with self._lock:
            if self._stopped:  # stopped while the path was made
                return Step()
            if s.agreement_answers > 1:
                return self._record(self._gather(answer, now_ns))
            if not answer.passed:
                return self._record(self._refuse(answer, now_ns))
            return self._record(self._onward(answer, now_ns))

    def validated(
        self, request_id: str, valid: bool | None, invalid_indices: tuple[int, ...], error: str, now_ns: int
    ) -> Step:
        """IsPathValid's answer about a proposal (valid None: no answer, error says why)."""
        with self._lock:
            proposal = self._proposal
            if proposal is None or proposal.answer.request_id != request_id or proposal.stage != K.VALIDATING:
                return Step()  # about a proposal superseded meanwhile
            answer = proposal.answer
            answer.gates.append(gates.path_valid_gate(valid, invalid_indices, error))
            if not answer.passed:
                self._proposal = None
                return self._record(self._refuse(answer, now_ns))
            if self.settings.confirm:
                proposal.stage, proposal.since_ns = K.AWAITING_CONFIRMATION, now_ns
                return self._record(self._awaiting(answer, now_ns))
            self._proposal = None
            return self._record(self._send(answer, now_ns, recheck=True))

    def confirm(self, request_id: str, accept: bool, now_ns: int) -> tuple[Step, bool, str]:
        """~/handoff/confirm: accept or reject the proposal awaiting confirmation (request_id empty: the
        newest one). With whether one was answered, and what followed, in words."""
        with self._lock:
            proposal = self._proposal
            if proposal is None or proposal.stage != K.AWAITING_CONFIRMATION:
                return Step(), False, "no proposal awaits confirmation"
            answer = proposal.answer
            if request_id and request_id != answer.request_id:
                return (
                    Step(),
                    False,
                    f"request {request_id!r} awaits no confirmation (the proposal awaiting it: "
                    f"{answer.request_id})",
                )
            self._proposal = None
            answer.gates.append(
                gates.confirmation_gate(
                    accept, "accepted on ~/handoff/confirm" if accept else "rejected on ~/handoff/confirm"
                )
            )
            step = self._send(answer, now_ns, recheck=True) if accept else self._refuse(answer, now_ns)
            self._record(step)
            first = step.decisions[0]
            return step, True, f"{first.decision}: {first.reason}"

    def tick(self, now_ns: int) -> Step:
        """The clock: a validation unanswered for server_timeout_s, a proposal unconfirmed until its answer is
        older than max_age_s, and a clip's answers still incomplete then, are refused; a path waiting for
        discovery goes on once its server is there, or is refused when the window or its age ran out; a goal
        whose status told its end result_timeout_s ago, with no result, ends from the status; a goal with no
        response (nor status) for goal_response_timeout_s is given up (goal_rejected) and cancelled."""
        s = self.settings
        step = Step()
        with self._lock:
            proposal = self._proposal
            if proposal is not None and proposal.stage == K.WAITING:
                step += self._discovered(proposal, now_ns)
            elif proposal is not None:
                answer = proposal.answer
                if proposal.stage == K.VALIDATING and now_ns - proposal.since_ns > seconds_to_ns(
                    s.server_timeout_s
                ):
                    self._proposal = None
                    answer.gates.append(
                        gates.path_valid_gate(
                            None, (), f"no answer within server_timeout_s ({s.server_timeout_s:g} s)"
                        )
                    )
                    step += self._refuse(answer, now_ns)
                elif (
                    proposal.stage == K.AWAITING_CONFIRMATION
                    and ns_to_seconds(now_ns - answer.observed_ns) > s.max_age_s
                ):
                    self._proposal = None
                    answer.gates.append(
                        gates.confirmation_gate(
                            False, f"not confirmed before the answer was max_age_s ({s.max_age_s:g} s) old"
                        )
                    )
                    step += self._refuse(answer, now_ns)
            for clip_id in list(self._groups):
                group = self._groups[clip_id]
                if ns_to_seconds(now_ns - group[0].observed_ns) > s.max_age_s:
                    step += self._incomplete(clip_id, now_ns)
            step += self._status_ends(now_ns)
            step += self._overdue(now_ns)
            return self._record(step)

    # -- the goal's events (the ROS edge reports them) ---------------------------------------------------

    def activate(self) -> None:
        """After lifecycle activate: answers are taken again, and the discovery window starts anew."""
        with self._lock:
            self._stopped, self._active_since = False, self._clock()

    def discovering(self) -> bool:
        """Within discovery_timeout_s of activate: a server not seen yet may only be undiscovered."""
        return self._discoverable and self._clock() - self._active_since < self.settings.discovery_timeout_s

    def stop(self, now_ns: int, why: str) -> Step:
        """The node stops (`why`: deactivate, cleanup, shutdown): nothing is taken or sent until activate; a
        path waiting (agreement, discovery, validation, confirmation) is refused; under on_stop cancel the
        goal in flight is cancelled (dry run: would_cancel). Once: a second stop does nothing."""
        with self._lock:
            if self._stopped:
                return Step()
            self._stopped = True
            step = Step()
            reason = f"the node stopped ({why}) before it was sent"
            for clip_id in list(self._groups):
                answer = self._groups.pop(clip_id)[-1]
                step += self._decide(answer, K.REFUSED, reason, now_ns)
            if self._proposal is not None:
                step += self._decide(self._proposal.answer, K.REFUSED, reason, now_ns)
                self._proposal = None
            goal = self._goal
            if self.settings.on_stop == "cancel" and goal is not None and not goal.cancel_requested:
                why_cancel = f"the node stops ({why}); on_stop is cancel"
                if self.settings.dry_run:
                    self._goal = None
                    step += self._goal_event(goal, K.WOULD_CANCEL, why_cancel, now_ns)
                else:
                    goal.cancel_requested = True
                    step += self._goal_event(goal, K.CANCEL, why_cancel, now_ns)
                    if goal.accepted:  # else once its response comes (goal_response)
                        step += Step(commands=(CancelGoal(goal.answer.request_id),))
            return self._record(step)

    def status(self) -> HandoffStatus:
        with self._lock:
            goal = self._goal
            state = ""
            if goal is not None:
                state = "cancelling" if goal.cancel_requested else ("active" if goal.accepted else "sending")
            return HandoffStatus(
                counts=dict(self._counts),
                refused=dict(self._refused),
                last=self._last,
                goal=goal.answer.request_id if goal else "",
                goal_state=state,
                distance_to_goal=goal.distance if goal else 0.0,
                speed=goal.speed if goal else 0.0,
                last_result=self._last_result,
            )

    # -- the steps ---------------------------------------------------------------------------------------

    def _gather(self, answer: Answer, now_ns: int) -> Step:
        """Agreement: the answers about one clip are collected until agreement_answers have come."""
        s = self.settings
        step = Step()
        if answer.clip_id not in self._groups and len(self._groups) >= _MAX_GROUPS:
            step += self._incomplete(next(iter(self._groups)), now_ns)
        group = self._groups.setdefault(answer.clip_id, [])
        group.append(answer)
        if len(group) < s.agreement_answers:
            if not answer.passed:  # its own gate failed: the clip's agreement cannot pass
                return step + self._decide(answer, K.REFUSED, self._why(answer), now_ns)
            more = s.agreement_answers - len(group)
            return step + self._decide(
                answer,
                K.WAITING,
                f"answer {len(group)} of {s.agreement_answers} about clip {answer.clip_id}: "
                f"waiting for {more} more to agree",
                now_ns,
            )
        del self._groups[answer.clip_id]
        verdict, chosen = gates.agreement_gate(
            [a.path if a.passed else None for a in group], s.agreement_answers, s.agreement_max_spread_m
        )
        answer.gates.append(verdict)
        if not verdict.passed:
            return step + self._refuse(answer, now_ns)
        answer.path = group[chosen].path
        return step + self._onward(answer, now_ns)

    def _incomplete(self, clip_id: str, now_ns: int) -> Step:
        group = self._groups.pop(clip_id)
        answer = group[-1]
        answer.gates.append(
            Check(
                gates.AGREEMENT,
                False,
                0.0,
                self.settings.agreement_max_spread_m,
                f"only {len(group)} of {self.settings.agreement_answers} answers about clip {clip_id} came",
            )
        )
        return self._refuse(answer, now_ns)

    def _onward(self, answer: Answer, now_ns: int) -> Step:
        """Past the answer's own gates: age, newer, then IsPathValid, confirmation, or sent."""
        s = self.settings
        answer.gates.append(gates.age_gate(answer.observed_ns, now_ns, s.max_age_s))
        if not answer.passed:
            return self._refuse(answer, now_ns)
        answer.gates.append(gates.newer_gate(answer.observed_ns, self._latest_ns))
        if not answer.passed:
            return self._refuse(answer, now_ns, cancel=False)  # older: it says nothing about the goal
        step = Step()
        if self._proposal is not None:
            old = self._proposal.answer
            step += self._decide(
                old, K.SUPERSEDED, f"request {answer.request_id}'s newer path replaced this proposal", now_ns
            )
            self._proposal = None
        self._latest_ns = answer.observed_ns
        if s.validate_path:
            return step + self._validate(answer, now_ns)
        if s.confirm:
            self._proposal = Proposal(answer, K.AWAITING_CONFIRMATION, now_ns)
            return step + self._awaiting(answer, now_ns)
        return step + self._send(answer, now_ns)

    def _validate(self, answer: Answer, now_ns: int) -> Step:
        """Ask IsPathValid; while it is not discovered yet (within the window), wait for it."""
        s = self.settings
        problem = self._path_valid_problem()
        if problem and self.discovering():
            return self._wait(answer, _WAIT_VALIDATE, f"IsPathValid on {s.is_path_valid_service}", now_ns)
        if problem:
            answer.gates.append(gates.path_valid_gate(None, (), problem))
            return self._refuse(answer, now_ns)
        self._proposal = Proposal(answer, K.VALIDATING, now_ns)
        assert answer.path is not None
        return self._decide(
            answer, K.VALIDATING, f"asking IsPathValid on {s.is_path_valid_service}", now_ns
        ) + Step(commands=(ValidatePath(answer.request_id, answer.path),))

    def _wait(self, answer: Answer, then: str, what: str, now_ns: int) -> Step:
        self._proposal = Proposal(answer, K.WAITING, now_ns, then)
        left = max(0.0, self.settings.discovery_timeout_s - (self._clock() - self._active_since))
        return self._decide(
            answer,
            K.WAITING,
            f"waiting up to {left:.1f} s more for {what} to be discovered (discovery_timeout_s "
            f"{self.settings.discovery_timeout_s:g} s after activate)",
            now_ns,
        )

    def _discovered(self, proposal: Proposal, now_ns: int) -> Step:
        """A path waiting for discovery: on once its server is there; refused when its age or the window ran
        out (at age, or at the gate of the server still absent)."""
        answer, s = proposal.answer, self.settings
        validating = proposal.then == _WAIT_VALIDATE
        problem = self._path_valid_problem() if validating else self._server_problem()
        if problem and ns_to_seconds(now_ns - answer.observed_ns) > s.max_age_s:
            self._proposal = None
            answer.gates.append(gates.age_gate(answer.observed_ns, now_ns, s.max_age_s))
            return self._refuse(answer, now_ns)
        if problem and self.discovering():
            return Step()
        self._proposal = None
        if validating:
            return self._validate(answer, now_ns)
        return self._send(answer, now_ns, recheck=True)

    def _awaiting(self, answer: Answer, now_ns: int) -> Step:
        return self._decide(
            answer,
            K.AWAITING_CONFIRMATION,
            "proposed: call ~/handoff/confirm to send it (or reject it) before it is "
            f"{self.settings.max_age_s:g} s old",
            now_ns,
        )

    def _send(self, answer: Answer, now_ns: int, recheck: bool = False) -> Step:
        """Send (or, dry, would send) the answer's path: after validation or confirmation (which take time)
        the age gate once more, then the server on the graph, then the goal; it preempts the one in flight."""
        s = self.settings
        if recheck:
            answer.gates.append(gates.age_gate(answer.observed_ns, now_ns, s.max_age_s))
            if not answer.passed:
                return self._refuse(answer, now_ns)
        if s.dry_run:
            self._goal = Goal(answer, accepted=True)
            return self._decide(answer, K.WOULD_SEND, "every gate passed (dry run: nothing sent)", now_ns)
        problem = self._server_problem()
        if problem and self.discovering():
            return self._wait(answer, _WAIT_SEND, f"the Nav2 action server {s.action}", now_ns)
        answer.gates.append(gates.server_gate(problem, s.action))
        if not answer.passed:
            return self._refuse(answer, now_ns, cancel=False)
        previous = self._goal
        self._goal = Goal(answer, sent_at=self._clock())
        preempts = ""
        if previous is not None:
            self._old_goals[previous.answer.request_id] = previous
            while len(self._old_goals) > _MAX_OLD_GOALS:
                self._old_goals.popitem(last=False)
            preempts = f"; it preempts request {previous.answer.request_id}'s goal"
        assert answer.path is not None
        return self._decide(
            answer, K.SENT, f"every gate passed: sent to {s.action}{preempts}", now_ns, action=s.action
        ) + Step(commands=(SendGoal(answer.request_id, answer.path),))

    def _refuse(self, answer: Answer, now_ns: int, cancel: bool = True) -> Step:
        """The answer is refused; a newer one than the goal in flight cancels it when on_refusal is cancel."""
        step = self._decide(answer, K.REFUSED, self._why(answer), now_ns)
        goal = self._goal
        if (
            cancel
            and self.settings.on_refusal == "cancel"
            and goal is not None
            and not goal.cancel_requested
            and answer.observed_ns > goal.answer.observed_ns
        ):
            why = (
                f"request {answer.request_id}, newer, was refused ({self._why(answer)}); on_refusal is cancel"
            )
            if self.settings.dry_run:
                self._goal = None
                return step + self._goal_event(goal, K.WOULD_CANCEL, why, now_ns)
            goal.cancel_requested = True
            step += self._goal_event(goal, K.CANCEL, why, now_ns)
            if goal.accepted:  # else once its response comes (goal_response)
                step += Step(commands=(CancelGoal(goal.answer.request_id),))
        return step

    @staticmethod
    def _why(answer: Answer) -> str:
        failed = next((g for g in answer.gates if not g.passed), None)
        return f"{failed.name}: {failed.detail}" if failed else ""
