"""Finding 9 (issue 38): a run must never see a previous or concurrent run's node. Two evaluations back to
back, the second beside a stand-in action server of the replayed node's name (a stale participant still in
discovery, or another run's node), must each replay into their own node. Today the second is refused ("2
servers of /reasoner_node/reason/_action/send_goal ... another /reasoner_node runs there"): the fix needs
each run's node under a namespace of its own (bag_run.py, record.py: not in this change), hence xfail."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.scripted_server import ScriptedServer

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag

pytestmark = [pytest.mark.ros, pytest.mark.slow]


@pytest.fixture(scope="module")
def small_bag(robot_clip: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    bag = tmp_path_factory.mktemp("back_to_back") / "robot"
    make_bag([robot_clip], bag, MakeOptions(rate_hz=5.0, max_long_side=160))
    return bag


@contextmanager
def stale_reasoner_node() -> Iterator[list[object]]:
    """An action server at /reasoner_node/reason in a participant of its own; yields the goals it got."""
    import rclpy
    from cosmos_reasoner_ros.action import Reason
    from rclpy.action import ActionServer
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    goals: list[object] = []
    context = Context()
    rclpy.init(context=context)
    node = rclpy.create_node("reasoner_node", context=context)

    def execute(handle: object) -> object:
        goals.append(handle)
        return Reason.Result()

    server = ActionServer(node, Reason, "~/reason", execute)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        yield goals
    finally:
        server.destroy()
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
        spinner.join(timeout=5)


def _evaluate(bag: Path, out: Path, url: str) -> int:
    argv = ["evaluate", str(bag), "-o", str(out), "--server-url", url, "--at", "2.0", "--task", "caption"]
    return main([*argv, "--no-progress", "--timeout", "60", "-p", "max_retries:=0"])


def _answered(out: Path) -> bool:
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return len(records) == 1 and all(r["success"] for r in records)


@pytest.mark.xfail(strict=True, reason="finding 9: each run's node needs a namespace of its own")
def test_back_to_back_runs_each_replay_into_their_own_node(small_bag: Path, tmp_path: Path) -> None:
    with ScriptedServer() as server:
        first = _evaluate(small_bag, tmp_path / "first", server.base_url)
        assert first != 2 and _answered(tmp_path / "first")
        with stale_reasoner_node() as stale_goals:
            second = _evaluate(small_bag, tmp_path / "second", server.base_url)
        assert second != 2, "the second run saw another run's node"
        assert _answered(tmp_path / "second") and not stale_goals
