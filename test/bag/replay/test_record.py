"""bag_record: the record CLI in another process captures a node's outputs (custom ReasonerResult included,
a latched image too) into an mcap bag that rosbags reads back field for field."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from support.bags import read_topics
from support.processes import bag_cli as cli
from support.processes import ros_env

from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.replay.record import DEFAULT_TOPICS, default_topics


def test_default_topics_follow_the_node_name() -> None:
    assert "/reasoner_node/result" in DEFAULT_TOPICS and "/diagnostics" in DEFAULT_TOPICS
    assert default_topics("robot1_reasoner")[0] == "/robot1_reasoner/result"
    assert default_topics("robot1_reasoner")[-1] == "/diagnostics"


@pytest.mark.ros
@pytest.mark.slow
def test_record_cli_captures_results_strings_and_latched_images(tmp_path: Path) -> None:
    import rclpy
    from cosmos_reasoner_ros.msg import ReasonerResult
    from rclpy.duration import Duration
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String
    from support.interface_samples import sample_result

    out = tmp_path / "recorded"
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("fake_reasoner", context=context)
    reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    latched = QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
    )
    result_pub = node.create_publisher(ReasonerResult, "/fake_reasoner/result", reliable)
    text_pub = node.create_publisher(String, "/fake_reasoner/next_action", reliable)
    extra_pub = node.create_publisher(String, "/robot/extra", reliable)  # --topics adds it to the defaults
    image_pub = node.create_publisher(Image, "/fake_reasoner/annotated_image", latched)
    # Published before the recorder exists: only a transient-local subscription gets it.
    pixels = np.arange(48 * 64 * 3, dtype=np.uint8)
    image_pub.publish(Image(height=48, width=64, encoding="rgb8", step=192, data=pixels.tobytes()))
    # Started as a shell starts a background job (SIGINT ignored): Ctrl-C still ends the recording.
    proc = subprocess.Popen(
        [
            "bash",
            "-c",
            'trap "" INT; exec "$@"',
            "record",
            *cli(
                "record",
                "-o",
                str(out),
                "--node-name",
                "fake_reasoner",
                "--duration",
                "60",
                "--topics",
                "/robot/extra",
            ),
        ],
        env=ros_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while min(p.get_subscription_count() for p in (result_pub, text_pub, extra_pub)) == 0:
            assert time.monotonic() < deadline and proc.poll() is None, "the recorder did not subscribe"
            time.sleep(0.05)
        for i in range(5):
            result_pub.publish(sample_result(f"answer {i}"))
            text_pub.publish(String(data=f"step {i}"))
            extra_pub.publish(String(data=f"extra {i}"))
            time.sleep(0.05)
        # Every sample acknowledged by the recorder's reliable readers (a sleep sized for a quiet machine was
        # not enough on a busy one), then the stop: the recorder takes what its readers hold before it closes.
        for publisher in (result_pub, text_pub, extra_pub, image_pub):
            assert publisher.wait_for_all_acked(Duration(seconds=30))
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        node.destroy_node()
        rclpy.shutdown(context=context)
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["messages"] == {
        "/fake_reasoner/result": 5,
        "/fake_reasoner/next_action": 5,
        "/robot/extra": 5,
        "/fake_reasoner/annotated_image": 1,
    }
    assert any(p.suffix == ".mcap" for p in out.iterdir())
    with BagReader(out) as reader:
        assert reader.topics["/fake_reasoner/result"].msgtype == "cosmos_reasoner_ros/msg/ReasonerResult"
    got = {topic: [m for _, m in items] for topic, items in read_topics(out).items()}
    results = got["/fake_reasoner/result"]
    assert [r.answer for r in results] == [f"answer {i}" for i in range(5)]  # type: ignore[attr-defined]
    first, expected = results[0], sample_result("answer 0")
    assert first.reasoning == expected.reasoning and first.task == "trajectory"  # type: ignore[attr-defined]
    traj = first.trajectories[0]  # type: ignore[attr-defined]
    assert (traj.points_norm[0].x, traj.points_norm[0].y) == (500.0, 250.0)
    assert first.boxes[0].label == "red cube" and first.segments[0].caption == "arm reaches"  # type: ignore[attr-defined]
    assert first.time_to_first_token_s == pytest.approx(0.142)  # type: ignore[attr-defined]
    assert [s.data for s in got["/fake_reasoner/next_action"]] == [f"step {i}" for i in range(5)]  # type: ignore[attr-defined]
    image = got["/fake_reasoner/annotated_image"][0]
    assert np.array_equal(image.data, pixels)  # type: ignore[attr-defined]
