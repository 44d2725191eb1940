"""reasoner_node under load in a process of its own, as an integrator tries it: trigger and goal storms, a
shutdown signal with requests in flight, hostile instructions and goals, and about 20 s of the soak.

The long versions are bench/storm.py and bench/soak.py; these keep the promises true in CI.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.camera_publisher import camera_process
from support.load import NodeRun, Probe, media_usage, node_process, sequence_gaps
from support.processes import wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.launch_config import NODE_SIGTERM_TIMEOUT_S

pytest.importorskip("rclpy", reason="needs rclpy (the ROS 2 Kilted wheels)")

pytestmark = [pytest.mark.ros, pytest.mark.slow]

TOPIC = "/load_cam/image_raw"
STREAMED = " ".join(f"word{i}" for i in range(60))


def params(server: ScriptedServer, media: Path, **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "cameras": ["front"],
        "camera": {"front": {"topic": TOPIC}},
        "server_url": server.base_url,
        "media_dir": str(media),
        "clip_seconds": 1.0,
        "sample_fps": 4.0,
        "max_retries": 0,
        "request_timeout_s": 30.0,
        "health_period_s": 0.5,
        "task": "next_action",
    }
    values.update(extra)
    return values


@pytest.fixture
def running(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[NodeRun, Probe, ScriptedServer]]:
    reply, extra = getattr(request, "param", (ScriptedReply(text="ok", delay_s=0.5), {}))
    with (
        ScriptedServer(default=reply) as server,
        camera_process(TOPIC, 320, 240, rate=10.0),
        node_process(params(server, tmp_path / "media", **extra), tmp_path) as node,
    ):
        probe = Probe()
        try:
            probe.wait_ready()
            wait_until(lambda: probe.frames_buffered() > 2, 30.0, "frames in the node")
            yield node, probe, server
        finally:
            probe.close()


def test_a_burst_of_50_trigger_calls_gets_50_replies_and_50_results(running: Any) -> None:
    node, probe, _server = running
    storm = probe.trigger_storm(50)
    assert storm.replies == 50, storm  # before: 11 of 200 got a reply (a service queue of 10)
    assert storm.accepted >= 1 and storm.accepted + storm.rejected_with_reason == 50, storm
    assert storm.results_missing == 0 and storm.results_duplicated == 0, storm
    assert set(storm.result_kinds) <= {"success", "busy", "no_frames"}, storm
    assert node.proc.poll() is None


@pytest.mark.parametrize(
    "running",
    # 12 s of stream: each cancel lands while its answer streams, whatever stall this machine has.
    [(ScriptedReply(text=STREAMED, chunk_delay_s=0.2), {"max_in_flight": 20, "request_queue_depth": 100})],
    indirect=True,
)
def test_20_concurrent_goals_with_half_cancelled_mid_stream(running: Any) -> None:
    _node, probe, _server = running
    storm = probe.goal_storm(20, cancel_every=2)
    assert storm.acknowledged == storm.accepted == 20, storm  # before: 10 acknowledged, 10 never answered
    assert storm.cancels_sent == 10 and storm.cancels_accepted == 10, storm
    assert storm.statuses == {"STATUS_CANCELED": 10, "STATUS_SUCCEEDED": 10}, storm
    assert storm.cancelled_with_cancelled_result == 10, storm
    assert storm.results_missing == 0 and storm.results_duplicated == 0, storm


@pytest.mark.parametrize(
    "running", [(ScriptedReply(text="late", delay_s=30.0), {"shutdown_timeout_s": 3.0})], indirect=True
)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("repeat", [1, 30], ids=["once", "30 times"])
def test_a_shutdown_signal_publishes_the_results_of_requests_in_flight(
    running: Any, signum: int, repeat: int
) -> None:
    """Also 30 signals 20 ms apart: before, one arriving as the interpreter finished killed the node (exit
    -15 for SIGTERM), where one gives the documented 0."""
    node, probe, server = running
    reply = probe.trigger.call(probe.Trigger.Request())
    request_id = reply.message.split()[0]
    assert server.wait_requests(1, 20.0), "the request never reached the server"
    code, took = node.stop(signum, repeat=repeat)
    # Within what ros2 launch gives the node before SIGTERM (the request is held 30 s by the server: a node
    # that waited for it would not make it); 5 s was missed by 0.15 s beside two CPU burners, exit 0.
    assert code == 0 and took < NODE_SIGTERM_TIMEOUT_S, (code, took, node.output()[-2000:])
    wait_until(lambda: probe.results[request_id], 30.0, "the cancelled result")
    assert probe.kinds[request_id] == "cancelled" and probe.results[request_id] == 1
    assert "context is invalid" not in node.output() and "Traceback" not in node.output()


def test_hostile_instructions_and_goals_get_clear_results(running: Any) -> None:
    node, probe, _server = running
    from std_msgs.msg import String

    pub = probe.node.create_publisher(String, "/reasoner_node/instruction", 10)
    wait_until(lambda: pub.get_subscription_count() > 0, 10, "the instruction subscriber")
    pub.publish(String(data="x" * 1_000_000))
    wait_until(lambda: "instruction refused" in node.output(), 10, "the refusal in the log")
    line = next(line for line in node.output().splitlines() if "instruction refused" in line)
    assert len(line) < 400 and "1000000 characters" in line  # logged shortened, never in full
    # A NUL inside (a C++ publisher, or raw bytes): before, rclpy handed over 'open' and it ran as such.
    payload = b"open\0 the drawer\0"
    pub.publish(b"\0\1\0\0" + len(payload).to_bytes(4, "little") + payload)
    refused = "instruction refused (it contains a NUL character)"
    wait_until(lambda: refused in node.output(), 10, "the refusal of the NUL")
    assert "instruction set: 'open'" not in node.output()

    def goal_kind(**fields: Any) -> tuple[str, str]:
        handle = probe.action.send_goal_async(probe.Reason.Goal(**fields))
        h = wait_until(lambda: handle.result() if handle.done() else None, 10, "goal acceptance")
        res = h.get_result_async()
        r = wait_until(lambda: res.result() if res.done() else None, 20, "goal result")
        return r.result.result.error_kind, r.result.result.error

    for bad in (float("inf"), float("nan"), -1.0, 1e9):
        kind, error = goal_kind(clip_seconds=bad)
        assert kind == "invalid_request" and "clip_seconds" in error, (bad, kind, error)
    kind, error = goal_kind(task="next_action", instruction="open the drawer")
    assert kind == "invalid_request" and "takes no instruction" in error
    kind, error = goal_kind(task="custom", instruction="y" * 5000)
    assert kind == "invalid_request" and "max_instruction_chars" in error
    assert node.proc.poll() is None


def test_a_goal_of_100000_tasks_is_refused_at_once_while_a_trigger_beside_it_is_served(running: Any) -> None:
    """Before: 16,000 tasks took 50 s and held a trigger's reply 34.5 s; 100,000 gave no result in 120 s, the
    next goal no response. Now the goal is one refused request, and the trigger beside it is served."""
    node, probe, _server = running
    goal_sent = probe.action.send_goal_async(probe.Reason.Goal(tasks=["next_action"] * 100_000))
    reply = probe.trigger.call_async(probe.Trigger.Request())  # at the same moment
    handle = wait_until(lambda: goal_sent.result() if goal_sent.done() else None, 30, "goal acceptance")
    answer = handle.get_result_async()
    result = wait_until(lambda: answer.result() if answer.done() else None, 30, "the goal's result").result
    assert len(result.results) == 1, len(result.results)
    refused = result.result
    assert refused.error_kind == "invalid_request" and "at most 8 tasks" in refused.error, refused.error
    trigger_id = wait_until(lambda: reply.result() if reply.done() else None, 30, "the trigger reply").message
    wait_until(lambda: probe.results[trigger_id.split()[0]], 30, "the trigger's result")
    wait_until(lambda: probe.results[refused.request_id], 10, "the goal's one ~/result")
    # The node still serves goals: a normal one after it.
    after = probe.action.send_goal_async(probe.Reason.Goal(task="next_action"))
    handle = wait_until(lambda: after.result() if after.done() else None, 30, "the next goal's acceptance")
    answer = handle.get_result_async()
    wait_until(lambda: answer.result() if answer.done() else None, 30, "the next goal's result")
    probe.flush_results()  # a duplicate would have arrived before this marker's result
    assert probe.results[refused.request_id] == 1
    assert node.proc.poll() is None


@pytest.mark.parametrize(
    "running",
    [
        (
            ScriptedReply(text="ok", delay_s=0.3),
            {"trigger_period_s": 1.0, "buffer_seconds": 10.0, "media_max_files": 5},
        )
    ],
    indirect=True,
)
def test_a_short_run_every_tick_one_result_and_media_within_its_bound(running: Any, tmp_path: Path) -> None:
    """About 20 s of the soak: every timer tick gives one result, and the media directory keeps its retention
    limit at every look. Memory staying flat needs minutes: bench/soak.py measures it against its goal
    (growth after warm-up <= 10 MB; this test held 25 MB over 45 s before it moved there)."""
    _node, probe, _server = running
    # Warm-up: until the media directory has reached its limit (pruning is exercised from then on).
    wait_until(lambda: media_usage(tmp_path / "media")[0] >= 5, 60.0, "the media directory at its limit")
    # The media directory, looked at four times a second: its retention limit holds at every look, not only
    # at the end (one look at the end saw 21 files of 20, a clip named before its prune).
    looks = []
    end = time.monotonic() + 15.0
    while time.monotonic() < end:
        looks.append(media_usage(tmp_path / "media"))
        time.sleep(0.25)
    with probe._lock:
        ids = list(probe.results)
        counts = dict(probe.results)
    missing, duplicated = sequence_gaps(ids)
    assert len(ids) >= 15 and missing == 0 and duplicated == 0 and max(counts.values()) == 1
    assert len(looks) > 40 and max(files for files, _, _ in looks) <= 5, looks
    # Beside them only the clip being written, hidden until it is renamed into place (one camera, one request
    # in flight: one writer).
    assert max(temporaries for _, _, temporaries in looks) <= 1, looks
