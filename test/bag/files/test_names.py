"""Recordings under any name a file system allows (bag.files.reader, bag.safe_paths, bag.replay.plan): a
storage file is found by its content when its name does not say (renamed, upper-case, a file named `.mcap`),
sqlite3 files whose names hold ?, # or % or bytes that are not UTF-8 are read (rosbags opened them as URIs and
read nothing or failed), labels are text every report can carry, and reading leaves nothing beside the
recording (no sqlite3 -shm or journal, no link left in the temporary directory)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from support.recordings import Recording, write_recording

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.files.integrity import verify
from cosmos_reasoner_ros.bag.files.reader import BagReader, storage_kind
from cosmos_reasoner_ros.bag.records import ResultRecord, write_records
from cosmos_reasoner_ros.bag.replay.plan import bag_label, bag_paths
from cosmos_reasoner_ros.bag.safe_paths import printable

NOT_UTF8 = os.fsdecode(b"run\xff\xfe")


@pytest.mark.parametrize(
    ("name", "storage"),
    [
        ("recording", "mcap"),  # no suffix: found by its first bytes
        ("RECORDING.MCAP", "mcap"),
        (".mcap", "mcap"),  # a dotfile: Path(".mcap").suffix is ""
        ("a?b#c%41", "sqlite3"),
        (NOT_UTF8, "sqlite3"),
        ("rosbag2_2025_06_01-10_20_30 (1).db3", "sqlite3"),
    ],
)
def test_a_bare_file_under_any_name_is_read(tmp_path: Path, name: str, storage: str) -> None:
    tempfile.tempdir = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    try:
        r = Recording(name=name, storage=storage, layout="bare", suffix=False, frames=5)
        path = write_recording(r, tmp_path)
        before = sorted(os.listdir(tmp_path))
        assert storage_kind(path) == (".mcap" if storage == "mcap" else ".db3")
        with BagReader(path) as reader:
            assert reader.topics[r.camera_topic].count == 5
            assert sum(1 for _ in reader.messages([r.camera_topic])) == 5
            assert not verify(reader, [r.camera_topic]).problems
            assert reader.name == printable(path.stem if "." in name[1:] else path.name)
        assert sorted(os.listdir(tmp_path)) == before  # nothing beside the recording
        assert not list((tmp_path / "tmp").iterdir())  # the link for rosbags is gone
    finally:
        tempfile.tempdir = None


def test_labels_are_text_every_report_carries(tmp_path: Path) -> None:
    folder = tmp_path / NOT_UTF8
    write_recording(Recording(name=NOT_UTF8, frames=3), tmp_path)
    label = bag_label(folder)
    assert label == "run\\xff\\xfe" and label.encode("utf-8")
    record = ResultRecord(task="next_action", bag=label)
    write_records([record], tmp_path / "results.jsonl")
    assert json.loads((tmp_path / "results.jsonl").read_text())["bag"] == label
    assert bag_paths([tmp_path]) == [folder]  # a folder of bags finds it


def test_a_recordings_folder_and_file_names_from_ros2_bag_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ros2 bag record` names a recording rosbag2_<date>-<time> and its files <name>_<n>.mcap: read,
    checked and listed whatever else the name holds."""
    for name in ("rosbag2_2025_06_01-10_20_30", "-x=(1) é", ".hidden"):
        bag = write_recording(Recording(name=name, parts=2, frames=6), tmp_path)
        assert main(["check", str(bag)]) == 0
        out = capsys.readouterr().out
        assert "whole: yes" in out and "storage: mcap, 2 files" in out


@pytest.mark.ros
def test_topic_names_ros_2_refuses_are_left_out_or_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recording from another tool may name a topic `/cam-1/image_raw` (ROS 1, a bridge): rclpy refused it
    with an exception (a traceback); now it is named, left out of `play --all-topics`, refused elsewhere."""
    from dataclasses import replace as changed

    from support.bags import camera_messages, write_mcap_ros2

    msgs = [
        changed(m, topic="/cam-1/image_raw") if m.topic == "/cam/color/image_raw" else m
        for m in camera_messages(frames=3, kinds=("raw", "jpeg"))
    ]
    bag = write_mcap_ros2(tmp_path / "ros1", msgs, 9)
    assert main(["play", str(bag), "--all-topics", "--drain", "0"]) == 0
    out, err = capsys.readouterr()
    assert "'/cam-1/image_raw' is not a valid ROS 2 topic name" in err and "/cam-1" not in out
    for argv in (
        ["play", str(bag), "--camera-topic", "/cam-1/image_raw"],
        ["evaluate", str(bag), "-o", str(tmp_path / "out"), "--camera-topic", "/cam-1/image_raw"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "not a valid ROS 2 topic name" in err and "--remap" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "node.log").exists()
    assert main(["record", "-o", str(tmp_path / "rec"), "--node-name", "rosbag2_2025-06-01"]) == 2
    assert "--node-name 'rosbag2_2025-06-01'" in capsys.readouterr().err


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_make_writes_a_bag_of_any_name_and_nothing_beside_it(
    robot_clip: Path, tmp_path: Path, storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # rosbags' sqlite3 writer opened `file:<path>` as an SQLite URI: `make -o "sq ?#%41"` wrote its database
    # to "sq " beside the folder named, which then lacked its storage file.
    for name in ("sq ?#%41", NOT_UTF8, "rosbag2_2025_06_01-10_20_30 (x)=y"):
        out = tmp_path / f"{name}-{storage}"
        argv = ["make", str(robot_clip), "-o", str(out), "--rate", "2", "--max-long-side", "64"]
        assert main([*argv, "--storage", storage]) == 0
        assert main(["check", str(out)]) == 0
        assert "whole: yes" in capsys.readouterr().out
    assert len(os.listdir(tmp_path)) == 3  # the three bags, nothing else
