"""Generated sequences against a real reasoner_node process, managed and plain (support.node_sequences): a
short budget in the suite (bench/sequences.py runs many seeds), and the sequences that found defects, kept as
named tests replayed step by step with every invariant checked after each step, as hypothesis ran them."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

pytest.importorskip("rclpy", reason="needs rclpy (the ROS 2 wheels)")
from support.node_driver import FRAME_KINDS
from support.node_sequences import (
    SERVER_BEHAVIOURS,
    ManagedNodeSequences,
    NodeSequences,
    PlainNodeSequences,
)

pytestmark = [pytest.mark.ros, pytest.mark.slow]

# A few sequences of each kind in the suite (hypothesis enables a random subset of the rules in each: swarm
# testing); the walk below goes through every rule and every server behaviour once.
SHORT = settings(
    max_examples=4,
    stateful_step_count=15,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def test_generated_sequences_against_a_managed_node() -> None:
    run_state_machine_as_test(ManagedNodeSequences, settings=SHORT)


def test_generated_sequences_against_a_plain_node() -> None:
    run_state_machine_as_test(PlainNodeSequences, settings=SHORT)


Step = Callable[[NodeSequences], None]


def replay(machine: NodeSequences, *steps: Step) -> None:
    try:
        machine.start()
        machine.check_every_invariant()
        for step in steps:
            step(machine)
            machine.check_every_invariant()
    finally:
        machine.teardown()


def every_rule(managed: bool) -> list[Step]:
    """Every rule, every frame kind and every server behaviour, in one sequence."""
    steps: list[Step] = [
        lambda m: m.set_parameter(parameter=("clip_seconds", "double", 2.0)),
        lambda m: m.set_parameter(parameter=("no_such_parameter", "integer", 1)),
        lambda m: m.trigger_burst(calls=5),
        lambda m: m.goal(tasks=("next_action",), deadline_s=0.0, cancel_after_s=None),
    ]
    if managed:
        steps += [
            lambda m: m.transition(transition=3),  # no activate while unconfigured
            lambda m: m.transitions_back_to_back(transitions=[1, 1, 3, 6]),
        ]
    steps += [lambda m, k=kind: m.frames(kind=k, count=3, gap_s=0.0) for kind in sorted(FRAME_KINDS)]
    steps.append(lambda m: m.frames(kind="good", count=4, gap_s=3.0))
    for behaviour in sorted(SERVER_BEHAVIOURS):  # each request alone at the server, to its end
        steps += [
            lambda m, b=behaviour: m.server_behaves(behaviour=b),
            lambda m: m.trigger_burst(calls=1, fresh=True),
            lambda m: m.requests_end(),
            lambda m: m.goal(
                tasks=("next_action", "trajectory"), deadline_s=0.0, cancel_after_s=None, fresh=True
            ),
            lambda m: m.requests_end(),
        ]
    steps += [
        lambda m: m.server_behaves(behaviour="slow_answer"),
        lambda m: m.goal(tasks=("next_action",), deadline_s=0.02, cancel_after_s=None, fresh=True),
        lambda m: m.goal(tasks=("next_action",), deadline_s=0.0, cancel_after_s=0.3, fresh=True),
        lambda m: m.goal(tasks=("fly",), deadline_s=0.0, cancel_after_s=None),
        lambda m: m.goal_of_many_tasks(tasks=100_000),
        lambda m: m.wait(seconds=3.0),
    ]
    if managed:
        steps += [
            lambda m: m.trigger_burst(calls=40, fresh=True),
            lambda m: m.transitions_back_to_back(transitions=[4, 2, 1, 3]),
            lambda m: m.frames(kind="good", count=5, gap_s=0.0),
        ]
    steps.append(lambda m: m.shutdown_signal(signum=signal.SIGTERM, repeat=30, burst=20))
    return steps


@pytest.mark.parametrize("machine", [ManagedNodeSequences, PlainNodeSequences], ids=["managed", "plain"])
def test_a_sequence_through_every_rule_and_server_behaviour(machine: type[NodeSequences]) -> None:
    replay(machine(), *every_rule(machine.managed))


# ---- sequences that found defects (shrunk by hypothesis), kept ---------------------------------------


def test_a_parameter_named_empty_is_refused() -> None:
    """rclpy let a set_parameters of the name '' through (its check of undeclared names skips a falsy one)
    and created that parameter; the node now refuses every name it did not declare."""
    replay(ManagedNodeSequences(), lambda m: m.set_parameter(parameter=("", "string", "x")))
    replay(PlainNodeSequences(), lambda m: m.set_parameter(parameter=("", "integer", 1)))


def test_triggers_queued_when_a_shutdown_signal_comes_are_all_answered() -> None:
    """An unconfigured node shut down faster than it took the calls queued at it: 18 of 20 triggers sent right
    before SIGINT never got a reply. The process now answers what is queued before it goes."""
    replay(
        ManagedNodeSequences(),
        lambda m: m.shutdown_signal(burst=20, repeat=1, signum=signal.SIGINT),
    )


def test_a_trigger_after_a_lifecycle_shutdown_is_refused_without_a_request() -> None:
    """After shutdown from active a trigger still made a request (an id, `shutting down`); in every state but
    active it is now refused without one, as it is after shutdown from inactive or unconfigured."""
    replay(
        ManagedNodeSequences(),
        lambda m: m.transitions_back_to_back(transitions=[1, 3, 0]),
        lambda m: m.transition(transition=7),
        lambda m: m.trigger_burst(calls=27),
        lambda m: m.wait(seconds=1.0),
    )
