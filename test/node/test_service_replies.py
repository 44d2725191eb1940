"""A service callback that raises still answers its request (as a failure) and the executor's spin goes on:
node/service_replies.py and main.Spinner, in this process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from support.processes import wait_until

rclpy = pytest.importorskip("rclpy", reason="needs rclpy (the ROS 2 wheels)")
from rclpy.context import Context  # noqa: E402
from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from std_srvs.srv import SetBool, Trigger  # noqa: E402

from cosmos_reasoner_ros.node.diagnostics import ProblemLog  # noqa: E402
from cosmos_reasoner_ros.node.main import Spinner, destroyed_while_gathered  # noqa: E402
from cosmos_reasoner_ros.node.service_replies import always_answer, failure_summary  # noqa: E402

pytestmark = [pytest.mark.ros]


@pytest.fixture
def nodes() -> Iterator[tuple[Any, Any, MultiThreadedExecutor]]:
    context = Context()
    rclpy.init(context=context)
    server = rclpy.create_node("guarded", context=context)
    client = rclpy.create_node("asking", context=context)
    executor = MultiThreadedExecutor(num_threads=2, context=context)
    executor.add_node(server)
    executor.add_node(client)
    try:
        yield server, client, executor
    finally:
        executor.shutdown()
        server.destroy_node()
        client.destroy_node()
        rclpy.shutdown(context=context)


def _fails(_request: Any, _response: Any) -> Any:
    raise RuntimeError("boom")


def test_a_failing_callback_is_answered_as_a_failure_and_reported(nodes: Any) -> None:
    server, client, executor = nodes
    reports: list[tuple[str, str]] = []
    services = [server.create_service(t, f"~/{t.__name__.lower()}", _fails) for t in (Trigger, SetBool)]
    for service in services:
        always_answer(service, lambda key, message: reports.append((key, message)))
        always_answer(service, lambda key, message: reports.append((key, message)))  # wrapped once only
    spinner = Spinner(executor, ProblemLog(lambda message: reports.append(("spin", message))))
    for srv_type, name in ((Trigger, "trigger"), (SetBool, "setbool")):
        caller = client.create_client(srv_type, f"/guarded/{name}")
        while not caller.wait_for_service(timeout_sec=0.1):
            spinner.spin_once(0.05)
        future = caller.call_async(srv_type.Request())
        wait_until(lambda f=future: spinner.spin_once(0.05) or f.done(), 30, f"the answer of {name}")
        response = future.result()
        assert response.success is False
        assert response.message == "rejected: internal error (RuntimeError: boom)"
    assert [key for key, _ in reports] == [
        "service:/guarded/trigger:RuntimeError",
        "service:/guarded/setbool:RuntimeError",
    ]
    assert "failed (RuntimeError: boom at test_service_replies.py:" in reports[0][1]


def test_the_spin_survives_any_callback_error_and_reports_it_once_in_a_while(nodes: Any) -> None:
    """rclpy re-raises a callback's exception from the next spin_once: before, it ended reasoner_node."""
    server, _client, executor = nodes
    ticks: list[int] = []

    def tick() -> None:
        ticks.append(1)
        raise ValueError(f"tick {len(ticks)}")

    server.create_timer(0.01, tick)
    logged: list[str] = []
    spinner = Spinner(executor, ProblemLog(logged.append, period_s=60.0))
    wait_until(lambda: spinner.spin_once(0.02) or len(ticks) >= 20, 30, "20 failing ticks")
    assert len(logged) == 1 and "a callback failed (ValueError: tick" in logged[0], logged
    assert "the node keeps running" in logged[0]
    assert threading.active_count() >= 1


def test_the_summary_names_the_error_and_where_without_a_traceback() -> None:
    try:
        {}["missing"]
    except KeyError as exc:
        summary = failure_summary(exc)
    assert summary.startswith("KeyError: 'missing' at test_service_replies.py:") and "\n" not in summary
    assert failure_summary(ValueError("no traceback")) == "ValueError: no traceback"


class _GatheringExecutor:
    """An executor whose spin_once raises what `fail` raises, from a function of the name rclpy's executor
    gathers its wait set in (or another): the two places an InvalidHandle comes from."""

    def __init__(self, fail: Any, where: str) -> None:
        self._fail, self._where = fail, where

    def spin_once(self, timeout_sec: float) -> None:
        def _wait_for_ready_callbacks() -> None:
            self._fail()

        def callback() -> None:
            self._fail()

        (_wait_for_ready_callbacks if self._where == "gathering" else callback)()


def _use_destroyed(nodes: Any) -> Any:
    """rclpy's own InvalidHandle: entering a destroyed subscription's handle."""
    server, _client, _executor = nodes
    subscription = server.create_subscription(SetBool.Request, "/doomed", lambda _m: None, 1)
    server.destroy_subscription(subscription)

    def fail() -> None:
        with subscription.handle:
            pass

    return fail


@pytest.mark.parametrize(("where", "race", "errors"), [("gathering", 1, 0), ("callback", 0, 1)])
def test_a_destroyed_entity_in_the_wait_set_is_rclpys_race_not_a_failure(
    nodes: Any, where: str, race: int, errors: int
) -> None:
    """ros2/rclpy#1284: a deactivate destroying a subscription while the executor gathers it raises
    InvalidHandle out of spin_once. That is noted on the race log (info in reasoner_node), not as a failed
    callback (error); the same error out of a callback stays one."""
    from rclpy.exceptions import InvalidHandle

    fail = _use_destroyed(nodes)
    with pytest.raises(InvalidHandle):
        fail()
    logged: list[str] = []
    noted: list[str] = []
    spinner = Spinner(
        _GatheringExecutor(fail, where),  # type: ignore[arg-type]
        ProblemLog(logged.append),
        race_log=ProblemLog(noted.append),
    )
    spinner.spin_once(0.01)
    assert (len(noted), len(logged)) == (race, errors), (noted, logged)
    if race:
        assert "rclpy's race, ros2/rclpy#1284" in noted[0] and "nothing was lost" in noted[0]
    else:
        assert "a callback failed (InvalidHandle" in logged[0]


def test_only_rclpys_invalid_handle_is_the_race() -> None:
    def _wait_for_ready_callbacks() -> None:
        raise RuntimeError("cannot use Destroyable because destruction was requested")

    try:
        _wait_for_ready_callbacks()
    except RuntimeError as exc:
        assert not destroyed_while_gathered(exc)
