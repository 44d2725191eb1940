"""reasoner_node against a server with the OpenAI endpoints only (no /health): a replay-like sequence of
triggers and goals, each waiting for the server as a replay's node does, all answered; each result carries its
stages (issue 40, items 3 and 5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.camera_publisher import camera_process
from support.processes import wait_until

rclpy = pytest.importorskip("rclpy", reason="needs rclpy (the ROS 2 Kilted wheels)")
from action_msgs.msg import GoalStatus  # noqa: E402
from cosmos_reasoner_ros.action import Reason  # noqa: E402
from support.node_harness import base_params, goal_summary  # noqa: E402
from support.scripted_server import ScriptedReply, ScriptedServer  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

W, H = 640, 480
TRAJECTORY_TEXT = (
    "<think>\nTo the cup.\n</think>\n\n```json\n"
    '[{"point_2d": [500, 250], "label": "gripper trajectory"}, '
    '{"point_2d": [600, 400], "label": "gripper trajectory"}]\n```'
)
BOXES_TEXT = '```json\n[{"bbox_2d": [100, 200, 300, 600], "label": "cup"}]\n```'
REQUEST_STAGES = [
    "clip_ready",
    "encoding",
    "request_sent",
    "first_token",
    "last_token",
    "parsing",
    "published",
]


def test_a_server_without_health_answers_a_replay_of_triggers_and_goals(
    tmp_path: Path, harness_factory: Any
) -> None:
    """Before: /health answered 404, so every request waited wait_for_server_s and ended server_unavailable
    ("not healthy after 10.0 s"); none reached the server."""

    def reply(body: dict[str, Any]) -> ScriptedReply:
        return ScriptedReply(text=BOXES_TEXT if "bounding box" in json.dumps(body) else TRAJECTORY_TEXT)

    with ScriptedServer(reply) as server, camera_process("/test_cam/image_raw", W, H):
        server.no_health = 404
        params = base_params(server.base_url, tmp_path / "media", wait_for_server_s=10.0)
        h = harness_factory(params)
        h.wait_frames(3)
        request_ids = []
        for step in range(8):  # as a replay asks: triggers at its marks, a goal between them
            if step % 3 == 2:
                handle = h.send_goal(Reason.Goal(task="grounding_2d", instruction="the cup"), [])
                answer = handle.get_result_async()
                res = wait_until(lambda a=answer: a.result() if a.done() else None, 30.0, "goal result")
                assert res.status == GoalStatus.STATUS_SUCCEEDED, goal_summary(res)
                request_ids.append(res.result.result.request_id)
            else:
                request_id = h.trigger_id()
                h.result_for(request_id)
                request_ids.append(request_id)
        results = [h.result_for(r) for r in request_ids]
        assert [(r.success, r.error_kind) for r in results] == [(True, "")] * 8, [r.error for r in results]
        assert server.request_count == 8
        assert "/v1/models" in server.get_paths and server.get_paths.count("/health") <= 2
        for r in results:
            names = [s.name for s in r.stages]
            assert names == REQUEST_STAGES, names
            assert all(s.seconds >= 0 for s in r.stages)
            # The request's own span within the stages: request sent -> answer, as its stamps say.
            span = sum(s.seconds for s in r.stages if s.name in ("first_token", "last_token"))
            stamped = (
                (r.answer_stamp.sec - r.request_sent_stamp.sec) * 1e9
                + (r.answer_stamp.nanosec - r.request_sent_stamp.nanosec)
            ) / 1e9
            assert span == pytest.approx(stamped, abs=2e-6)
