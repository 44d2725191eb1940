"""A Nav2 goal whose result (or the answer to its cancel) is lost (CI, Jazzy, under load: the stand-in took
the cancel, no end reached the node, and the decision stayed open for ever): the action's status topic is a
second source of a goal's end. A goal whose status told its end and whose result has not come within
result_timeout_s ends from the status; whichever comes first, the result or that end, is the goal's one final
decision. Without ROS, against a model (a hypothesis state machine) over sends, responses (accepted, rejected,
lost), Nav2's ends told by the result, the status, both in either order, or the status alone (the result lost,
perhaps late), statuses of every kind (duplicates, not terminal, of goals ended or given up, of no goal of
ours), ticks before and past both deadlines, refusals that cancel, and the node's stop (a cancel whose answer
is lost: only the status tells its end)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import event
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from support.handoff_answers import FRAME, INTRINSICS, NS, Clock, StopsAndActivates, outcome, settings

from cosmos_reasoner_ros.handoff import CancelGoal, Handoff, SendGoal, Step
from cosmos_reasoner_ros.requests import DecisionKind

K = DecisionKind
T0 = 100 * NS
FINAL = (K.GOAL_REJECTED, K.GOAL_SUCCEEDED, K.GOAL_FAILED, K.GOAL_CANCELED, K.GOAL_PREEMPTED)
LOST = "its result was lost (none within result_timeout_s"
NO_RESPONSE = "no response from /follow_path within goal_response_timeout_s"


def _sent(clock: Clock, **kw: object) -> Handoff:
    handoff = Handoff(settings(result_timeout_s=1.0, goal_response_timeout_s=5.0, **kw), clock=clock)
    step = handoff.consider(outcome(request_id="r1", clip_end_ns=T0), T0, INTRINSICS, FRAME)
    assert [type(c) for c in step.commands] == [SendGoal]
    handoff.goal_response("r1", True, T0)
    return handoff


def test_a_goal_whose_result_is_lost_ends_from_its_status_after_result_timeout_s() -> None:
    clock = Clock()
    handoff = _sent(clock)
    handoff.goal_status("r1", "executing")  # not an end: nothing
    handoff.goal_status("r1", "succeeded")
    clock.s += 0.9
    assert handoff.tick(T0 + NS) == Step() and handoff.goal_in_flight()  # the result may yet come
    handoff.goal_status("r1", "aborted")  # a second status changes nothing: the first end counts
    clock.s += 0.1
    (end,) = handoff.tick(T0 + 2 * NS).decisions
    assert end.decision == K.GOAL_SUCCEEDED and end.request_id == "r1"
    assert end.reason == (
        "Nav2 reached the path's end; its result was lost (none within result_timeout_s (1 s)): the status"
        " of /follow_path told the end"
    )
    assert not handoff.goal_in_flight() and handoff.status().last_result == end
    assert handoff.tick(T0 + 3 * NS) == Step()  # once
    # The result comes after all: no second decision.
    assert handoff.goal_result("r1", "succeeded", 0, "", T0 + 4 * NS) == Step()
    assert handoff.status().counts == {K.SENT: 1, K.GOAL_ACCEPTED: 1, K.GOAL_SUCCEEDED: 1}


def test_a_result_within_result_timeout_s_decides_with_its_error_code() -> None:
    clock = Clock()
    handoff = _sent(clock)
    handoff.goal_status("r1", "aborted")
    clock.s += 0.5
    (end,) = handoff.goal_result("r1", "aborted", 105, "stuck", T0 + NS).decisions
    assert (end.decision, end.error_code, end.reason) == (
        K.GOAL_FAILED,
        105,
        "Nav2 aborted: error_code 105: stuck",
    )
    clock.s += 5.0
    assert handoff.tick(T0 + 6 * NS) == Step()


def test_the_stop_s_cancel_with_its_answer_and_result_lost_ends_canceled_from_the_status() -> None:
    clock = Clock()
    handoff = _sent(clock)
    step = handoff.stop(T0 + NS, "deactivate")
    assert [d.decision for d in step.decisions] == [K.CANCEL] and step.commands == (CancelGoal("r1"),)
    handoff.goal_status("r1", "canceled")  # Nav2 took the cancel; its answer and the result never come
    clock.s += 1.0
    (end,) = handoff.tick(T0 + 2 * NS).decisions
    assert end.decision == K.GOAL_CANCELED and end.reason.startswith("Nav2 cancelled the goal; " + LOST)
    assert not handoff.goal_in_flight()


def test_an_aborted_status_of_a_goal_a_newer_one_replaced_is_its_preemption() -> None:
    clock = Clock()
    handoff = _sent(clock)
    handoff.consider(outcome(request_id="r2", clip_end_ns=T0 + NS), T0 + NS, INTRINSICS, FRAME)
    handoff.goal_status("r1", "aborted")
    handoff.goal_status("nobody", "canceled")  # no goal of ours: nothing
    clock.s += 1.0
    (end,) = handoff.tick(T0 + 2 * NS).decisions
    assert (end.request_id, end.decision) == ("r1", K.GOAL_PREEMPTED)
    assert handoff.status().goal == "r2"


@dataclass
class Sent:
    at: float  # the steady clock when it was sent
    response: bool | None = None  # accepted, rejected; None: none came (yet)
    status: str = ""  # the first end its status told while it was open
    status_at: float = 0.0
    status_kind: str = ""  # the final decision the model expects of that status
    finals: list[str] | None = None  # its final decisions, in order
    given_up: bool = False
    nav2_ended: bool = False  # Nav2 ended it (its result and status sent, or lost)
    result_held: tuple[str, int] | None = None  # a result sent late, not delivered yet

    @property
    def open(self) -> bool:
        return not self.finals


def _model_end(status: str, current: bool, error_code: int) -> str:
    """The model's kind of a goal's end (written apart from the handoff's)."""
    if status == "succeeded":
        return K.GOAL_SUCCEEDED
    if status == "canceled":
        return K.GOAL_CANCELED
    if status == "aborted" and error_code == 0 and not current:
        return K.GOAL_PREEMPTED
    return K.GOAL_FAILED


class GoalEndMachine(StopsAndActivates, RuleBasedStateMachine):
    """The model: a goal whose first terminal status came while it was open, and no result since, ends at the
    first tick result_timeout_s (steady clock) after that status, exactly then, as the status says, the
    reason saying that its result was lost; a result while it is open decides instead, with its error code;
    a goal with no response and no status for goal_response_timeout_s is given up as before. Every goal sent
    has at most one final decision, and exactly one once Nav2 ended it (or rejected it) and time passed;
    nothing (no decision, no command) follows a final decision but the CancelGoal of a late acceptance of a
    goal given up; a status not terminal, of no goal of ours, or of a goal ended, changes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.now = T0
        self.next_id = 0
        self.sent: dict[str, Sent] = {}
        self.order: list[str] = []  # the goals sent, oldest first
        self.stopped = False

    @initialize(
        result_timeout=st.sampled_from([0.2, 1.0, 2.5]),
        response_timeout=st.sampled_from([0.3, 1.0, 3.0]),
        on_refusal=st.sampled_from(["keep", "cancel"]),
        on_stop=st.sampled_from(["cancel", "keep"]),
    )
    def configure(
        self, result_timeout: float, response_timeout: float, on_refusal: str, on_stop: str
    ) -> None:
        self.result_timeout, self.response_timeout = result_timeout, response_timeout
        self.handoff = Handoff(
            settings(
                result_timeout_s=result_timeout,
                goal_response_timeout_s=response_timeout,
                on_refusal=on_refusal,
                on_stop=on_stop,
                max_age_s=1.0,
            ),
            clock=self.clock,
        )

    def _pass(self, tenths: int) -> None:
        self.now += tenths * NS // 10
        self.clock.s += tenths / 10

    def _current(self, rid: str) -> bool:
        return bool(self.order) and self.order[-1] == rid

    def check(self, step: Step, finals: dict[str, str] | None = None) -> None:
        """Every step: exactly the final decisions the model expects (`finals`: request id -> kind), nothing
        about a goal after its final decision, and the model's bookkeeping."""
        expected = dict(finals or {})
        for decision in step.decisions:
            event(decision.decision)
            rid = decision.request_id
            if rid not in self.sent:
                continue
            sent = self.sent[rid]
            assert sent.open, f"{decision.decision} about {rid} after its final {sent.finals}"
            if decision.decision not in FINAL:
                continue
            assert expected.pop(rid, None) == decision.decision, (rid, decision.decision, finals)
            sent.finals = [decision.decision]
            if LOST in decision.reason:
                event("ended from the status")
                assert sent.status and decision.decision == sent.status_kind
            if NO_RESPONSE in decision.reason:
                sent.given_up = True
        assert not expected, f"final decisions missing: {expected}"
        for command in step.commands:
            if isinstance(command, CancelGoal) and command.request_id in self.sent:
                sent = self.sent[command.request_id]
                assert sent.open or sent.given_up, command

    def _due(self) -> dict[str, str]:
        """The model's goals to end at a tick now: from the status (its kind), or given up (goal_rejected);
        the same float arithmetic as the handoff's."""
        due = {}
        for rid, s in self.sent.items():
            if not s.open:
                continue
            if s.status and not self.clock.s - s.status_at < self.result_timeout:
                due[rid] = s.status_kind
            elif not s.status and s.response is None and not self.clock.s - s.at < self.response_timeout:
                due[rid] = K.GOAL_REJECTED
        return due

    # -- the node's side -------------------------------------------------------------------------------

    @precondition(lambda self: hasattr(self, "handoff") and not self.stopped and len(self.sent) < 12)
    @rule(gap=st.integers(1, 4), fails=st.sampled_from([False, False, False, True]))
    def an_answer(self, gap: int, fails: bool) -> None:
        """A fresh answer: sent (it preempts the goal in flight), or refused (failed), which cancels the goal
        in flight under on_refusal cancel."""
        self._pass(gap)
        self.next_id += 1
        rid = f"r{self.next_id}"
        kw = {"success": False, "error_kind": "timeout"} if fails else {}
        step = self.handoff.consider(
            outcome(request_id=rid, clip_end_ns=self.now, **kw), self.now, INTRINSICS, FRAME
        )
        self.check(step)
        if any(isinstance(c, SendGoal) for c in step.commands):
            self.sent[rid] = Sent(self.clock.s)
            self.order.append(rid)

    @precondition(lambda self: hasattr(self, "handoff"))
    @rule(tenths=st.integers(1, 15))
    def time_passes(self, tenths: int) -> None:
        self._pass(tenths)
        self.check(self.handoff.tick(self.now), finals=self._due())

    # -- Nav2's side -----------------------------------------------------------------------------------

    def _unanswered(self) -> list[str]:
        return sorted(r for r, s in self.sent.items() if s.response is None and not s.nav2_ended)

    @precondition(lambda self: bool(self._unanswered()))
    @rule(data=st.data(), accepted=st.sampled_from([True, True, False]))
    def nav2_responds(self, data: st.DataObject, accepted: bool) -> None:
        """Nav2's response, in time or late (after the goal was given up)."""
        rid = data.draw(st.sampled_from(self._unanswered()))
        sent = self.sent[rid]
        sent.response = accepted
        if not accepted:
            sent.nav2_ended = True
        step = self.handoff.goal_response(rid, accepted, self.now)
        if not sent.open:
            late_cancel = accepted and sent.given_up
            assert step == (Step(commands=(CancelGoal(rid),)) if late_cancel else Step())
            return
        self.check(step, finals={} if accepted else {rid: K.GOAL_REJECTED})

    def _running(self) -> list[str]:
        return sorted(r for r, s in self.sent.items() if s.response and not s.nav2_ended)

    def _status(self, rid: str, status: str) -> None:
        """The handoff is told a status; the model keeps the first end told of an open goal."""
        sent = self.sent.get(rid)
        if (
            sent is not None
            and sent.open
            and not sent.status
            and status in ("succeeded", "aborted", "canceled")
        ):
            sent.status, sent.status_at = status, self.clock.s
            sent.status_kind = _model_end(status, self._current(rid), 0)
        assert self.handoff.goal_status(rid, status) is None

    def _result(self, rid: str, status: str, code: int) -> None:
        sent = self.sent[rid]
        expected = {rid: _model_end(status, self._current(rid), code)} if sent.open else {}
        step = self.handoff.goal_result(rid, status, code, "", self.now)
        self.check(step, finals=expected)
        if not sent.open and not expected:
            assert step == Step()

    @precondition(lambda self: bool(self._running()))
    @rule(
        data=st.data(),
        status=st.sampled_from(["succeeded", "aborted", "canceled"]),
        code=st.sampled_from([0, 0, 105]),
        how=st.sampled_from(
            ["result", "status, result", "result, status", "status, result lost", "status, late"]
        ),
    )
    def nav2_ends_a_goal(self, data: st.DataObject, status: str, code: int, how: str) -> None:
        """Nav2 ends a goal it accepted (a late one too: it was cancelled): its result and its status, in
        either order; or its status only, the result lost or held back (delivered by a later rule)."""
        rid = data.draw(st.sampled_from(self._running()))
        sent = self.sent[rid]
        sent.nav2_ended = True
        event(how)
        for part in how.split(", "):
            if part == "status":
                self._status(rid, status)
            elif part == "result":
                self._result(rid, status, code)
            elif part == "late":
                sent.result_held = (status, code)

    def _held(self) -> list[str]:
        return sorted(r for r, s in self.sent.items() if s.result_held)

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data())
    def a_held_result_comes(self, data: st.DataObject) -> None:
        """A result that came late: it decides if the goal is still open, else nothing."""
        rid = data.draw(st.sampled_from(self._held()))
        status, code = self.sent[rid].result_held or ("", 0)
        self.sent[rid].result_held = None
        self._result(rid, status, code)

    @precondition(lambda self: hasattr(self, "handoff"))
    @rule(
        data=st.data(),
        status=st.sampled_from(["succeeded", "aborted", "canceled", "executing", "canceling", "unknown"]),
    )
    def a_status_of_any_goal(self, data: st.DataObject, status: str) -> None:
        """The status array repeats every goal it holds: duplicates, statuses of goals ended or given up, not
        terminal, of a goal that is not ours; none makes a decision at once."""
        rid = data.draw(st.sampled_from([*sorted(self.sent), "not-ours"]))
        self._status(rid, status)

    @invariant()
    def at_most_one_final_decision_per_goal(self) -> None:
        assert all(len(s.finals or []) <= 1 for s in self.sent.values())

    def teardown(self) -> None:
        """Nav2 ends every goal it still runs (its status told, the result lost), and time passes beyond every
        deadline: every goal sent has exactly one final decision."""
        if not hasattr(self, "handoff"):
            return
        for rid in self._running():
            self.sent[rid].nav2_ended = True
            self._status(rid, "succeeded")
        self._pass(int(max(self.result_timeout, self.response_timeout) * 10) + 1)
        self.check(self.handoff.tick(self.now), finals=self._due())
        assert {rid: len(s.finals or []) for rid, s in self.sent.items()} == dict.fromkeys(self.sent, 1)
        assert not self.handoff.goal_in_flight()


TestGoalEndMachine = GoalEndMachine.TestCase
TestGoalEndMachine.settings = hsettings(max_examples=200, stateful_step_count=30, deadline=None)
