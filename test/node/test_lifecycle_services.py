"""Every change_state request to a managed reasoner_node is answered, whatever it asks and whenever: each
(state, transition id) pair and each label, against a real node process, with the ROS 2 managed-node design's
transition table as the oracle; a burst of transitions back to back; and the check itself without ROS."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.load import NodeRun, Probe, node_process
from support.processes import wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.node.lifecycle_services import transition_refusal

rclpy = pytest.importorskip("rclpy", reason="needs rclpy (the ROS 2 wheels)")
from lifecycle_msgs.msg import Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState, GetState  # noqa: E402

# The managed-node design (design.ros2.org, "Managed nodes"), as lifecycle_msgs numbers it: from each primary
# state, the transitions that exist and where they lead. Every other (state, id) pair does not exist.
GOES_TO = {
    ("unconfigured", Transition.TRANSITION_CONFIGURE): "inactive",
    ("unconfigured", Transition.TRANSITION_UNCONFIGURED_SHUTDOWN): "finalized",
    ("inactive", Transition.TRANSITION_CLEANUP): "unconfigured",
    ("inactive", Transition.TRANSITION_ACTIVATE): "active",
    ("inactive", Transition.TRANSITION_INACTIVE_SHUTDOWN): "finalized",
    ("active", Transition.TRANSITION_DEACTIVATE): "inactive",
    ("active", Transition.TRANSITION_ACTIVE_SHUTDOWN): "finalized",
}
LABELS = {1: "configure", 2: "cleanup", 3: "activate", 4: "deactivate"} | dict.fromkeys((5, 6, 7), "shutdown")
STATES = ("unconfigured", "inactive", "active", "finalized")
# 0 create and 8 destroy, 10-25 the state machine's own (on_configure_success ...), and ids nobody defined
IDS = (*range(26), 99, 127, 255)
FOREIGN_LABELS = ("create", "destroy", "on_configure_success", "unconfigured", "Configure", "bogus", "x" * 99)


def expected(state: str, transition_id: int, label: str = "") -> str | None:
    """The state after the request, or None when the transition does not exist (then the node stays)."""
    if label:
        ids = [tid for (s, tid) in GOES_TO if s == state and LABELS[tid] == label]
        return GOES_TO[(state, ids[0])] if ids else None
    return GOES_TO.get((state, transition_id))


class Managed:
    """change_state / get_state of one node process, and its liveness after every answer."""

    def __init__(self, node: NodeRun, probe: Probe, name: str) -> None:
        self.node, self.probe = node, probe
        self.change = probe.node.create_client(ChangeState, f"/{name}/change_state")
        self.get = probe.node.create_client(GetState, f"/{name}/get_state")
        assert self.change.wait_for_service(timeout_sec=30) and self.get.wait_for_service(timeout_sec=30)
        self.state()

    def state(self) -> str:
        for _ in range(6):  # a reply sent before the node's writer matched the probe is lost: ask again
            response = self.get.call(GetState.Request(), timeout_sec=10)
            if response is not None:
                return str(response.current_state.label)
        raise AssertionError("get_state gave no answer to 6 calls of 10 s")

    def send(self, transition_id: int = 0, label: str = "") -> bool:
        request = ChangeState.Request(transition=Transition(id=transition_id, label=label))
        response = self.change.call(request, timeout_sec=30)
        assert response is not None, f"no answer to transition {transition_id} {label!r} in 30 s"
        assert self.node.proc.poll() is None, f"the node exited: {self.node.output()[-3000:]}"
        return bool(response.success)

    def every_pair_from(self, state: str) -> None:
        """Each transition id and label that does not exist from `state`: refused, and the node stays."""
        assert self.state() == state
        for transition_id in IDS:
            if expected(state, transition_id) is None:
                assert not self.send(transition_id), (state, transition_id)
        for label in (*sorted(set(LABELS.values())), *FOREIGN_LABELS):
            if expected(state, 0, label) is None:
                assert not self.send(0, label), (state, label)
        assert self.state() == state

    def go(self, state: str, transition_id: int, label: str = "") -> str:
        after = expected(state, transition_id, label)
        assert after is not None
        assert self.send(transition_id, label), (state, transition_id, label)
        assert self.state() == after
        return after


@pytest.fixture
def managed(tmp_path: Path) -> Iterator[Any]:
    with ScriptedServer(default=ScriptedReply(text="ok")) as server:

        def start(index: int) -> Any:
            name = f"transitions_{uuid.uuid4().hex[:8]}"
            params = {
                "lifecycle": True,
                "server_url": server.base_url,
                "media_dir": str(tmp_path / "media"),
                "max_retries": 0,
                "task": "next_action",
            }
            return node_process(params, tmp_path / str(index), name), name

        yield start


def _run(start: Any, index: int, walk: Any) -> None:
    context, name = start(index)
    with context as node:
        probe = Probe(name)
        try:
            walk(Managed(node, probe, name))
        finally:
            probe.close()
        code, _took = node.stop()
    assert code == 0, node.output()[-3000:]
    assert "Traceback" not in node.output(), node.output()[-3000:]


def test_every_state_and_transition_pair_is_answered_and_only_the_real_ones_run(managed: Any) -> None:
    """Before: `activate` while unconfigured (also deactivate, inactive_shutdown, an unknown id) got no reply;
    rclpy's `RCLError: Transition is not registered` escaped the executor's spin and the process exited 1."""

    def walk(lc: Managed) -> None:
        state = "unconfigured"
        lc.every_pair_from(state)
        state = lc.go(state, Transition.TRANSITION_CONFIGURE)
        lc.every_pair_from(state)
        state = lc.go(state, 0, "activate")  # by label
        lc.every_pair_from(state)
        state = lc.go(state, Transition.TRANSITION_DEACTIVATE)
        state = lc.go(state, Transition.TRANSITION_CLEANUP)
        state = lc.go(state, Transition.TRANSITION_CONFIGURE)
        state = lc.go(state, Transition.TRANSITION_ACTIVATE)
        state = lc.go(state, Transition.TRANSITION_ACTIVE_SHUTDOWN)
        lc.every_pair_from(state)  # finalized: nothing exists

    _run(managed, 0, walk)


@pytest.mark.parametrize(("path", "shutdown"), [((), (5, "")), ((1,), (6, "")), ((1, 3), (0, "shutdown"))])
def test_shutdown_from_each_state(managed: Any, path: tuple[int, ...], shutdown: tuple[int, str]) -> None:
    def walk(lc: Managed) -> None:
        state = "unconfigured"
        for transition_id in path:
            state = lc.go(state, transition_id)
        assert lc.go(state, *shutdown) == "finalized"

    _run(managed, len(path) + 1, walk)


def test_transitions_back_to_back_are_each_answered_in_order(managed: Any) -> None:
    """Bursts of change_state requests sent without waiting (as several operators or a lifecycle manager
    racing a person at a terminal): one reply each, each as the table says in the order they were sent."""
    rng = random.Random(27)
    ids = [1, 2, 3, 4, 3, 99, 4, 1, 0, 3, 2, 6]

    def walk(lc: Managed) -> None:
        state = "unconfigured"
        for _burst in range(4):
            sent = [rng.choice(ids) for _ in range(12)]
            futures = [lc.change.call_async(ChangeState.Request(transition=Transition(id=i))) for i in sent]
            wait_until(lambda f=futures: all(x.done() for x in f), 60, "an answer to every transition")
            for transition_id, future in zip(sent, futures, strict=True):
                after = expected(state, transition_id)
                assert future.result().success == (after is not None), (sent, transition_id, state)
                state = after or state
            assert lc.state() == state, sent
            assert lc.node.proc.poll() is None

    _run(managed, 9, walk)


@given(
    state=st.sampled_from(STATES),
    transition_id=st.integers(0, 255),
    label=st.one_of(st.just(""), st.sampled_from(sorted(set(LABELS.values()))), st.text(max_size=20)),
)
def test_the_check_agrees_with_the_table(state: str, transition_id: int, label: str) -> None:
    available = [(tid, LABELS[tid]) for (s, tid) in GOES_TO if s == state]
    refusal = transition_refusal(transition_id, label, state, available)
    assert (refusal == "") == (expected(state, transition_id, label) is not None)
    if refusal:
        assert f"from state {state}" in refusal and "available: " in refusal
