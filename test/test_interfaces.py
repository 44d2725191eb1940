"""The package's messages and action: they build, import, survive serialization, cross processes intact."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import rclpy
from cosmos_reasoner_ros.action import Reason
from cosmos_reasoner_ros.msg import BoundingBox2D, ReasonerResult, TimeSegment, Trajectory2D
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile, qos_profile_sensor_data
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import Image
from support.interface_samples import sample_result
from support.processes import module_cmd, ros_env

from cosmos_reasoner_ros.bag.rclpy_compat import initialized
from cosmos_reasoner_ros.ros_compat import fastdds_profile_env

HERE = Path(__file__).resolve().parent
PROFILE = HERE.parent / "config" / "fastdds_shm.xml"


def test_result_round_trips_through_serialization() -> None:
    msg = sample_result()
    back = deserialize_message(serialize_message(msg), ReasonerResult)
    assert back == msg
    assert back.trajectories[0].points_px[1].x == pytest.approx(64.4)
    assert back.segments[0].end_stamp.nanosec == 250_000_000
    assert back.clip_uris[1].endswith("crr-2.mp4")


def test_error_kinds_are_constants_of_the_message() -> None:
    kinds = {v for k, v in vars(ReasonerResult).items() if k.startswith("ERROR_") and isinstance(v, str)}
    assert {"server_unavailable", "rejected", "timeout", "cancelled", "unparseable", "no_frames"} <= kinds


@pytest.mark.parametrize("msg_type", [Trajectory2D, BoundingBox2D, TimeSegment])
def test_parts_round_trip(msg_type: type) -> None:
    msg = msg_type()
    text_field = "caption" if msg_type is TimeSegment else "label"
    setattr(msg, text_field, "the arm lifts the cube")
    assert deserialize_message(serialize_message(msg), msg_type) == msg


def test_reason_action_parts_round_trip() -> None:
    goal = Reason.Goal(task="grounding_2d", instruction="red cube", cameras=["front"], clip_seconds=4.0)
    assert deserialize_message(serialize_message(goal), Reason.Goal) == goal
    several = Reason.Goal(
        tasks=["next_action", "grounding_2d"],
        instructions=["", "red cube"],
        deadline_s=1.5,
        reasoning_off=True,
        max_result_age_s=-1.0,
    )
    assert deserialize_message(serialize_message(several), Reason.Goal) == several
    timed = Reason.Feedback(stage_name="querying", time_left_s=0.25, task="grounding_2d", request_id="n-1-2")
    assert deserialize_message(serialize_message(timed), Reason.Feedback) == timed
    feedback = Reason.Feedback(
        stage=Reason.Feedback.STAGE_STREAMING, stage_name="streaming", partial_text="<think>", elapsed_s=1.5
    )
    assert deserialize_message(serialize_message(feedback), Reason.Feedback) == feedback
    result = Reason.Result(result=sample_result(), results=[sample_result(), sample_result("lift it")])
    assert deserialize_message(serialize_message(result), Reason.Result) == result
    assert Reason.Feedback.STAGE_CAPTURING < Reason.Feedback.STAGE_QUERYING < Reason.Feedback.STAGE_STREAMING


def _peer(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(module_cmd("support.ros_peer", *args), env=ros_env(), stdin=subprocess.PIPE)


@pytest.mark.ros
def test_result_published_by_another_process_arrives_intact() -> None:
    received: list[ReasonerResult] = []
    peer = _peer("result", "--text", "place the cube in the box")
    try:
        with initialized():
            node = rclpy.create_node("interface_test_result_sub")
            qos = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
            node.create_subscription(ReasonerResult, "result", received.append, qos)
            deadline = time.monotonic() + 60.0
            while not received and time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.1)
            node.destroy_node()
    finally:
        assert peer.stdin is not None
        peer.stdin.close()  # the peer exits once we have read its sample
        assert peer.wait(timeout=30) == 0
    assert len(received) == 1
    assert received[0] == sample_result("place the cube in the box")


@pytest.mark.ros
@pytest.mark.slow
def test_shm_profile_delivers_720p_at_30hz_best_effort_without_loss() -> None:
    """Two processes, 1280x720 rgb8 at 30 Hz, best-effort QoS, the shipped SHM profile: no frame lost."""
    count = 90
    assert fastdds_profile_env(PROFILE).items() <= os.environ.items()  # conftest: this process and the peer
    seen: set[int] = set()
    sizes: set[int] = set()
    with initialized():
        node = rclpy.create_node("interface_test_image_sub")

        def on_image(msg: Image) -> None:
            seen.add(int(msg.header.frame_id))
            sizes.add(len(msg.data))

        node.create_subscription(Image, "images", on_image, qos_profile_sensor_data)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, daemon=True)
        spinner.start()
        peer = _peer("images", "--count", str(count), "--rate", "30", "--width", "1280", "--height", "720")
        assert peer.wait(timeout=60) == 0
        executor.shutdown()
        spinner.join(timeout=5)
        node.destroy_node()
    assert sizes == {1280 * 720 * 3}
    assert seen == set(range(count)), f"lost {sorted(set(range(count)) - seen)}"


def test_the_handoff_gate_names_are_the_messages_constants_in_order() -> None:
    """HandoffGate.msg's NAME_* constants and handoff.gates.GATE_NAMES are one list: a gate added on one side
    only would reach a planner as a name its message does not define (or never be produced)."""
    from cosmos_reasoner_ros.msg import HandoffGate

    from cosmos_reasoner_ros.handoff import GATE_NAMES

    source = (HERE.parent / "msg" / "HandoffGate.msg").read_text()
    in_file = [
        line.split("=")[1].split("#")[0].strip().strip('"')
        for line in source.splitlines()
        if line.startswith("string NAME_")
    ]
    constants = {v for k, v in vars(HandoffGate).items() if k.startswith("NAME_") and isinstance(v, str)}
    assert in_file == list(GATE_NAMES)
    assert constants == set(GATE_NAMES)
