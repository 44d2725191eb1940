"""A Nav2 goal whose response is lost (CI, Kilted, under load: Fast DDS dropped the goal response before the
node's reader matched, and the decision stayed `sent` for ever): the handoff gives a goal with no response
within goal_response_timeout_s up, as one final goal_rejected, and cancels it by its id; a response that comes
after that is no second decision (an acceptance is cancelled at once). Without ROS, against a model (a
hypothesis state machine) over sends, responses (accepted, rejected, lost, late), ticks before and past the
deadline, refusals that cancel, Nav2's ends, and the node's stop."""

from __future__ import annotations

import collections
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
NO_RESPONSE = "no response from /follow_path within goal_response_timeout_s"


def test_a_goal_unanswered_at_the_deadline_is_given_up_and_cancelled_by_its_id() -> None:
    clock = Clock()
    handoff = Handoff(settings(goal_response_timeout_s=5.0), clock=clock)
    step = handoff.consider(outcome(request_id="r1", clip_end_ns=T0), T0, INTRINSICS, FRAME)
    assert [type(c) for c in step.commands] == [SendGoal]
    clock.s += 4.9
    assert handoff.tick(T0 + 49 * NS // 10) == Step()  # still within the deadline
    assert handoff.status().goal_state == "sending"
    clock.s += 0.1
    step = handoff.tick(T0 + 5 * NS)
    (given_up,) = step.decisions
    assert given_up.decision == K.GOAL_REJECTED and given_up.request_id == "r1"
    assert given_up.reason == (
        "no response from /follow_path within goal_response_timeout_s (5 s): given up, and cancelled by its "
        "goal id"
    )
    assert step.commands == (CancelGoal("r1"),)
    assert not handoff.goal_in_flight() and handoff.status().last_result == given_up
    assert handoff.tick(T0 + 6 * NS) == Step()  # once
    # The response comes after all: accepted, it is cancelled at once, and no second decision is made.
    assert handoff.goal_response("r1", True, T0 + 7 * NS) == Step(commands=(CancelGoal("r1"),))
    assert handoff.goal_feedback("r1", 1.0, 0.2, T0 + 7 * NS) == Step()
    assert handoff.goal_result("r1", "canceled", 0, "", T0 + 8 * NS) == Step()
    assert handoff.status().counts == {K.SENT: 1, K.GOAL_REJECTED: 1}


def test_a_late_rejection_after_giving_up_changes_nothing_and_a_dry_run_never_gives_up() -> None:
    clock = Clock()
    handoff = Handoff(settings(goal_response_timeout_s=0.5), clock=clock)
    handoff.consider(outcome(request_id="r1", clip_end_ns=T0), T0, INTRINSICS, FRAME)
    clock.s += 1.0
    assert [d.decision for d in handoff.tick(T0 + NS).decisions] == [K.GOAL_REJECTED]
    assert handoff.goal_response("r1", False, T0 + 2 * NS) == Step()
    assert handoff.goal_response("r1", True, T0 + 2 * NS) == Step()  # Nav2 answers a goal once
    dry = Handoff(settings(mode="dry_run", goal_response_timeout_s=0.5), clock=clock)
    dry.consider(outcome(request_id="r2", clip_end_ns=T0), T0, INTRINSICS, FRAME)
    clock.s += 10.0
    assert dry.tick(T0 + NS) == Step() and dry.status().goal == "r2"


@dataclass
class Sent:
    at: float  # the steady clock when it was sent
    response: bool | None = None  # accepted, rejected; None: none came (yet)
    finals: int = 0
    given_up: bool = False
    cancel_asked: bool = False  # a `cancel` decision about it
    cancels: int = 0  # CancelGoal commands about it


class GoalResponseMachine(StopsAndActivates, RuleBasedStateMachine):
    """The model: a goal sent and unanswered for goal_response_timeout_s (steady clock) is given up at the
    next tick, exactly then, with a goal_rejected naming the deadline and a CancelGoal; every goal sent has
    at most one final decision, and exactly one once time has passed and Nav2 ended the goals it accepted;
    no goal_accepted after a goal's final decision; a late acceptance of a goal given up is a CancelGoal and
    nothing else, a late rejection nothing at all."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.now = T0
        self.next_id = 0
        self.sent: dict[str, Sent] = {}
        self.stopped = False

    @initialize(
        timeout=st.sampled_from([0.3, 1.0, 2.5]),
        on_refusal=st.sampled_from(["keep", "cancel"]),
        on_stop=st.sampled_from(["cancel", "keep"]),
    )
    def configure(self, timeout: float, on_refusal: str, on_stop: str) -> None:
        self.timeout = timeout
        self.handoff = Handoff(
            settings(goal_response_timeout_s=timeout, on_refusal=on_refusal, on_stop=on_stop, max_age_s=1.0),
            clock=self.clock,
        )

    def _pass(self, tenths: int) -> None:
        self.now += tenths * NS // 10
        self.clock.s += tenths / 10

    def check(self, step: Step, given_up: set[str] | None = None) -> None:
        """Every step: the model's bookkeeping and the rules that hold in any step. `given_up`: the goals
        this step must give up (a tick's), None: none may be."""
        gave_up = set()
        for decision in step.decisions:
            event(decision.decision)
            rid = decision.request_id
            if rid not in self.sent:
                continue
            sent = self.sent[rid]
            if decision.decision == K.GOAL_ACCEPTED:
                assert sent.finals == 0, f"goal_accepted about {rid} after its final decision"
            if decision.decision == K.CANCEL:
                sent.cancel_asked = True
            if decision.decision in FINAL:
                sent.finals += 1
                assert sent.finals == 1, f"a second final decision about {rid}: {decision.decision}"
            if NO_RESPONSE in decision.reason:
                assert decision.decision == K.GOAL_REJECTED
                gave_up.add(rid)
                sent.given_up = True
        cancels = collections.Counter(c.request_id for c in step.commands if isinstance(c, CancelGoal))
        for rid, n in cancels.items():
            self.sent[rid].cancels += n
        assert gave_up == (given_up or set()), (gave_up, given_up)
        for rid in gave_up:
            assert cancels[rid] == 1, f"goal {rid} given up without a CancelGoal"

    def _overdue(self) -> set[str]:
        """The model's goals to give up now: sent, no response, not ended, the deadline reached (the same
        float arithmetic as the handoff's)."""
        return {
            rid
            for rid, s in self.sent.items()
            if s.response is None and s.finals == 0 and not self.clock.s - s.at < self.timeout
        }

    @precondition(lambda self: not self.stopped and len(self.sent) < 12)
    @rule(gap=st.integers(1, 4), fails=st.sampled_from([False, False, False, True]))
    def an_answer(self, gap: int, fails: bool) -> None:
        """A fresh answer (about a clip newer than every one before): sent, or (failed) refused, which
        cancels the goal in flight under on_refusal cancel."""
        self._pass(gap)
        self.next_id += 1
        rid = f"r{self.next_id}"
        kw = {"success": False, "error_kind": "timeout"} if fails else {}
        step = self.handoff.consider(
            outcome(request_id=rid, clip_end_ns=self.now, **kw), self.now, INTRINSICS, FRAME
        )
        self.check(step)  # a send (it preempts) never gives a goal up: the tick does
        if any(isinstance(c, SendGoal) for c in step.commands):
            assert not fails
            self.sent[rid] = Sent(self.clock.s)

    @precondition(lambda self: hasattr(self, "handoff"))
    @rule(tenths=st.integers(1, 15))
    def time_passes(self, tenths: int) -> None:
        self._pass(tenths)
        self.check(self.handoff.tick(self.now), given_up=self._overdue())

    def _unanswered(self) -> list[str]:
        return sorted(r for r, s in self.sent.items() if s.response is None)

    @precondition(lambda self: bool(self._unanswered()))
    @rule(data=st.data(), accepted=st.sampled_from([True, True, False]))
    def nav2_responds(self, data: st.DataObject, accepted: bool) -> None:
        """Nav2's response, in time or late (after the goal was given up)."""
        rid = data.draw(st.sampled_from(self._unanswered()))
        sent = self.sent[rid]
        late, cancels = sent.given_up, sent.cancels
        step = self.handoff.goal_response(rid, accepted, self.now)
        sent.response = accepted
        if late:
            assert step == (Step(commands=(CancelGoal(rid),)) if accepted else Step())
            event("late acceptance" if accepted else "late rejection")
        self.check(step)
        if not late and sent.finals == 0:
            kinds = [d.decision for d in step.decisions]
            assert kinds == [K.GOAL_ACCEPTED if accepted else K.GOAL_REJECTED]
            if accepted and sent.cancel_asked:  # asked while the response was on its way
                assert sent.cancels == cancels + 1

    def _running(self) -> list[str]:
        return sorted(r for r, s in self.sent.items() if s.response)

    @precondition(lambda self: bool(self._running()))
    @rule(data=st.data(), status=st.sampled_from(["succeeded", "aborted", "canceled"]))
    def nav2_ends_a_goal(self, data: st.DataObject, status: str) -> None:
        """Nav2 ends a goal it accepted (a late one too: it was cancelled); once per goal."""
        rid = data.draw(st.sampled_from(self._running()))
        sent = self.sent[rid]
        finals = sent.finals
        step = self.handoff.goal_result(rid, status, 0, "", self.now)
        sent.response = False  # no more ends of it
        self.check(step)
        assert sent.finals == (finals if sent.given_up or finals else 1)

    @invariant()
    def at_most_one_final_decision_per_goal(self) -> None:
        assert all(s.finals <= 1 for s in self.sent.values())

    def teardown(self) -> None:
        """Time passes beyond every deadline and Nav2 ends what it accepted: every goal sent has exactly one
        final decision."""
        if not hasattr(self, "handoff"):
            return
        self._pass(int(self.timeout * 10) + 1)
        self.check(self.handoff.tick(self.now), given_up=self._overdue())
        for rid in self._running():
            self.check(self.handoff.goal_result(rid, "succeeded", 0, "", self.now))
        assert {rid: s.finals for rid, s in self.sent.items()} == dict.fromkeys(self.sent, 1)


TestGoalResponseMachine = GoalResponseMachine.TestCase
TestGoalResponseMachine.settings = hsettings(max_examples=200, stateful_step_count=30, deadline=None)
