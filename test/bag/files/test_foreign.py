"""Recordings the project did not write: MCAP from the `mcap` package's ROS 2 writer (metadata.yaml of
every version 4-9, none at all, a bare file, split in several files), sqlite3 `.db3` of each rosbag2 era
written with Python's sqlite3, extra topics of types nothing here knows, JPEG and PNG CompressedImage, H.264
video. Also damaged bags, hostile names and outputs that cannot be written: each a clear exit 2 before
anything runs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.bags import (
    QOS_V8,
    camera_messages,
    damage,
    read_topics,
    scene,
    video_messages,
    write_mcap_ros2,
    write_sqlite_bag,
)

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.integrity import verify
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.files.topics import choose_topics
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.bag.replay.plan import bag_paths
from cosmos_reasoner_ros.bag.report.frames import FrameIndex
from cosmos_reasoner_ros.bag.runs.scenario import load_scenario
from cosmos_reasoner_ros.bag.runs.suite import check_baseline
from cosmos_reasoner_ros.bag.safe_paths import child, safe_name

CAMERAS = ("/cam/color/image_raw", "/cam/color/image_raw/compressed", "/cam/png/compressed")


def foreign_bags(root: Path) -> dict[str, Path]:
    msgs = camera_messages()
    bags = {f"mcap_v{v}": write_mcap_ros2(root / f"mcap_v{v}", msgs, v) for v in range(4, 10)}
    bags["mcap_bare"] = write_mcap_ros2(root / "bare.mcap", msgs)
    bags["mcap_no_metadata"] = write_mcap_ros2(root / "no_metadata", msgs, None, parts=2)
    bags["mcap_split"] = write_mcap_ros2(root / "split", msgs, 9, parts=3)
    for v in (4, 5, 8, 9):
        bags[f"sqlite_v{v}"] = write_sqlite_bag(root / f"sqlite_v{v}", msgs, v)
    bags["sqlite_split"] = write_sqlite_bag(root / "sqlite_split", msgs, 9, parts=2)
    return bags


def test_every_foreign_writer_and_version_reads_whole(tmp_path: Path) -> None:
    for name, bag in foreign_bags(tmp_path).items():
        with BagReader(bag) as reader:
            topics = [t.name for t in reader.topics.values()]
            assert set(CAMERAS) <= set(topics), name
            # metadata.yaml's QoS differs from the storage's (the MCAP channels carry none): rosbags' folder
            # reader yields 0 messages for such bags; every camera message is read here.
            got = read_topics(bag)
            assert all(len(got[t]) == 20 for t in CAMERAS), name
            # Types no ROS install has come from the definitions the bag stores; where it stores none
            # (sqlite3 before Iron), that topic alone cannot be read, and nothing else suffers.
            store, unknown = reader.typestore(topics)
            if name in ("sqlite_v4", "sqlite_v5"):
                assert set(unknown) == {"acme_msgs/msg/Widget"}, name
            else:
                assert not unknown, name
                widget = store.deserialize_cdr(
                    next(reader.messages(["/acme/widget"])).data, "acme_msgs/msg/Widget"
                )
                assert widget.parts[0].weight == 1.5 and list(widget.pose) == [1.0, 2.0, 3.0]
            # Whole: nothing damaged. mcap_ros2 writes chunk CRCs, so nothing is unverifiable either.
            integrity = verify(reader, list(CAMERAS))
            assert not integrity.problems and not integrity.notes, (name, integrity)
            assert [integrity.counts[t] for t in CAMERAS] == [20, 20, 20]


def test_topics_are_chosen_by_type_or_named(tmp_path: Path) -> None:
    bag = write_mcap_ros2(tmp_path / "robot", camera_messages(), 9)
    with BagReader(bag) as reader:
        with pytest.raises(BagError) as exc:
            choose_topics(reader)
        text = str(exc.value)
        assert "3 camera topics" in text and all(t in text for t in CAMERAS) and "--camera-topic" in text
        choice = choose_topics(reader, ["/cam/png/compressed"])
        # CameraInfo in the camera's namespace is not there: the one above it; the depth beside it.
        assert choice.infos == ("/cam/color/camera_info",) and choice.depths == ("/cam/depth/image_raw",)
        assert choice.topics == ("/cam/png/compressed", "/cam/color/camera_info", "/cam/depth/image_raw")
        assert choose_topics(reader, ["/cam/color/image_raw"], depth=False).depths == ("",)
        with pytest.raises(BagError, match="carries std_msgs/msg/String, not camera images"):
            choose_topics(reader, ["/chatter"])
        with pytest.raises(BagError, match="has no topic /nope"):
            choose_topics(reader, ["/nope"])
    only = write_mcap_ros2(tmp_path / "one", camera_messages(kinds=("jpeg", "info", "extra")), 9)
    with BagReader(only) as reader:
        choice = choose_topics(reader)
        assert (
            choice.cameras == ("/cam/color/image_raw/compressed",) and "only camera topic" in choice.chosen[0]
        )
        assert choice.depths == ("",)


def test_frames_of_jpeg_png_and_h264_video_topics(tmp_path: Path) -> None:
    bag = write_mcap_ros2(tmp_path / "robot", [*camera_messages(), *video_messages()], 9)
    for topic in (*CAMERAS, "/cam/video"):
        frames = FrameIndex(bag, topic)
        try:
            image = frames.frame(frames._stamps[15])
            assert image is not None and image.shape == (48, 64, 3), topic
            # The square of frame 15 sits at x = 45..54; lossy codecs keep it bright.
            assert image[15, 47:53].mean() > 150 and image[15, 5:40].mean() < 80, topic
        finally:
            frames.close()


def test_damaged_bags_are_reported_never_replayed(
    robot_clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = tmp_path / "own"
    make_bag([robot_clip], own, MakeOptions(rate_hz=10.0, max_long_side=320))
    with BagReader(own) as reader:  # the project's own writer now writes CRCs: nothing is unverifiable
        assert not verify(reader, ["/camera/image_raw"]).notes
    foreign = write_mcap_ros2(tmp_path / "foreign", camera_messages(frames=200, width=320, height=240), 9)
    sqlite = write_sqlite_bag(tmp_path / "sqlite", camera_messages(frames=200, width=320, height=240), 9)
    for bag in (own, foreign, sqlite):
        damage(next(p for p in bag.iterdir() if p.suffix in (".mcap", ".db3")))
        rc = main(
            ["evaluate", str(bag), "-o", str(tmp_path / f"r_{bag.name}"), "--camera-topic", _camera(bag)]
        )
        err = capsys.readouterr().err
        assert rc == 2 and "damaged" in err and "Traceback" not in err, (bag, err)
        assert not (tmp_path / f"r_{bag.name}" / "node.log").exists()  # no node started, nothing judged


def _camera(bag: Path) -> str:
    return "/camera/image_raw" if bag.name == "own" else "/cam/color/image_raw"


def test_empty_bags_and_folders_of_bags_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_mcap_ros2(tmp_path / "empty2.mcap", camera_messages(frames=1, kinds=("extra",)))
    assert main(["play", str(tmp_path / "empty2.mcap")]) == 2
    assert "no camera topic" in capsys.readouterr().err
    # play of a folder holding several bags (evaluate --record's outputs of several bags) names them.
    folder = tmp_path / "outputs"
    for name in ("a", "b"):
        write_mcap_ros2(folder / name, camera_messages(frames=2), 9)
    assert main(["play", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "holds 2 bags (a, b)" in err and "Traceback" not in err
    with BagReader(folder / "a") as reader:
        assert reader.duration_s == pytest.approx(0.1, abs=0.01)


def test_bag_folders_of_symbolic_links_are_followed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for name in ("x", "y", "z"):
        write_mcap_ros2(store / name, camera_messages(frames=2), 9)
    links = tmp_path / "suite"
    links.mkdir()
    for name in ("x", "y", "z"):
        os.symlink(store / name, links / f"run_{name}")
    os.symlink(links, links / "loop")  # a link back up never loops
    assert [p.name for p in bag_paths([links])] == ["run_x", "run_y", "run_z"]
    with BagReader(links / "run_x") as reader:
        assert reader.name == "run_x"  # the name the user gave, which labels the bag's results


def test_names_from_input_stay_inside_the_output(tmp_path: Path) -> None:
    for text in ("a/../../../../tmp/x", "..", ".hidden", "x" * 300, "../node.log", "a\x00b", "é/ü"):
        name = safe_name(text)
        assert "/" not in name and not name.startswith(".") and len(name) <= 80
        assert child(tmp_path, text).resolve().parent == tmp_path.resolve()
    assert safe_name("seed=3") == "seed=3" and safe_name("a/b") != safe_name("a_b")
    os.symlink("/tmp", tmp_path / "escape")
    with pytest.raises(BagError, match="outside"):
        child(tmp_path, "escape")
    scenario = tmp_path / "s.yaml"
    for sweep, problem in (
        ("{parameter: ../x, values: [1]}", "not a ROS parameter name"),
        ("{parameter: model, values: ['a/../../../../tmp/x', b]}", ""),
    ):
        scenario.write_text(f"bags: [b]\ngoals: [{{task: x, at: 1}}]\nsweep: {sweep}\n")
        if problem:
            with pytest.raises(BagError, match=problem):
                load_scenario(scenario)
        else:
            variants = load_scenario(scenario).variants()
            assert all("/" not in v.folder for v in variants)
            assert child(tmp_path, variants[0].name).parent == tmp_path


def test_outputs_that_cannot_be_written_exit_2_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bag = write_mcap_ros2(tmp_path / "robot", camera_messages(kinds=("raw",)), 9)
    for junit in (tmp_path, Path("/proc/junit.xml")):
        rc = main(["evaluate", str(bag), "-o", str(tmp_path / "r"), "--junit", str(junit)])
        out, err = capsys.readouterr()
        assert rc == 2 and "JUnit file" in err and "Traceback" not in err
        assert "PASS" not in out and "FAIL" not in out
    rc = main(["evaluate", str(bag), "-o", "/proc/report"])
    assert rc == 2 and "cannot write the report folder" in capsys.readouterr().err
    # A parameter file that is not one: one line, before any node starts.
    bad = tmp_path / "params.yaml"
    bad.write_text("reasoner_node:\n  clip_seconds: 3\n")
    assert main(["evaluate", str(bag), "-o", str(tmp_path / "r2"), "--params-file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "needs a ros__parameters mapping" in err and "Traceback" not in err


def test_a_baseline_of_other_bags_or_tasks_is_refused() -> None:
    def rec(bag: str, task: str, bag_id: str = "id1") -> ResultRecord:
        return ResultRecord(task=task, bag=bag, bag_id=bag_id, trigger_s=2.0, success=True)

    tasks = {("next_action", "", "")}
    assert check_baseline([rec("robot", "next_action")], ["robot"], tasks, {"robot": "id1"})
    with pytest.raises(BagError, match=r"bags: the baseline has other, this run robot"):
        check_baseline([rec("other", "next_action")], ["robot"], tasks)
    with pytest.raises(BagError, match=r"tasks: the baseline asked caption"):
        check_baseline([rec("robot", "caption")], ["robot"], tasks)
    with pytest.raises(BagError, match="not the recording the baseline replayed"):
        check_baseline([rec("robot", "next_action", "id2")], ["robot"], tasks, {"robot": "id1"})
    # A one-bag baseline written before records named their bag takes this run's bag.
    assert check_baseline([rec("", "next_action", "")], ["robot"], tasks)[0].bag == "robot"


def test_make_stamps_from_now_by_default(robot_clip: Path, tmp_path: Path) -> None:
    before = time.time_ns()
    made = make_bag([robot_clip], tmp_path / "now", MakeOptions(rate_hz=2.0, max_long_side=64))
    assert before <= made.start_ns <= time.time_ns()
    first_stamp = read_topics(tmp_path / "now")["/camera/image_raw"][0][1].header.stamp
    assert first_stamp.sec * 10**9 + first_stamp.nanosec == made.start_ns
    # Other tools read the metadata.yaml the project's MCAP writer puts beside it.
    meta = yaml.safe_load((tmp_path / "now" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 9 and meta["message_count"] == sum(made.topics.values())
    from rosbags.rosbag2 import Reader

    with Reader(tmp_path / "now") as reader:
        assert sum(1 for _ in reader.messages()) == meta["message_count"]


def test_qos_in_metadata_that_differs_from_the_storage_loses_nothing(tmp_path: Path) -> None:
    """rosbag2's own talker test bags: metadata.yaml's QoS text is not the storage's."""
    bag = write_sqlite_bag(tmp_path / "talker", camera_messages(kinds=("raw", "extra")), 4)
    meta = yaml.safe_load((bag / "metadata.yaml").read_text())
    for topic in meta["rosbag2_bagfile_information"]["topics_with_message_count"]:
        topic["topic_metadata"]["offered_qos_profiles"] = yaml.safe_dump([{**QOS_V8, "depth": 0}])
    (bag / "metadata.yaml").write_text(yaml.safe_dump(meta))
    from rosbags.rosbag2 import Reader

    with Reader(bag) as reader:
        assert sum(1 for _ in reader.messages()) == 0  # what the tools read before
    got = read_topics(bag)
    assert len(got["/cam/color/image_raw"]) == 20 and len(got["/chatter"]) == 20
    assert np.array_equal(
        np.frombuffer(got["/cam/color/image_raw"][3][1].data, np.uint8).reshape(48, 64, 3), scene(3)
    )


def test_a_bag_without_messages_on_its_camera_topic_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cosmos_reasoner_ros.bag.files.typestore import typestore
    from cosmos_reasoner_ros.bag.files.writer import open_writer

    writer = open_writer(tmp_path / "empty")
    writer.add_topic("/camera/image_raw", "sensor_msgs/msg/Image", typestore())
    writer.close()
    for command in (
        ["evaluate", str(tmp_path / "empty"), "-o", str(tmp_path / "r")],
        ["play", str(tmp_path / "empty")],
    ):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "no messages on /camera/image_raw: nothing to replay" in err and "9223372036" not in err


def test_one_percentile_in_stdout_verdict_html_and_junit(tmp_path: Path) -> None:
    import re

    from cosmos_reasoner_ros.bag.judge.tolerances import load_tolerances
    from cosmos_reasoner_ros.bag.report.junit import JUnitSuite, write_junit
    from cosmos_reasoner_ros.bag.runs.finish import finish_run, summary_lines

    latencies = [0.5, 0.7, 1.1, 1.3, 2.0, 2.2, 3.1, 4.519, 5.0, 6.199]
    records = [
        ResultRecord(task="next_action", trigger_s=float(i), success=True, latency_s=x)
        for i, x in enumerate(latencies)
    ]
    result = finish_run(records, tmp_path, {}, load_tolerances())
    p95 = f"{result.verdict.stats.latency_p95_s:.3f}"
    assert p95 == "6.199"  # nearest rank: the 10th of 10
    assert f"p95 {p95} s" in summary_lines(result)[0]
    assert re.search(rf"p95\s+{p95} s", (tmp_path / "index.html").read_text())
    junit = write_junit(tmp_path / "junit.xml", [JUnitSuite("run", result.verdict)]).read_text()
    assert f'name="latency_p95_s" value="{p95}"' in junit and "latency_gate" in junit


def test_scenario_takes_a_media_dir() -> None:
    from cosmos_reasoner_ros.bag.cli import build_parser

    args = build_parser().parse_args(["scenario", "s.yaml", "-o", "out", "--media-dir", "/srv/media"])
    assert args.media_dir == Path("/srv/media")


def _zstd_zeros(size: int, declare: bool) -> bytes:
    """A zstd frame of `size` zero bytes (a few hundred kB), made without holding them in memory; its header
    declares the size or not."""
    import zstandard

    compressor = zstandard.ZstdCompressor(write_content_size=declare)
    stream = compressor.compressobj(size=size if declare else -1)
    block = bytes(16 << 20)
    parts = [stream.compress(block[: min(len(block), size - done)]) for done in range(0, size, len(block))]
    return b"".join([*parts, stream.flush()])


def test_message_decompression_is_bounded_by_the_largest_frame(tmp_path: Path) -> None:
    # rosbag2's per-message zstd compression (compression_mode: message): a crafted message may declare or
    # hold gigabytes (zeros compress to almost nothing). zstd allocates whatever a frame declares, whatever
    # output bound it is given: the check and the replay refuse such a message (exit 2) with memory bounded
    # by the largest frame the node accepts (8K UHD at 8 bytes a pixel; before: 2 GiB a message, and a
    # declared size beyond that allocated anyway).
    import tracemalloc

    import zstandard
    from rosbags.typesys.stores.ros2_kilted import sensor_msgs__msg__Image as Image
    from support.bags import _header

    from cosmos_reasoner_ros.bag.files.reader import max_message_bytes
    from cosmos_reasoner_ros.bag.files.typestore import typestore
    from cosmos_reasoner_ros.bag.files.writer import open_writer

    pixels = np.zeros(12, np.uint8)
    image = Image(header=_header(1), height=2, width=2, encoding="rgb8", is_bigendian=0, step=6, data=pixels)
    good = zstandard.ZstdCompressor().compress(bytes(typestore().serialize_cdr(image, Image.__msgtype__)))
    assert max_message_bytes() < 300 << 20
    bombs = {"declared 1 GiB": _zstd_zeros(1 << 30, True), "undeclared 400 MB": _zstd_zeros(400 << 20, False)}
    for name, bomb in bombs.items():
        bag = tmp_path / name.replace(" ", "_")
        writer = open_writer(bag)
        topic = writer.add_topic("/camera/image_raw", "sensor_msgs/msg/Image", typestore())
        writer.write(topic, 1_000, good)  # the first message of the topic: fine
        writer.write(topic, 2_000, bomb)
        writer.close()
        meta = bag / "metadata.yaml"
        data = yaml.safe_load(meta.read_text())
        data["rosbag2_bagfile_information"].update(compression_mode="message", compression_format="zstd")
        meta.write_text(yaml.safe_dump(data))
        tracemalloc.start()
        try:
            with BagReader(bag) as reader:
                problems = verify(reader, ["/camera/image_raw"]).problems
                with pytest.raises(BagError, match="more than any frame"):
                    for _ in reader.messages(["/camera/image_raw"]):
                        pass
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert any("decompress to more than any frame" in p for p in problems), (name, problems)
        assert peak < 400 << 20, (name, peak)
        assert main(["play", str(bag)]) == 2


def test_a_bag_is_read_with_the_types_of_the_distribution_that_recorded_it(tmp_path: Path) -> None:
    # rosbags has a store per distribution: Jazzy's and Kilted's differ only in nav_msgs/msg/Goals, Humble's
    # visualization_msgs/msg/Marker lacks the texture fields of later ones (its CDR differs). metadata.yaml
    # (version 8 on) names the distribution; without it, this process's is used (before: Kilted's always).
    from rosbags.typesys import Stores, get_typestore

    from cosmos_reasoner_ros.bag.files.typestore import store_of
    from cosmos_reasoner_ros.ros_compat import ros_distro

    msgs = camera_messages(frames=2, kinds=("raw",))
    marker = "visualization_msgs/msg/Marker"
    expected = {d: get_typestore(store_of(d)).types[marker] for d in ("humble", "jazzy", "kilted")}
    assert expected["humble"] != expected["kilted"]
    for distro in ("humble", "jazzy", "kilted"):
        bag = write_mcap_ros2(tmp_path / distro, msgs, 9)
        meta = bag / "metadata.yaml"
        meta.write_text(meta.read_text().replace("ros_distro: jazzy", f"ros_distro: {distro}"))
        with BagReader(bag) as reader:
            assert reader.ros_distro == distro
            store, _ = reader.typestore(["/cam/color/image_raw"])
            assert store.types[marker] == expected[distro]
            assert ("nav_msgs/msg/Goals" in store.types) == (distro == "kilted")
    with BagReader(write_mcap_ros2(tmp_path / "bare.mcap", msgs)) as reader:  # no metadata.yaml
        store, _ = reader.typestore(["/cam/color/image_raw"])
        assert store.types[marker] == get_typestore(store_of(ros_distro())).types[marker]
    assert store_of("rolling") == store_of(None) and store_of("Jazzy") == Stores.ROS2_JAZZY
