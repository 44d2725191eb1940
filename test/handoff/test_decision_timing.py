"""The handoff's decisions over time, without ROS (issue 37): a path waits for a Nav2 server not yet
discovered after activate instead of being refused, and is refused when it is truly absent after
discovery_timeout_s (or the path grew too old meanwhile); the same for IsPathValid; the node's stop cancels
the goal it sent (on_stop cancel) and sends nothing after it; Nav2's feedback becomes decisions at most 2 per
second; every refusal is counted by its gate. A hypothesis state machine drives Nav2 discovered late,
appearing, disappearing, and the node stopped with a goal in flight, on a steady clock of its own."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import event
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from support.handoff_answers import (
    AHEAD,
    FAR_START,
    FRAME,
    INTRINSICS,
    LEFT,
    NS,
    TO_THE_SKY,
    Clock,
    outcome,
    settings,
)

from cosmos_reasoner_ros.handoff import FEEDBACK_PERIOD_S, CancelGoal, Handoff, SendGoal, Step, ValidatePath
from cosmos_reasoner_ros.requests import DecisionKind, HandoffDecision

K = DecisionKind
T0 = 100 * NS
ABSENT = "no Nav2 action server on /follow_path (is Nav2's controller server up and active?)"


def mine(step: Step, request_id: str) -> HandoffDecision:
    found = [d for d in step.decisions if d.request_id == request_id]
    assert len(found) == 1, step.decisions
    return found[0]


def consider(handoff: Handoff, request_id: str, clip_end_ns: int, now_ns: int, **kw: Any) -> Step:
    return handoff.consider(
        outcome(request_id=request_id, clip_end_ns=clip_end_ns, **kw), now_ns, INTRINSICS, FRAME
    )


def test_a_path_waits_for_a_server_not_yet_discovered_and_is_sent_once_it_appears() -> None:
    """Finding 3: 5 of 10 first paths after a fresh start were refused at server while discovery ran."""
    clock, problem = Clock(), [ABSENT]
    handoff = Handoff(settings(max_age_s=5.0), server_problem=lambda: problem[0], clock=clock)
    step = consider(handoff, "r1", T0, T0)
    waiting = mine(step, "r1")
    assert waiting.decision == K.WAITING and not step.commands
    assert "to be discovered" in waiting.reason and "/follow_path" in waiting.reason
    clock.s += 1.0
    assert handoff.tick(T0 + NS) == Step()  # still not there, still within the window
    problem[0] = ""
    clock.s += 0.5
    step = handoff.tick(T0 + 2 * NS)
    sent = mine(step, "r1")
    assert sent.decision == K.SENT and [g.name for g in sent.gates][-2:] == ["age", "server"]
    assert sent.path is not None and step.commands == (SendGoal("r1", sent.path),)


def test_a_server_still_absent_after_the_window_refuses_and_then_refuses_at_once() -> None:
    clock = Clock()
    handoff = Handoff(
        settings(max_age_s=30.0, discovery_timeout_s=5.0), server_problem=lambda: ABSENT, clock=clock
    )
    assert mine(consider(handoff, "r1", T0, T0), "r1").decision == K.WAITING
    clock.s += 5.0
    refused = mine(handoff.tick(T0 + NS), "r1")
    assert refused.decision == K.REFUSED and refused.reason == f"server: {ABSENT}"
    assert not handoff.discovering()
    later = mine(consider(handoff, "r2", T0 + 2 * NS, T0 + 2 * NS), "r2")
    assert later.decision == K.REFUSED and later.reason == f"server: {ABSENT}"
    handoff.activate()  # a new activation: a new window
    assert mine(consider(handoff, "r3", T0 + 3 * NS, T0 + 3 * NS), "r3").decision == K.WAITING


def test_a_path_that_grows_too_old_while_waiting_is_refused_at_age() -> None:
    clock = Clock()
    handoff = Handoff(settings(max_age_s=1.0), server_problem=lambda: ABSENT, clock=clock)
    consider(handoff, "r1", T0, T0)
    clock.s += 1.5
    refused = mine(handoff.tick(T0 + 3 * NS // 2), "r1")
    assert refused.decision == K.REFUSED and refused.reason.startswith("age: 1.500 s old")


def test_a_newer_path_supersedes_one_waiting_for_discovery() -> None:
    clock, problem = Clock(), [ABSENT]
    handoff = Handoff(settings(max_age_s=5.0), server_problem=lambda: problem[0], clock=clock)
    consider(handoff, "r1", T0, T0)
    step = consider(handoff, "r2", T0 + NS, T0 + NS)
    assert mine(step, "r1").decision == K.SUPERSEDED and mine(step, "r2").decision == K.WAITING
    problem[0] = ""
    step = handoff.tick(T0 + NS)
    assert [c.request_id for c in step.commands if isinstance(c, SendGoal)] == ["r2"]


def test_is_path_valid_not_yet_discovered_is_waited_for_then_asked() -> None:
    clock, problem = Clock(), ["no IsPathValid service on /is_path_valid (Nav2's planner server)"]
    handoff = Handoff(
        settings(validate_path=True, max_age_s=5.0), path_valid_problem=lambda: problem[0], clock=clock
    )
    step = consider(handoff, "r1", T0, T0)
    assert (
        mine(step, "r1").decision == K.WAITING and "IsPathValid on /is_path_valid" in step.decisions[0].reason
    )
    problem[0] = ""
    step = handoff.tick(T0 + NS // 10)
    assert mine(step, "r1").decision == K.VALIDATING
    assert [type(c) for c in step.commands] == [ValidatePath]
    # After the window, a planner still absent refuses at path_valid, saying why.
    problem[0] = "no IsPathValid service on /is_path_valid (Nav2's planner server)"
    handoff.validated("r1", True, (), "", T0 + NS // 5)  # r1 goes on (sent)
    clock.s += 10.0
    refused = mine(consider(handoff, "r2", T0 + NS, T0 + NS), "r2")
    assert refused.decision == K.REFUSED
    assert refused.reason == f"path_valid: no answer from IsPathValid: {problem[0]}"


def test_without_nav2_msgs_nothing_waits() -> None:
    handoff = Handoff(settings(), server_problem=lambda: "nav2_msgs is not importable", discoverable=False)
    assert mine(consider(handoff, "r1", T0, T0), "r1").decision == K.REFUSED


@pytest.mark.parametrize("accepted", [True, False])
def test_the_node_s_stop_cancels_the_goal_it_sent_and_sends_nothing_after(accepted: bool) -> None:
    """Finding 4: after SIGINT, deactivate or cleanup the goal ran on. A goal not yet accepted is cancelled
    when its acceptance comes."""
    handoff = Handoff(settings(on_stop="cancel"))
    consider(handoff, "r1", T0, T0)
    if accepted:
        handoff.goal_response("r1", True, T0)
    step = handoff.stop(T0 + NS, "deactivate")
    cancel = mine(step, "r1")
    assert cancel.decision == K.CANCEL and cancel.reason == "the node stops (deactivate); on_stop is cancel"
    assert step.commands == ((CancelGoal("r1"),) if accepted else ())
    assert handoff.goal_in_flight()
    if not accepted:
        assert handoff.goal_response("r1", True, T0 + NS).commands == (CancelGoal("r1"),)
    assert consider(handoff, "r2", T0 + 2 * NS, T0 + 2 * NS) == Step()  # not taken while stopped
    assert handoff.stop(T0 + 2 * NS, "cleanup") == Step()  # once
    end = mine(handoff.goal_result("r1", "canceled", 0, "", T0 + 2 * NS), "r1")
    assert end.decision == K.GOAL_CANCELED and not handoff.goal_in_flight()
    handoff.activate()
    assert mine(consider(handoff, "r3", T0 + 3 * NS, T0 + 3 * NS), "r3").decision == K.SENT


def test_on_stop_keep_leaves_the_goal_and_a_waiting_path_is_refused_at_stop() -> None:
    handoff = Handoff(settings(on_stop="keep", confirm=True))
    consider(handoff, "r1", T0, T0)
    handoff.confirm("r1", True, T0)
    handoff.goal_response("r1", True, T0)
    consider(handoff, "r2", T0 + NS // 2, T0 + NS // 2)  # awaiting confirmation
    step = handoff.stop(T0 + NS, "shutdown")
    assert [(d.request_id, d.decision) for d in step.decisions] == [("r2", K.REFUSED)]
    assert step.decisions[0].reason == "the node stopped (shutdown) before it was sent"
    assert not step.commands and handoff.status().goal == "r1"
    assert handoff.status().refused == {"stopped": 1}


def test_feedback_is_a_decision_at_most_twice_a_second_per_goal() -> None:
    """Finding 5: 12 feedbacks in 3 s produced no decision."""
    clock = Clock()
    handoff = Handoff(settings(), clock=clock)
    consider(handoff, "r1", T0, T0)
    # Feedback may come before the goal's response: no decision until goal_accepted is decided (seen in the
    # node test: goal_feedback published before goal_accepted).
    assert handoff.goal_feedback("r1", 3.5, 0.25, T0) == Step()
    assert handoff.status().distance_to_goal == pytest.approx(3.5)
    handoff.goal_response("r1", True, T0)
    published = []
    for i in range(60):  # 3 s of feedback at 20 Hz
        step = handoff.goal_feedback("r1", 3.0 - i * 0.05, 0.25, T0 + i * NS // 20)
        published += [d for d in step.decisions if d.decision == K.GOAL_FEEDBACK]
        clock.s += 0.05
    assert len(published) == 6  # 3 s at most 2 per second
    assert published[0].distance_to_goal == pytest.approx(3.0) and published[0].speed == pytest.approx(0.25)
    assert published[0].reason == "3.00 m to go at 0.25 m/s"
    assert handoff.status().last is not None and handoff.status().last.decision == K.GOAL_ACCEPTED
    assert handoff.goal_feedback("nobody", 1.0, 0.1, T0) == Step()


def test_every_refusal_is_counted_by_its_gate() -> None:
    handoff = Handoff(settings(), server_problem=lambda: ABSENT, discoverable=False)
    consider(handoff, "r1", T0, T0, points=TO_THE_SKY)
    consider(handoff, "r2", T0, T0, points=FAR_START)
    consider(handoff, "r3", T0, T0 + 5 * NS)
    consider(handoff, "r4", T0, T0)
    assert handoff.status().refused == {"ground_path": 2, "age": 1, "server": 1}


# -- generated: Nav2 discovered late, appearing, disappearing; the node stopped with a goal in flight ------


class TimingMachine(RuleBasedStateMachine):
    """Invariants after every step: no goal is sent for a path that was refused, none while Nav2 is absent
    and none while the node is stopped; a goal sent before the stop under on_stop cancel is cancelled (at
    once, or when its acceptance comes); feedback decisions at most every FEEDBACK_PERIOD_S per goal."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.now = T0
        self.next_id = 0
        self.server = False
        self.planner = False
        self.stopped = False
        self.refused: set[str] = set()
        self.sent: list[str] = []
        self.accepted: set[str] = set()
        self.cancelled: set[str] = set()  # CancelGoal issued
        self.ended: set[str] = set()
        self.validating = ""
        self.feedback_at: dict[str, float] = {}

    @initialize(
        on_stop=st.sampled_from(["cancel", "cancel", "keep"]),
        validate=st.booleans(),
        window=st.sampled_from([0.0, 2.0, 5.0]),
        server=st.booleans(),
    )
    def start(self, on_stop: str, validate: bool, window: float, server: bool) -> None:
        self.server = server
        self.settings = settings(
            on_stop=on_stop, validate_path=validate, discovery_timeout_s=window, max_age_s=3.0
        )
        self.handoff = Handoff(
            self.settings,
            server_problem=lambda: "" if self.server else ABSENT,
            path_valid_problem=lambda: "" if self.planner else "no IsPathValid service",
            clock=self.clock,
        )

    def check(self, step: Step) -> None:
        for decision in step.decisions:
            event(decision.decision)
            if decision.decision == K.REFUSED:
                self.refused.add(decision.request_id)
            if decision.decision == K.VALIDATING:
                self.validating = decision.request_id
            if decision.decision in (K.GOAL_REJECTED, K.GOAL_CANCELED, K.GOAL_SUCCEEDED, K.GOAL_FAILED):
                self.ended.add(decision.request_id)
            if decision.decision == K.GOAL_FEEDBACK:
                last = self.feedback_at.get(decision.request_id)
                assert last is None or self.clock.s - last >= FEEDBACK_PERIOD_S - 1e-9
                self.feedback_at[decision.request_id] = self.clock.s
        for command in step.commands:
            if isinstance(command, SendGoal):
                assert command.request_id not in self.refused, "a goal sent for a refused path"
                assert self.server, "a goal sent while Nav2 is absent"
                assert not self.stopped, "a goal sent after the node stopped"
                self.sent.append(command.request_id)
            if isinstance(command, CancelGoal):
                self.cancelled.add(command.request_id)

    @rule(
        points=st.sampled_from([AHEAD, AHEAD, LEFT, TO_THE_SKY]),
        age=st.integers(0, 20),
        gap=st.integers(1, 5),
    )
    def answer(self, points: Any, age: int, gap: int) -> None:
        self.now += gap * NS // 10
        self.clock.s += gap / 10
        self.next_id += 1
        rid = f"r{self.next_id}"
        step = consider(self.handoff, rid, self.now - age * NS // 10, self.now, points=points)
        assert len(step.decisions) >= (0 if self.stopped else 1)
        if self.stopped:
            assert step == Step()
        self.check(step)

    @rule(tenths=st.integers(1, 30))
    def time_passes(self, tenths: int) -> None:
        self.now += tenths * NS // 10
        self.clock.s += tenths / 10
        self.check(self.handoff.tick(self.now))

    @rule()
    def nav2_appears(self) -> None:
        self.server = True

    @rule()
    def nav2_disappears(self) -> None:
        self.server = False

    @rule(there=st.booleans())
    def planner_changes(self, there: bool) -> None:
        self.planner = there

    @precondition(lambda self: bool(self.validating))
    @rule(valid=st.sampled_from([True, True, False]))
    def planner_answers(self, valid: bool) -> None:
        self.check(self.handoff.validated(self.validating, valid, (), "", self.now))
        self.validating = ""

    def _open(self) -> list[str]:
        return [r for r in self.sent if r not in self.ended]

    @precondition(lambda self: bool(self._open()))
    @rule(data=st.data(), accept=st.sampled_from([True, True, True, False]))
    def nav2_responds(self, data: st.DataObject, accept: bool) -> None:
        rid = data.draw(st.sampled_from(self._open()))
        step = self.handoff.goal_response(rid, accept, self.now)
        if accept and step.decisions:
            self.accepted.add(rid)
        self.check(step)

    @precondition(lambda self: bool(self.accepted - self.ended))
    @rule(data=st.data())
    def nav2_feeds_back(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.accepted - self.ended)))
        self.clock.s += 0.05
        self.check(self.handoff.goal_feedback(rid, 1.0, 0.2, self.now))

    @precondition(lambda self: bool(self.cancelled - self.ended))
    @rule(data=st.data())
    def nav2_cancels(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.cancelled - self.ended)))
        self.check(self.handoff.goal_result(rid, "canceled", 0, "", self.now))

    @rule(why=st.sampled_from(["deactivate", "cleanup", "shutdown"]))
    def node_stops(self, why: str) -> None:
        self.check(self.handoff.stop(self.now, why))
        self.stopped = True

    @precondition(lambda self: self.stopped)
    @rule()
    def node_activates(self) -> None:
        self.handoff.activate()
        self.stopped = False

    @invariant()
    def no_goal_survives_the_stop(self) -> None:
        """Under on_stop cancel, once stopped, the newest goal sent is cancelled (asked of Nav2) once it was
        accepted; an older one was preempted by Nav2 when the newer was sent."""
        if not (self.stopped and self.settings.on_stop == "cancel" and self.sent):
            return
        newest = self.sent[-1]
        if newest in self.accepted and newest not in self.ended:
            assert newest in self.cancelled, f"goal {newest} survives the node's stop"


TestTimingMachine = TimingMachine.TestCase
TestTimingMachine.settings = hsettings(max_examples=150, stateful_step_count=40, deadline=None)
