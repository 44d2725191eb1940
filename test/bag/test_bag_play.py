"""bag_play: a bag made from the robot clip, played by the CLI into a subscriber in another process, arrives
complete with its recorded timing; rate, offset, loops, remapping; bad bags exit with 2."""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from support.processes import bag_cli as cli
from support.processes import module_cmd, ros_env

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
from cosmos_reasoner_ros.bag.replay.play import PlayOptions, PlayStats, parse_remap

OLD_START = 1_700_000_000_000_000_000  # bags recorded in 2023: replays run on their clock


@pytest.fixture(scope="module")
def robot_bag(robot_clip: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    bag = tmp_path_factory.mktemp("play") / "robot"
    make_bag([robot_clip], bag, MakeOptions(start_ns=OLD_START, rate_hz=10.0, max_long_side=320))
    return bag  # 65 images + 65 CameraInfo over 6.4 s


@pytest.mark.ros
@pytest.mark.slow
def test_play_into_another_process_keeps_every_message_and_the_timing(
    robot_bag: Path, tmp_path: Path
) -> None:
    received_file, stats_file = tmp_path / "received.json", tmp_path / "stats.json"
    sub = subprocess.Popen(
        [
            *module_cmd("support.bag_subscriber"),
            "--topic",
            "/camera/image_raw=sensor_msgs/msg/Image",
            "--topic",
            "/cam/info=sensor_msgs/msg/CameraInfo",
            "--count",
            "130",
            "--out",
            str(received_file),
            "--timeout",
            "90",
        ],
        env=ros_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sub.stdout is not None and sub.stdout.readline().strip() == "ready"
        play = subprocess.run(
            cli(
                "play",
                str(robot_bag),
                "--remap",
                "/camera/camera_info:=/cam/info",
                "--wait-for-subscribers",
                "60",
                # Deeper than the bag (130 messages): a reliable writer keeping only 10 would overwrite
                # samples a subscriber slowed down by a loaded machine has not acknowledged yet.
                "--qos-depth",
                "200",
                "--stats",
                str(stats_file),
            ),
            env=ros_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert play.returncode == 0, play.stderr
        assert sub.wait(timeout=60) == 0
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    stats = json.loads(stats_file.read_text())
    assert stats["published"] == 130
    # The player waited for the subscriber's acknowledgements before it exited: without that, the last
    # message or two died with the player process in about a third of the runs.
    assert stats["unacknowledged"] == []
    assert stats["per_topic"] == {"/camera/image_raw": 65, "/cam/info": 65}
    received = json.loads(received_file.read_text())
    images = [(stamp, t) for topic, stamp, t in received if topic == "/camera/image_raw"]
    infos = [stamp for topic, stamp, _ in received if topic == "/cam/info"]
    expected = [1_700_000_000_000_000_000 + k * 100_000_000 for k in range(65)]
    assert [s for s, _ in images] == expected and sorted(infos) == expected
    # Arrival times follow the recorded stamps: offset of each arrival from its stamp, relative to the first.
    offsets = np.array([(t - images[0][1]) - (s - images[0][0]) / 1e9 for s, t in images])
    # Measured against the typical offset, not the first arrival's: a reliable first message that the reader
    # saw only on its repair (it matched the writer a moment late) arrives ~35 ms late and would shift all.
    err = np.abs(offsets - np.median(offsets))
    median_ms, p95_ms = float(np.median(err) * 1e3), float(np.percentile(err, 95) * 1e3)
    print(
        f"\nplay timing: publish lag median {stats['lag_median_ms']} ms p95 {stats['lag_p95_ms']} ms; "
        f"arrival error median {median_ms:.1f} ms p95 {p95_ms:.1f} ms"
    )
    assert stats["lag_median_ms"] < 20 and stats["lag_p95_ms"] < 200
    # Generous for a shared 2-core machine, but a wrong schedule would be seconds off.
    assert median_ms < 30 and p95_ms < 250
    # The total span matches the bag (6.4 s), neither compressed nor stretched.
    assert images[-1][1] - images[0][1] == pytest.approx(6.4, abs=0.15)


@pytest.fixture
def ros_node():  # type: ignore[no-untyped-def]
    import rclpy

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("test_bag_play", context=context)
    yield node
    node.destroy_node()
    rclpy.shutdown(context=context)


@pytest.mark.ros
def test_rate_offset_loops_and_remap_in_process(robot_bag: Path, ros_node) -> None:  # type: ignore[no-untyped-def]
    from rclpy.qos import ReliabilityPolicy

    from cosmos_reasoner_ros.bag.replay.play import Player

    player = Player(
        ros_node,
        robot_bag,
        PlayOptions(
            rate=4.0,
            loops=2,
            start_offset_s=3.0,
            topics=("/camera/image_raw",),
            remap={"/camera/image_raw": "/front/image"},
            topic_qos={"/camera/image_raw": "sensor_data"},
        ),
    )
    try:
        assert player.duration_s == pytest.approx(3.4, abs=0.01)
        published = dict(ros_node.get_publisher_names_and_types_by_node("test_bag_play", "/"))
        assert published["/front/image"] == ["sensor_msgs/msg/Image"] and "/camera/image_raw" not in published
        (info,) = ros_node.get_publishers_info_by_topic("/front/image")
        assert info.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT  # the per-topic QoS
        seen: list[int] = []
        stats = player.run(before_publish=seen.append)
    finally:
        player.close()
    # From 3.0 s: frames 30..64 (35), twice; at 4x a pass takes 0.85 s.
    assert stats.per_topic == {"/front/image": 70}
    assert seen[:35] == seen[35:] and seen[0] == 1_700_000_003_000_000_000
    assert stats.wall_s == pytest.approx(2 * 3.4 / 4.0, abs=0.5)
    assert statistics.median(stats.lags_s) < 0.02


@pytest.mark.ros
def test_blocking_hook_pauses_the_playback_clock(robot_bag: Path, ros_node) -> None:  # type: ignore[no-untyped-def]
    from cosmos_reasoner_ros.bag.replay.play import Player

    player = Player(ros_node, robot_bag, PlayOptions(rate=8.0, topics=("/camera/image_raw",)))
    pauses = [0]

    def hook(bag_ns: int) -> None:
        if bag_ns == 1_700_000_002_000_000_000:
            time.sleep(0.5)
            pauses[0] += 1

    try:
        stats = player.run(before_publish=hook)
    finally:
        player.close()
    assert pauses == [1] and stats.published == 65
    # The pause shifts the rest of the schedule instead of making every later message late.
    assert max(stats.lags_s) < 0.1
    assert stats.wall_s == pytest.approx(6.4 / 8 + 0.5, abs=0.5)


@pytest.mark.ros
def test_stop_event_ends_an_endless_loop(robot_bag: Path, ros_node) -> None:  # type: ignore[no-untyped-def]
    from cosmos_reasoner_ros.bag.replay.play import Player

    player = Player(ros_node, robot_bag, PlayOptions(rate=20.0, loops=0))
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    try:
        stats = player.run(stop)
    finally:
        player.close()
    assert stats.published > 130  # more than one pass (0.32 s each) in 1 s
    assert stats.wall_s < 2.0


def test_lag_summary_and_remap_parsing() -> None:
    stats = PlayStats(published=4, lags_s=[0.001, 0.002, 0.003, 0.010])
    s = stats.summary()
    assert s["lag_median_ms"] == 2.5 and s["lag_p95_ms"] == 10.0 and s["lag_max_ms"] == 10.0
    assert parse_remap(["/a:=/b", "c:=d"]) == {"/a": "/b", "c": "d"}
    with pytest.raises(BagError):
        parse_remap(["/a=/b"])
    with pytest.raises(BagError):
        PlayOptions(rate=0).check()
    with pytest.raises(BagError, match="unknown qos 'fast'"):
        PlayOptions(topic_qos={"/a": "fast"}).check()
    with pytest.raises(BagError, match="drain"):
        PlayOptions(drain_s=-1).check()
    assert s["unacknowledged"] == []


@pytest.mark.ros
def test_bad_bags_exit_2(robot_bag: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["play", str(robot_bag), "--topics", "/nope"]) == 2
    err = capsys.readouterr().err
    assert "has no topic /nope" in err and "/camera/image_raw (sensor_msgs/msg/Image," in err
    assert "Traceback" not in err

    truncated = tmp_path / "half"
    truncated.mkdir()
    for f in robot_bag.iterdir():
        data = f.read_bytes()
        (truncated / f.name).write_bytes(data[: len(data) // 2] if f.suffix == ".mcap" else data)
    assert main(["play", str(truncated)]) == 2
    err = capsys.readouterr().err
    assert "damaged, truncated" in err and "Traceback" not in err

    assert main(["play", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err
    other = tmp_path / "notes.txt"
    other.write_text("not a bag")
    assert main(["play", str(other)]) == 2
    assert "unknown storage file" in capsys.readouterr().err
