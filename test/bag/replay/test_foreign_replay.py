"""Replaying recordings the project did not write, through ROS: a robot's MCAP (mcap_ros2's writer) from 2020
with many topics, stereo_msgs and a type no install has among them, evaluated on the bag's clock; H.264 video
published as images; Ctrl-C during an endless loop."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from support.bags import T0, camera_messages, video_messages, write_mcap_ros2, write_sqlite_bag
from support.processes import LineReader, module_cmd, ros_env
from support.processes import bag_cli as cli
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.bag.cli import main

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def _records(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_a_years_old_recording_with_many_topics_replays_in_bag_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 6 s of a 2020 recording: three camera topics, CameraInfo, depth, a String, an acme_msgs/msg/Widget and
    # a stereo_msgs/msg/DisparityImage (rclpy has neither); split in two files.
    bag = write_mcap_ros2(
        tmp_path / "robot_2020", camera_messages(frames=60, width=160, height=120), 9, parts=2
    )
    base = ["evaluate", str(bag), "--at", "2,4", "--no-progress", "--timeout", "60", "--lock-step"]
    assert main([*base, "-o", str(tmp_path / "unchosen")]) == 2
    err = capsys.readouterr().err
    assert "3 camera topics" in err and "--camera-topic" in err
    with ScriptedServer(default=ScriptedReply(text="<think>\nok\n</think>\n\nmove left")) as server:
        args = [*base, "--server-url", server.base_url, "--camera-topic", "/cam/color/image_raw/compressed"]
        assert main([*args, "-o", str(tmp_path / "fresh")]) == 0
        fresh = _records(tmp_path / "fresh")
        # max_result_age_s is judged on the bag's clock too: playing with its recorded timing (the clock runs
        # while requests are in flight), a limit below what an answer takes makes every answer stale.
        timed = [a for a in args if a != "--lock-step"]
        assert main([*timed, "-o", str(tmp_path / "strict"), "-p", "max_result_age_s:=0.000001"]) == 1
        strict = _records(tmp_path / "strict")
    out = capsys.readouterr().out
    assert [r["success"] for r in fresh] == [True, True] and all(r["bag"] == "robot_2020" for r in fresh)
    # The frames are stamped in 2020; on the bag's clock the answers are fractions of a second old (in
    # lock-step the clock stands still while a request is in flight), not six years.
    assert all(0 <= float(r["age_s"]) < 5.0 for r in fresh), [r["age_s"] for r in fresh]  # type: ignore[arg-type]
    assert all(0 < int(r["clip_end_ns"]) - T0 < 10 * 10**9 for r in fresh)  # type: ignore[call-overload]
    assert [r["error_kind"] for r in strict] == ["stale", "stale"]
    assert "successful_requests 0" in out and "FAIL" in out


def _subscriber(topic: str, count: int, out: Path) -> tuple[subprocess.Popen[str], LineReader]:
    """support.bag_subscriber waiting for `count` messages of `topic` (topic=type), once it said "ready"."""
    sub = subprocess.Popen(
        [*module_cmd("support.bag_subscriber", "--topic", topic, "--count", str(count), "--out", str(out))],
        env=ros_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sub.stdout is not None
    lines = LineReader(sub.stdout)
    try:
        lines.wait_for(lambda line: line == "ready", 90, "the subscriber's 'ready'")
    except BaseException:
        sub.kill()
        sub.wait()
        raise
    return sub, lines


def test_h264_video_plays_as_images_and_ctrl_c_ends_a_loop_cleanly(tmp_path: Path) -> None:
    bag = write_mcap_ros2(
        tmp_path / "video", [*video_messages(frames=30), *camera_messages(frames=30, kinds=("extra",))], 9
    )
    received = tmp_path / "received.json"
    sub, _ = _subscriber("/cam/video=sensor_msgs/msg/Image", 30, received)
    try:
        play = subprocess.run(
            cli("play", str(bag), "--wait-for-subscribers", "30"),
            env=ros_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert play.returncode == 0, play.stderr
        sub.wait(timeout=90)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    stamps = [stamp for _, stamp, _ in json.loads(received.read_text())]
    assert stamps == [T0 + k * 100_000_000 for k in range(30)]  # every frame decoded, with its own stamp
    assert "camera /cam/video (foxglove_msgs/msg/CompressedVideo)" in play.stderr

    # An endless loop of a sqlite3 bag (10 frames, 1 s per pass), stopped with Ctrl-C in its second pass: exit
    # 0, no traceback. The signal is sent once the player said which camera it plays and a subscriber has had
    # more frames than one pass holds, whatever the machine's load (a fixed 3 s wait let the signal land in
    # the player's start-up on a busy machine). Started as a shell starts a background job, with SIGINT
    # ignored: the player still stops on it, as ROS 2 tools do (before, Python kept the inherited SIG_IGN and
    # the loop played on; a test suite run in the background left one playing for hours).
    sq = write_sqlite_bag(tmp_path / "sq", camera_messages(frames=10, kinds=("raw",)), 5)
    second_pass = tmp_path / "second_pass.json"
    sub, _ = _subscriber("/cam/color/image_raw=sensor_msgs/msg/Image", 11, second_pass)
    in_background = ["bash", "-c", 'trap "" INT; exec "$@"', "play"]
    proc = subprocess.Popen(
        [*in_background, *cli("play", str(sq), "--loop")], env=ros_env(), stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        err = LineReader(proc.stderr)
        err.wait_for(lambda line: "cosmos-reasoner-bag: sq: camera" in line, 90, "the chosen camera")
        assert sub.wait(timeout=90) == 0
        assert len(json.loads(second_pass.read_text())) == 11
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, err.text(0.1)
    finally:
        for child in (proc, sub):
            if child.poll() is None:
                child.kill()
                child.wait()
    text = err.text()
    assert "Traceback" not in text and "context" not in text and "Exception ignored" not in text, text
