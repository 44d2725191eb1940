"""Finding 9 (issue 38): a run must never see a previous or concurrent run's node. Two evaluations back to
back, the second beside a stand-in action server of the replayed node's name (a stale participant still in
discovery, or another run's node), must each replay into their own node. It was refused ("2 servers of
/reasoner_node/reason/_action/send_goal ... another /reasoner_node runs there"): each run's node, the topics
it plays and its /clock now live under a namespace of the run's own (/cosmos_eval_<run id>)."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.bags import topic_counts
from support.processes import bag_cli, ros_env
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


def _argv(bag: Path, out: Path, url: str, *extra: str) -> list[str]:
    argv = ["evaluate", str(bag), "-o", str(out), "--server-url", url, "--at", "2.0", "--task", "caption"]
    return [*argv, "--no-progress", "--timeout", "60", "-p", "max_retries:=0", *extra]


def _evaluate(bag: Path, out: Path, url: str, *extra: str) -> int:
    return main(_argv(bag, out, url, *extra))


def _answered(out: Path) -> bool:
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return len(records) == 1 and all(r["success"] for r in records)


def test_back_to_back_runs_each_replay_into_their_own_node(small_bag: Path, tmp_path: Path) -> None:
    with ScriptedServer() as server:
        first = _evaluate(small_bag, tmp_path / "first", server.base_url)
        assert first != 2 and _answered(tmp_path / "first")
        with stale_reasoner_node() as stale_goals:
            second = _evaluate(small_bag, tmp_path / "second", server.base_url)
        assert second != 2, "the second run saw another run's node"
        assert _answered(tmp_path / "second") and not stale_goals


def test_concurrent_runs_of_one_bag_on_one_domain_each_replay_into_their_own_node(
    small_bag: Path, tmp_path: Path
) -> None:
    # Two single-bag runs at once on one ROS domain: each plays the bag's topics and /clock under its own
    # namespace into its own node (before, both nodes were /reasoner_node and heard both players' frames and
    # clocks, and a run was refused). Played at half speed, so that the two replays overlap.
    slow = ("--rate", "0.5")
    with ScriptedServer() as server:
        other = subprocess.Popen(
            bag_cli(*_argv(small_bag, tmp_path / "other", server.base_url, *slow)),
            env=ros_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            here = _evaluate(small_bag, tmp_path / "here", server.base_url, *slow, "--record")
        finally:
            output, _ = other.communicate(timeout=120)
    assert here != 2 and other.returncode != 2, output[-3000:]
    assert _answered(tmp_path / "here") and _answered(tmp_path / "other"), output[-3000:]
    # What the user sees names the topics without the run's namespace: the outputs recorded as the node's.
    counts = topic_counts(tmp_path / "here" / "outputs")
    assert counts["/reasoner_node/result"] == 1 and "/diagnostics" in counts, counts
    assert not [t for t in counts if "cosmos_eval" in t], counts
    assert "cosmos_eval" not in (tmp_path / "here" / "results.jsonl").read_text()


def test_a_replay_beside_a_left_running_reasoner_node_neither_feeds_nor_asks_it(
    small_bag: Path, tmp_path: Path, harness_factory: Any
) -> None:
    # A whole /reasoner_node left running on the domain (another session's, or a previous run's), listening
    # on the bag's camera topic: the replay runs into its own node, and the other one gets no frame and no
    # goal (it was refused before: "2 servers of /reasoner_node/reason/_action/send_goal").
    from support.node_harness import base_params

    with ScriptedServer() as server:
        params = base_params(server.base_url, tmp_path / "other_media")
        other = harness_factory({**params, "camera.front.topic": "/camera/image_raw"})
        rc = _evaluate(small_bag, tmp_path / "r", server.base_url)
        assert len(server.requests) == 1  # this run's one request
    assert rc != 2 and _answered(tmp_path / "r")
    assert other.frames_received() == 0 and other.results.items == []
