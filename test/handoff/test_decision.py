"""The handoff's decisions, without ROS: each gate refuses with its reason, a path passes to Nav2 only through
every gate, newer paths preempt, stale or failed answers keep or cancel the goal, agreement, IsPathValid and
confirmation; and, over generated sequences of answers, clock, planner answers, confirmations and Nav2's goal
events (a hypothesis state machine), the rules of handoff/decision.py hold."""

from __future__ import annotations

import dataclasses
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
    outcome,
    settings,
)

from cosmos_reasoner_ros.handoff import CancelGoal, Handoff, SendGoal, Step, ValidatePath
from cosmos_reasoner_ros.requests import Check, DecisionKind, HandoffDecision

K = DecisionKind
T0 = 100 * NS


def mine(step: Step, request_id: str) -> HandoffDecision:
    """The one decision about `request_id` in a step."""
    found = [d for d in step.decisions if d.request_id == request_id]
    assert len(found) == 1, step.decisions
    return found[0]


def gate_names(decision: HandoffDecision) -> list[tuple[str, bool]]:
    return [(g.name, g.passed) for g in decision.gates]


def consider(handoff: Handoff, request_id: str, clip_end_ns: int, now_ns: int, **kw: Any) -> Step:
    return handoff.consider(
        outcome(request_id=request_id, clip_end_ns=clip_end_ns, **kw), now_ns, INTRINSICS, FRAME
    )


def test_a_good_answer_passes_every_gate_and_is_sent_with_its_path() -> None:
    handoff = Handoff(settings())
    step = consider(handoff, "r1", T0, T0 + NS // 2)
    decision = mine(step, "r1")
    assert decision.decision == K.SENT and decision.action == "/follow_path"
    assert gate_names(decision) == [
        ("answer", True),
        ("checks", True),
        ("ground_path", True),
        ("age", True),
        ("newer", True),
        ("server", True),
    ]
    assert decision.gates[3].value == pytest.approx(0.5)
    (command,) = step.commands
    assert isinstance(command, SendGoal) and command.request_id == "r1"
    assert command.path is decision.path and command.path.frame_id == FRAME and command.path.stamp_ns == T0


@pytest.mark.parametrize(
    ("kw", "now", "gate", "words"),
    [
        ({"success": False, "error_kind": "timeout"}, T0, "answer", "timeout"),
        ({"success": False, "error_kind": "stale"}, T0, "answer", "stale"),
        ({"points": TO_THE_SKY}, T0, "ground_path", "above the horizon"),
        ({"points": FAR_START}, T0, "ground_path", "more than max_start_distance_m (1.5 m)"),
        ({}, T0 + 2 * NS, "age", "2.000 s old, more than max_age_s (1 s)"),
        ({}, T0 - NS, "age", "the clock went back"),
        (
            {
                "checks": (
                    Check("points_in_image", False, 0.5, 1.0, "points [1] answered off the 640x480 image"),
                )
            },
            T0,
            "checks",
            "points_in_image: points [1]",
        ),
    ],
)
def test_each_gate_refuses_with_its_reason(kw: dict, now: int, gate: str, words: str) -> None:
    handoff = Handoff(settings())
    step = consider(handoff, "r1", T0, now, **kw)
    decision = mine(step, "r1")
    assert decision.decision == K.REFUSED and not step.commands
    assert decision.gates[-1].name == gate and not decision.gates[-1].passed
    assert decision.reason.startswith(f"{gate}: ") and words in decision.reason


def test_answers_the_handoff_does_not_take_get_no_decision() -> None:
    """Another task or camera; and a request that never asked the Reasoner (busy, invalid, cancelled), which
    must not cancel the goal in flight either."""
    handoff = Handoff(settings(on_refusal="cancel"))
    assert consider(handoff, "r1", T0, T0, task="trajectory") == Step()
    assert consider(handoff, "r2", T0, T0, camera="wrist") == Step()
    assert handoff.status().counts == {}
    consider(handoff, "r3", T0, T0)
    handoff.goal_response("r3", True, T0)
    for i, kind in enumerate(("busy", "invalid_request", "cancelled")):
        assert consider(handoff, f"n{i}", T0 + NS, T0 + NS, success=False, error_kind=kind) == Step()
    assert handoff.status().goal == "r3" and handoff.status().goal_state == "active"


def test_no_server_refuses_and_the_next_path_goes_once_it_is_there() -> None:
    problem = ["no Nav2 action server on /follow_path (is Nav2 running?)"]
    handoff = Handoff(settings(discovery_timeout_s=0.0), server_problem=lambda: problem[0])
    refused = mine(consider(handoff, "r1", T0, T0), "r1")
    assert refused.decision == K.REFUSED and refused.reason == f"server: {problem[0]}"
    problem[0] = ""
    assert mine(consider(handoff, "r2", T0 + NS, T0 + NS), "r2").decision == K.SENT


def test_a_newer_path_preempts_and_an_older_answer_arriving_late_never_does() -> None:
    handoff = Handoff(settings())
    consider(handoff, "r1", T0, T0)
    handoff.goal_response("r1", True, T0)
    second = mine(consider(handoff, "r2", T0 + NS, T0 + NS), "r2")
    assert second.decision == K.SENT and "preempts request r1's goal" in second.reason
    late = consider(handoff, "r0", T0 + NS // 2, T0 + NS)
    assert mine(late, "r0").decision == K.REFUSED and mine(late, "r0").gates[-1].name == "newer"
    assert not late.commands
    # Nav2 aborts the preempted goal with an empty result: preempted, not failed.
    assert mine(handoff.goal_result("r1", "aborted", 0, "", T0 + NS), "r1").decision == K.GOAL_PREEMPTED
    end = mine(handoff.goal_result("r2", "aborted", 105, "Failed to make progress", T0 + 2 * NS), "r2")
    assert end.decision == K.GOAL_FAILED and end.error_code == 105 and "Failed to make progress" in end.reason
    assert handoff.goal_result("r2", "succeeded", 0, "", T0) == Step()  # a goal ends once


@pytest.mark.parametrize("policy", ["keep", "cancel"])
def test_a_stale_answer_keeps_or_cancels_the_goal_in_flight(policy: str) -> None:
    handoff = Handoff(settings(on_refusal=policy))
    consider(handoff, "r1", T0, T0)
    handoff.goal_response("r1", True, T0)
    step = consider(handoff, "r2", T0 + NS, T0 + NS, success=False, error_kind="stale")
    assert mine(step, "r2").decision == K.REFUSED
    if policy == "keep":
        assert [d.request_id for d in step.decisions] == ["r2"] and not step.commands
        assert handoff.status().goal == "r1"
        return
    cancel = mine(step, "r1")
    assert cancel.decision == K.CANCEL and "request r2, newer, was refused (answer: stale" in cancel.reason
    assert step.commands == (CancelGoal("r1"),)
    assert handoff.status().goal_state == "cancelling"
    assert mine(handoff.goal_result("r1", "canceled", 0, "", T0 + NS), "r1").decision == K.GOAL_CANCELED


def test_a_cancel_asked_before_the_goal_was_accepted_is_sent_on_acceptance() -> None:
    handoff = Handoff(settings(on_refusal="cancel"))
    consider(handoff, "r1", T0, T0)
    step = consider(handoff, "r2", T0 + NS, T0 + NS, points=TO_THE_SKY)
    assert mine(step, "r1").decision == K.CANCEL and not step.commands  # no goal handle yet
    accepted = handoff.goal_response("r1", True, T0 + NS)
    assert mine(accepted, "r1").decision == K.GOAL_ACCEPTED and accepted.commands == (CancelGoal("r1"),)


def test_agreement_waits_for_the_clip_s_answers_and_sends_the_medoid_when_they_agree() -> None:
    handoff = Handoff(settings(agreement_answers=3, agreement_max_spread_m=0.2))
    first = mine(consider(handoff, "c-1", T0, T0, clip_id="c"), "c-1")
    assert first.decision == K.WAITING and "answer 1 of 3 about clip c: waiting for 2 more" in first.reason
    assert mine(consider(handoff, "c-2", T0, T0, clip_id="c"), "c-2").decision == K.WAITING
    step = consider(
        handoff,
        "c-3",
        T0,
        T0,
        clip_id="c",
        points=((500, 950), (500, 820), (505, 700), (530, 600), (560, 520)),
    )
    third = mine(step, "c-3")
    assert third.decision == K.SENT
    agreement = next(g for g in third.gates if g.name == "agreement")
    assert agreement.passed and 0 < agreement.value <= 0.2


def test_disagreeing_answers_are_refused_and_an_incomplete_clip_lapses() -> None:
    handoff = Handoff(settings(agreement_answers=2, agreement_max_spread_m=0.05))
    consider(handoff, "c-1", T0, T0, clip_id="c")
    step = consider(handoff, "c-2", T0, T0, clip_id="c", points=LEFT)
    refused = mine(step, "c-2")
    assert refused.decision == K.REFUSED and refused.gates[-1].name == "agreement"
    assert "differ by up to" in refused.reason and not step.commands
    mine(consider(handoff, "d-1", T0 + NS, T0 + NS, clip_id="d"), "d-1")
    lapsed = mine(handoff.tick(T0 + 3 * NS), "d-1")
    assert lapsed.decision == K.REFUSED and "only 1 of 2 answers about clip d came" in lapsed.reason


def test_validation_then_confirmation_then_sent_with_the_age_checked_again() -> None:
    handoff = Handoff(settings(validate_path=True, confirm=True, max_age_s=2.0))
    step = consider(handoff, "r1", T0, T0)
    assert mine(step, "r1").decision == K.VALIDATING
    (ask,) = step.commands
    assert isinstance(ask, ValidatePath) and ask.request_id == "r1"
    assert handoff.validated("other", True, (), "", T0) == Step()  # about no proposal
    proposed = mine(handoff.validated("r1", True, (), "", T0 + NS // 10), "r1")
    assert proposed.decision == K.AWAITING_CONFIRMATION
    assert handoff.confirm("wrong-id", True, T0)[1:] == (
        False,
        "request 'wrong-id' awaits no confirmation (the proposal awaiting it: r1)",
    )
    step, answered, message = handoff.confirm("", True, T0 + NS)
    assert answered and message.startswith("sent:")
    sent = mine(step, "r1")
    assert [n for n, _ in gate_names(sent)][-4:] == ["path_valid", "confirmation", "age", "server"]
    assert sent.gates[-2].value == pytest.approx(1.0)  # the age at sending, not at the answer
    assert handoff.confirm("", True, T0) == (Step(), False, "no proposal awaits confirmation")


def test_an_invalid_path_a_rejection_a_silent_planner_and_a_lapsed_proposal_are_refused() -> None:
    handoff = Handoff(settings(validate_path=True, server_timeout_s=0.5))
    consider(handoff, "r1", T0, T0)
    invalid = mine(handoff.validated("r1", False, (3, 4, 5), "", T0), "r1")
    assert invalid.decision == K.REFUSED and "poses [3, 4, 5] in collision or unknown" in invalid.reason
    consider(handoff, "r2", T0 + NS, T0 + NS)
    silent = mine(handoff.tick(T0 + NS + NS), "r2")
    assert "no answer within server_timeout_s (0.5 s)" in silent.reason
    confirming = Handoff(settings(confirm=True))
    consider(confirming, "r3", T0, T0)
    step, answered, _ = confirming.confirm("r3", False, T0)
    assert answered and mine(step, "r3").reason == "confirmation: rejected on ~/handoff/confirm"
    consider(confirming, "r4", T0 + NS, T0 + NS)
    assert confirming.tick(T0 + NS + NS // 2) == Step()  # still young
    lapsed = mine(confirming.tick(T0 + 3 * NS), "r4")
    assert "not confirmed before the answer was max_age_s (1 s) old" in lapsed.reason


def test_a_newer_proposal_supersedes_the_one_awaiting_confirmation() -> None:
    handoff = Handoff(settings(confirm=True))
    consider(handoff, "r1", T0, T0)
    step = consider(handoff, "r2", T0 + NS, T0 + NS)
    assert mine(step, "r1").decision == K.SUPERSEDED and mine(step, "r2").decision == K.AWAITING_CONFIRMATION
    assert handoff.confirm("r1", True, T0 + NS)[1] is False


def test_a_dry_run_sends_nothing_and_says_what_it_would_do() -> None:
    handoff = Handoff(settings(mode="dry_run", on_refusal="cancel"), server_problem=lambda: "absent")
    step = consider(handoff, "r1", T0, T0)
    would = mine(step, "r1")
    assert would.decision == K.WOULD_SEND and would.dry_run and not step.commands
    assert "server" not in [n for n, _ in gate_names(would)]  # no Nav2 asked about
    step = consider(handoff, "r2", T0 + NS, T0 + NS, success=False, error_kind="timeout")
    assert mine(step, "r1").decision == K.WOULD_CANCEL and not step.commands


# -- generated sequences ---------------------------------------------------------------------------------

POINTS = st.sampled_from([AHEAD, AHEAD, AHEAD, LEFT, LEFT, TO_THE_SKY, FAR_START])  # mostly good paths


class HandoffMachine(RuleBasedStateMachine):
    """Answers (good, failed, bad paths, late), the clock, IsPathValid answers, confirmations and Nav2's goal
    events in any order, under any combination of the optional gates and the refusal policy."""

    def __init__(self) -> None:
        super().__init__()
        self.handoff: Handoff | None = None
        self.now = T0
        self.next_id = 0
        self.newest_clip = T0
        self.sent_clips: list[int] = []  # clip ends of the paths sent, in order
        self.open_goals: set[str] = set()  # sent, no final goal event yet
        self.accepted: set[str] = set()
        self.ended: set[str] = set()
        self.proposal = ""

    @initialize(
        validate=st.booleans(),
        confirm=st.booleans(),
        agreement=st.sampled_from([1, 1, 1, 2, 3]),
        policy=st.sampled_from(["keep", "cancel"]),
        dry=st.booleans(),
        server=st.sampled_from([True, True, True, False]),
    )
    def configure(
        self, validate: bool, confirm: bool, agreement: int, policy: str, dry: bool, server: bool
    ) -> None:
        self.settings = settings(
            mode="dry_run" if dry else "follow_path",
            validate_path=validate,
            confirm=confirm,
            agreement_answers=agreement,
            agreement_max_spread_m=0.3,
            on_refusal=policy,
            server_timeout_s=0.5,
            # Nav2 answers every goal here, however late (40 steps of at most 1.2 s); a response lost is
            # test_goal_response.py's machine.
            goal_response_timeout_s=600.0,
        )
        self.server = server
        self.handoff = Handoff(
            self.settings,
            server_problem=lambda: "" if self.server else "absent",
            clock=lambda: self.now / NS,  # steady seconds: a path waits for discovery in the first 5 s
        )

    def check(self, step: Step) -> None:
        """What every step must keep."""
        s = self.settings
        sent = [d for d in step.decisions if d.decision in (K.SENT, K.WOULD_SEND)]
        sends = [c for c in step.commands if isinstance(c, SendGoal)]
        assert len(sent) <= 1 and [c.request_id for c in sends] == (
            [] if s.dry_run else [d.request_id for d in sent]
        )
        for decision in sent:
            assert all(g.passed for g in decision.gates), decision.gates
            names = [g.name for g in decision.gates]
            age = [g for g in decision.gates if g.name == "age"][-1]
            assert age.value == pytest.approx((self.now - decision.path.stamp_ns) / NS)  # the age when sent
            assert age.value <= s.max_age_s
            assert ("path_valid" in names) == s.validate_path and ("confirmation" in names) == s.confirm
            assert (s.agreement_answers > 1) == ("agreement" in names)
            clip = decision.path.stamp_ns
            assert not self.sent_clips or clip > self.sent_clips[-1], "an older path preempted a newer one"
            self.sent_clips.append(clip)
            if not s.dry_run:
                self.open_goals.add(decision.request_id)
        for command in step.commands:
            if isinstance(command, CancelGoal):
                assert s.on_refusal == "cancel" and command.request_id in self.open_goals
                assert command.request_id in self.accepted or any(
                    d.decision == K.GOAL_ACCEPTED and d.request_id == command.request_id
                    for d in step.decisions
                )
        for decision in step.decisions:
            event(decision.decision)
            if decision.decision in (K.CANCEL, K.WOULD_CANCEL):
                assert s.on_refusal == "cancel"
            if decision.decision in (
                K.GOAL_REJECTED,
                K.GOAL_SUCCEEDED,
                K.GOAL_FAILED,
                K.GOAL_CANCELED,
                K.GOAL_PREEMPTED,
            ):
                assert decision.request_id in self.open_goals and decision.request_id not in self.ended
                self.open_goals.discard(decision.request_id)
                self.ended.add(decision.request_id)
            if decision.decision in (K.VALIDATING, K.AWAITING_CONFIRMATION):
                self.proposal = decision.request_id

    @precondition(lambda self: self.handoff is not None)
    @rule(
        points=POINTS,
        fails=st.sampled_from([False, False, False, False, True]),
        age=st.sampled_from([0, 1, 2, 3, 5, 8, 12]),
        late=st.sampled_from([False, False, False, True]),
        twice=st.sampled_from([True, True, False]),
        gap=st.integers(1, 6),
    )
    def answer(self, points: Any, fails: bool, age: int, late: bool, twice: bool, gap: int) -> None:
        """`gap` tenths of a second after the previous event, an answer about a clip `age` tenths of a second
        old, or (late) about a clip older than the newest answered so far; with agreement, sometimes the
        clip's other answers too."""
        assert self.handoff is not None
        self.now += gap * NS // 10
        clip = self.now - age * NS // 10
        if late:
            clip = min(clip, self.newest_clip - NS // 10)
        self.newest_clip = max(self.newest_clip, clip)
        clip_id = f"clip-{clip}"
        for _ in range(self.settings.agreement_answers if twice else 1):
            self.next_id += 1
            request_id = f"r{self.next_id}"
            kw: dict[str, Any] = {"success": False, "error_kind": "timeout"} if fails else {"points": points}
            step = self.handoff.consider(
                outcome(request_id=request_id, clip_id=clip_id, clip_end_ns=clip, **kw),
                self.now,
                INTRINSICS,
                FRAME,
            )
            assert len([d for d in step.decisions if d.request_id == request_id]) == 1, step.decisions
            self.check(step)

    @precondition(lambda self: self.handoff is not None)
    @rule(tenths=st.integers(1, 12))
    def time_passes(self, tenths: int) -> None:
        assert self.handoff is not None
        self.now += tenths * NS // 10
        self.check(self.handoff.tick(self.now))

    @precondition(lambda self: self.handoff is not None and self.proposal)
    @rule(valid=st.sampled_from([True, True, False, None]))
    def planner_answers(self, valid: bool | None) -> None:
        assert self.handoff is not None
        self.check(self.handoff.validated(self.proposal, valid, () if valid else (1,), "timeout", self.now))

    @precondition(lambda self: self.handoff is not None)
    @rule(accept=st.sampled_from([True, True, False]), named=st.booleans())
    def someone_confirms(self, accept: bool, named: bool) -> None:
        assert self.handoff is not None
        step, answered, message = self.handoff.confirm(self.proposal if named else "", accept, self.now)
        assert answered == bool(step.decisions) and message
        self.check(step)

    @precondition(lambda self: self.handoff is not None and bool(self.open_goals))
    @rule(data=st.data(), accepted=st.booleans())
    def nav2_responds(self, data: st.DataObject, accepted: bool) -> None:
        assert self.handoff is not None
        goal = data.draw(st.sampled_from(sorted(self.open_goals)))
        step = self.handoff.goal_response(goal, accepted, self.now)
        if accepted and step.decisions:
            self.accepted.add(goal)
        self.check(step)

    @precondition(lambda self: self.handoff is not None and bool(self.open_goals | self.ended))
    @rule(
        data=st.data(),
        status=st.sampled_from(["succeeded", "aborted", "canceled"]),
        code=st.sampled_from([0, 103, 105]),
    )
    def nav2_ends_a_goal(self, data: st.DataObject, status: str, code: int) -> None:
        """Also about a goal that has already ended: Nav2 reports once, a repeat changes nothing."""
        assert self.handoff is not None
        goal = data.draw(st.sampled_from(sorted(self.open_goals | self.ended)))
        step = self.handoff.goal_result(goal, status, code, "crafted", self.now)
        if goal in self.ended:
            assert step == Step()
        self.check(step)

    @invariant()
    def the_goal_in_flight_is_the_newest_sent(self) -> None:
        if self.handoff is None or self.settings.dry_run:
            return
        status = self.handoff.status()
        if status.goal:
            assert status.goal in self.open_goals


TestHandoffMachine = HandoffMachine.TestCase
TestHandoffMachine.settings = hsettings(max_examples=200, stateful_step_count=40, deadline=None)


def test_settings_replace_keeps_the_dataclass_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings().mode = "none"  # type: ignore[misc]
