"""A replay whose starter brings the server up itself (the demo's `ros2 launch` starts vLLM beside the node):
evaluate must not refuse it before the starter ran. The server check before the replay (issue 38) first did,
and `./run demo` ended with exit 2 ("not ready ... within 10 s") before its launch began. Here the scripted
server starts only when the node does; the run answers every question."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.processes import free_port
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
from cosmos_reasoner_ros.bag.replay.node_process import NodeProcess
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, TaskSpec
from cosmos_reasoner_ros.bag.runs.suite import evaluate_live

pytestmark = [pytest.mark.ros, pytest.mark.slow]


class _ServerAndNode:
    """The handle a starter returns: the node process, and the server it started with it."""

    def __init__(self, server: ScriptedServer, node: NodeProcess) -> None:
        self.server, self.node = server, node

    def check_alive(self) -> None:
        self.node.check_alive()

    def stop(self) -> None:
        self.node.stop()
        self.server.__exit__(None, None, None)


def test_a_starter_that_brings_the_server_up_is_not_refused_before_it(
    robot_clip: Path, tmp_path: Path
) -> None:
    bag = tmp_path / "bag"
    make_bag([robot_clip], bag, MakeOptions(rate_hz=10.0, max_long_side=320))
    port = free_port()
    started: list[ScriptedServer] = []

    def starter(params_file: Path | None, parameters: Sequence[str], log_path: Path) -> _ServerAndNode:
        server = ScriptedServer(default=ScriptedReply(text="Move the gripper left."), port=port)
        server.__enter__()  # only now: the check before the replay would have found nothing
        started.append(server)
        cmd = [sys.executable, "-m", "cosmos_reasoner_ros.node", "--ros-args"]
        if params_file is not None:
            cmd += ["--params-file", str(params_file)]
        for value in parameters:
            cmd += ["-p", value]
        return _ServerAndNode(server, NodeProcess(cmd, log_path))

    options = EvalOptions(
        server_url=f"http://127.0.0.1:{port}/v1",
        at_s=(2.0,),
        tasks=(TaskSpec("next_action"),),
        progress=False,
    )
    evaluate_live(bag, tmp_path / "out", options, start_node=starter)
    assert len(started) == 1
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["success"] for r in records] == [True], records
