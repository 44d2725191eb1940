"""node/request_gate.py without ROS: nothing is taken once close() returned, nothing opens after a stop."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.node.request_gate import RequestGate


@settings(max_examples=30, deadline=None)
@given(takers=st.integers(1, 6), close_after=st.integers(0, 300))
def test_a_request_taken_while_open_is_in_before_close_returns(takers: int, close_after: int) -> None:
    gate = RequestGate()
    assert gate.open_with(lambda: None) and gate.open
    taken: list[int] = []
    go = threading.Event()

    def take() -> None:
        go.wait()
        for i in range(400):
            with gate.taking() as open_:
                if open_:
                    taken.append(i)  # the scheduler's submit, under the gate's lock

    threads = [threading.Thread(target=take) for _ in range(takers)]
    for thread in threads:
        thread.start()
    go.set()
    while len(taken) < close_after and any(t.is_alive() for t in threads):
        pass
    gate.close()
    at_close = len(taken)
    for thread in threads:
        thread.join()
    assert len(taken) == at_close and not gate.open


def test_nothing_opens_or_is_built_once_a_shutdown_began() -> None:
    gate = RequestGate()
    built: list[str] = []
    assert gate.prepare(lambda: built.append("scheduler"))
    assert gate.stop() and not gate.stop()  # only the first stop shuts down
    assert gate.stopping and not gate.open
    assert not gate.prepare(lambda: built.append("another scheduler"))
    assert not gate.open_with(lambda: built.append("inputs"))
    assert built == ["scheduler"] and not gate.open
    with gate.taking() as open_:
        assert not open_
