"""bag_play: a bag made from the robot clip, played by the CLI into a subscriber in another process, arrives
complete with its recorded timing; rate, offset, loops, remapping; bad bags exit with 2."""

from __future__ import annotations

import itertools
import json
import random
import statistics
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from support.processes import LineReader, module_cmd, ros_env
from support.processes import bag_cli as cli

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
from cosmos_reasoner_ros.bag.replay.play import LAG_SAMPLES, PlayOptions, PlayStats, parse_remap

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
        assert sub.stdout is not None
        LineReader(sub.stdout).wait_for(lambda line: line == "ready", 90, "the subscriber's 'ready'")
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
    assert images[-1][1] - images[0][1] == pytest.approx(6.4, abs=0.5)


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
    assert statistics.median(stats.lag_sample) < 0.02


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
    # The pause shifts the rest of the schedule instead of making every later message 0.5 s late.
    assert stats.lag_max_s < 0.35
    assert stats.wall_s == pytest.approx(6.4 / 8 + 0.5, abs=0.5)


@pytest.mark.ros
def test_a_replay_ends_with_its_last_mark_or_its_bound(robot_bag: Path, ros_node) -> None:  # type: ignore[no-untyped-def]
    """Issue 38, finding 5: `--at 4` on a 20 s bag took 30 s. With stop_after_marks the playback ends once the
    last mark has run; `until_s` and bound() leave out what was recorded after the end (or before the start).
    The oracle: the frames' own times (10 Hz from 1_700_000_000 s), counted as they go out."""
    from cosmos_reasoner_ros.bag.replay.play import Player

    t0 = 1_700_000_000_000_000_000
    ran: list[int] = []
    player = Player(ros_node, robot_bag, PlayOptions(rate=8.0, topics=("/camera/image_raw",), drain_s=0))
    try:
        mark = t0 + 1_000_000_000
        stats = player.run(marks=[mark], at_mark=ran.append, stop_after_marks=True)
        assert ran == [mark] and stats.published == 11  # frames 0.0 ... 1.0 s (the mark's own goes first)
        stats = player.run(marks=[mark], at_mark=ran.append)  # without: the whole bag, as before
        assert stats.published == 65
    finally:
        player.close()
    player = Player(ros_node, robot_bag, PlayOptions(rate=8.0, topics=("/camera/image_raw",), until_s=2.0))
    try:
        assert player.span_s == pytest.approx(2.0)
        assert player.run().published == 21  # 0.0 ... 2.0 s
        with pytest.raises(BagError, match="nothing recorded between"):
            player.bound(t0 + 3_000_000_000, None)  # a start after the end
    finally:
        player.close()
    player = Player(ros_node, robot_bag, PlayOptions(rate=8.0, topics=("/camera/image_raw",)))
    try:
        player.bound(t0 + 3_000_000_000, t0 + 4_500_000_000)
        seen: list[int] = []
        assert player.run(before_publish=seen.append).published == 16
        assert (seen[0], seen[-1]) == (t0 + 3_000_000_000, t0 + 4_500_000_000)
    finally:
        player.close()


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
    assert stats.wall_s < 5.0  # ended by the event: an endless loop otherwise


def test_lag_summary_and_remap_parsing() -> None:
    stats = PlayStats(published=4)
    for lag in (0.001, 0.002, 0.003, 0.010):
        stats.add_lag(lag)
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


def test_lag_figures_of_an_endless_loop_stay_in_bounded_memory() -> None:
    # `play --loop` measures every message's lag for hours: the figures come from a bounded uniform sample
    # (before: a list of every lag, 2.6 million floats a day at 30 Hz). A shuffled ramp: the true median is
    # 0.5 s and the p95 0.95 s; the maximum and the count are exact.
    lags = [k / 200_000 for k in range(200_001)]
    random.Random(7).shuffle(lags)
    stats = PlayStats()
    for lag in lags:
        stats.add_lag(lag)
    s = stats.summary()
    assert len(stats.lag_sample) == LAG_SAMPLES == s["lag_samples"] and stats.lag_count == len(lags)
    assert s["lag_max_ms"] == 1000.0
    assert s["lag_median_ms"] == pytest.approx(500.0, abs=30.0)
    assert s["lag_p95_ms"] == pytest.approx(950.0, abs=15.0)


class _Publisher:
    """A publisher that keeps what it was given, in order, across threads."""

    def __init__(self, topic: str, log: list[tuple[str, object]]) -> None:
        self.topic, self.log = topic, log

    def publish(self, msg: object) -> None:
        self.log.append((self.topic, msg))

    def get_subscription_count(self) -> int:
        return 1

    def wait_for_all_acked(self, timeout: object) -> bool:
        return True


class _Node:
    """Just what a Player uses of a node: no DDS, so that every /clock value is seen."""

    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    def create_publisher(self, msg_type: object, topic: str, qos: object) -> _Publisher:
        return _Publisher(topic, self.log)

    def destroy_publisher(self, publisher: object) -> None:
        pass


def _clock_ns(msg: object) -> int:
    return msg.clock.sec * 1_000_000_000 + msg.clock.nanosec  # type: ignore[attr-defined, no-any-return]


@pytest.mark.ros
def test_the_clock_never_jumps_when_a_pause_ends(robot_bag: Path) -> None:
    from cosmos_reasoner_ros.bag.replay.play import Player

    class Probe(Player):
        """Publishes /clock from another thread at the very moment a pause is marked over: where the clock
        thread may run (the window is a few bytecodes wide; here it is always hit)."""

        @property
        def _paused(self) -> bool:
            return bool(self.__dict__.get("_paused_flag", False))

        @_paused.setter
        def _paused(self, value: bool) -> None:
            self.__dict__["_paused_flag"] = value
            if not value and self.__dict__.get("_running"):
                probe = threading.Thread(target=lambda: self._publish_clock(self.bag_time_ns()))
                probe.start()
                # Blocked on the clock's lock (held by the caller) until the pause is over: it reads the clock
                # the moment the lock is released. (A 1 s join here waited out every one of 65 hooks.)
                probe.join(0.02)

    node = _Node()
    player = Probe(node, robot_bag, PlayOptions(rate=8.0, topics=("/camera/image_raw",), clock_hz=200))  # type: ignore[arg-type]

    def pause(bag_ns: int) -> None:
        if bag_ns in (OLD_START + 2_000_000_000, OLD_START + 4_000_000_000):
            time.sleep(0.5)  # at rate 8: 4 s of bag time would pass if the pause were not taken out

    try:
        stats = player.run(before_publish=pause)
    finally:
        player.close()
    assert stats.published == 65
    clock = [_clock_ns(msg) for topic, msg in node.log if topic == "/clock"]
    # The newest /clock value when each frame went out.
    newest, at_frames = 0, []
    for topic, msg in node.log:
        if topic == "/clock":
            newest = _clock_ns(msg)
        else:
            at_frames.append(newest)
    assert len(clock) > 65 and all(OLD_START <= ns <= OLD_START + 6_400_000_000 for ns in clock)
    # Never backwards within a pass (before: forward by the pause, up to the bag's end, when the pause ended,
    # back at the next frame), and every frame goes out with /clock at least at its own stamp.
    backwards = [(a, b) for a, b in itertools.pairwise(clock) if b < a]
    assert not backwards, f"/clock went back {len(backwards)} time(s), e.g. {backwards[:3]}"
    assert all(ns >= OLD_START + k * 100_000_000 for k, ns in enumerate(at_frames)), at_frames
    assert len(stats.lag_sample) == 65


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
    assert "not a recording (neither MCAP nor sqlite3)" in capsys.readouterr().err
