"""reasoner_node on a replayed bag's clock (use_sim_time, /clock from the player): diagnostics keep coming
while the clock stands still (lock-step waits on them), and a request that found no frames says why the node
refused the frames that came."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from support.processes import wait_until

rclpy = pytest.importorskip("rclpy", reason="needs rclpy (the ROS 2 Kilted wheels)")
from action_msgs.msg import GoalStatus  # noqa: E402
from cosmos_reasoner_ros.action import Reason  # noqa: E402
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from support.node_harness import base_params  # noqa: E402
from support.scripted_server import ScriptedReply, ScriptedServer  # noqa: E402

pytestmark = [pytest.mark.ros]

CLOCK_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)


def clock_publisher(h: Any) -> Any:
    clock = h.probe.create_publisher(Clock, "/clock", CLOCK_QOS)
    wait_until(lambda: clock.get_subscription_count() > 0, 20.0, "the node's /clock subscription")
    return clock


def set_clock(h: Any, clock: Any, seconds: int) -> None:
    """Publish /clock until the node's clock reads `seconds` (best effort QoS: repeat until it arrives)."""
    msg = Clock()
    msg.clock.sec = seconds
    deadline = time.monotonic() + 20.0
    while h.node.get_clock().now().nanoseconds != seconds * 10**9:
        assert time.monotonic() < deadline, f"the node never took the clock {seconds} s"
        clock.publish(msg)
        time.sleep(0.05)


def test_paused_clock_keeps_diagnostics_and_refused_frames_are_named(
    tmp_path: Path, harness_factory: Any
) -> None:
    with ScriptedServer(default=ScriptedReply(text="go")) as server:
        params = base_params(
            server.base_url,
            tmp_path / "media",
            task="next_action",
            instruction="",
            use_sim_time=True,
            diagnostics_period_s=0.1,
            max_stamp_ahead_s=1.0,
        )
        h = harness_factory(params)
        clock = clock_publisher(h)
        set_clock(h, clock, 1000)
        # The clock now stands still (no more /clock): a timer on the node's clock would stop with it.
        before = len(h.diagnostics.items)
        # On a timer of the node's (paused) clock none would come; on the steady clock one every 0.1 s.
        wait_until(
            lambda: len(h.diagnostics.items) - before >= 5, 30.0, "diagnostics while the clock is paused"
        )

        # Frames stamped 1000 s after the node's clock: refused as implausible stamps.
        camera = h.probe.create_publisher(Image, "/test_cam/image_raw", 10)
        wait_until(lambda: camera.get_subscription_count() > 0, 20.0, "camera subscription")
        for k in range(5):
            frame = Image(height=4, width=4, encoding="rgb8", step=12, data=bytes(48))
            frame.header.stamp.sec, frame.header.stamp.nanosec = 2000, k * 1000
            camera.publish(frame)
        wait_until(lambda: h.node.ingest["front"].stats.bad_stamp >= 1, 20.0, "refused frames")
        result = h.result_for(h.trigger_id())
        assert result.error_kind == "no_frames"
        assert "bad stamp" in result.error and "max_stamp_ahead_s" in result.error


def test_goal_results_are_kept_900_s_of_the_nodes_clock(tmp_path: Path, harness_factory: Any) -> None:
    """rclpy expires an ended goal's result on the node's clock: bag time in a replay. Before, results were
    kept 10 s (Kilted's default, passed on Jazzy too): 10 s of bag time, 2.5 s of wall time at --rate 4."""
    with ScriptedServer(default=ScriptedReply(text="go")) as server:
        params = base_params(server.base_url, tmp_path / "media", task="next_action", use_sim_time=True)
        h = harness_factory(params)
        clock = clock_publisher(h)
        set_clock(h, clock, 1000)
        handle = h.send_goal(Reason.Goal(cameras=["nope"]), [])  # refused at once: a goal that has ended

        def status() -> int:
            future = handle.get_result_async()
            result = wait_until(lambda: future.result() if future.done() else None, 30.0, "the goal's result")
            return int(result.status)

        assert status() == GoalStatus.STATUS_ABORTED
        set_clock(h, clock, 1000 + 600)  # ten minutes of the bag later: still there
        for _ in range(3):  # the expiry runs on the executor: give it a few chances to (wrongly) happen
            assert status() == GoalStatus.STATUS_ABORTED, "the result expired within 900 s"
        set_clock(h, clock, 1000 + 901)  # past the retention on this clock: rclpy forgets it (UNKNOWN)
        wait_until(lambda: status() == GoalStatus.STATUS_UNKNOWN, 30.0, "the result expired after 900 s")
