"""Types of other distributions (bag.files.reader, integrity; replay.play): Humble's sensor_msgs/Range lacks
Jazzy's `variance`. Recorded with its definition (an MCAP schema, rosbag2's sqlite3 message_definitions) it
is read with the bag's own; recorded without one (sqlite3 before Iron), a topic whose messages decode only
with another distribution's layout is left out with the reason. Neither is ever called damaged (`play
--all-topics` on the rosbags-rs test bag said "bag is damaged: 2 messages of /test/sensor_msgs/range do not
deserialize"). A type whose bytes this installation cannot publish as they are is left out of `play
--all-topics`, and refused when named."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support.bags import LOG, PLACEHOLDER_LOG_MSG, definition, rosout_messages, write_sqlite_bag
from support.recordings import RANGE, Recording, write_recording

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.files.integrity import verify
from cosmos_reasoner_ros.bag.files.reader import BagReader, same_layout
from cosmos_reasoner_ros.bag.files.typestore import distro_name, typestore

RANGE_TOPIC = "/test/sensor_msgs/range"
HERE = distro_name(None)  # this process's distribution (Jazzy or Kilted)


@pytest.mark.parametrize(
    ("storage", "version"), [("mcap", 9), ("mcap", 4), ("sqlite3", 9)], ids=["mcap", "mcap-v4", "sqlite3"]
)
def test_a_stored_definition_of_another_distribution_is_the_one_read(
    tmp_path: Path, storage: str, version: int
) -> None:
    bag = write_recording(
        Recording("humble", storage, metadata_version=version, older_type="schema"), tmp_path
    )
    with BagReader(bag) as reader:
        topics = list(reader.topics)
        # Compared with the standard types of the distribution the bag names (metadata version 8 on: the
        # recording's writer says Jazzy), else this process's.
        base = distro_name(reader.ros_distro or None)
        assert base == ("Jazzy" if version >= 8 else HERE)
        assert f"differs from ROS 2 {base}'s" in reader.own_definitions(topics)[RANGE]
        store, unknown = reader.typestore(topics)
        assert not unknown and not same_layout(store, typestore(None), RANGE)
        first = next(reader.messages([RANGE_TOPIC]))
        msg = store.deserialize_cdr(first.data, RANGE)
        assert msg.range == pytest.approx(1.5) and not hasattr(msg, "variance")
        checked = verify(reader, topics, everything=True)
        assert not checked.problems and not checked.foreign, checked


def test_without_a_definition_another_layout_leaves_the_topic_out_never_damaged(tmp_path: Path) -> None:
    bag = write_recording(Recording("humble", "sqlite3", metadata_version=5, older_type="bare"), tmp_path)
    with BagReader(bag) as reader:
        checked = verify(reader, list(reader.topics))
    assert not checked.problems, checked.problems
    assert checked.foreign == {
        RANGE_TOPIC: f"its messages are ROS 2 Humble's {RANGE}, not {HERE}'s, and the bag stores no "
        "definition of it: left out"
    }
    # A message of a type read with the bag's own definition that does not deserialize is damage, as before.
    broken = write_recording(Recording("broken", "sqlite3", metadata_version=9), tmp_path)
    db = sqlite3.connect(next(broken.glob("*.db3")))
    db.execute(
        "UPDATE messages SET data = ? WHERE id = (SELECT min(id) FROM messages)", (b"\x00\x01\x00\x00\xff",)
    )
    db.commit()
    db.close()
    with BagReader(broken) as reader:
        checked = verify(reader, list(reader.topics))
    assert checked.problems and "do not deserialize" in checked.problems[0] and not checked.foreign


@pytest.mark.ros
def test_play_leaves_another_layout_out_or_refuses_it_when_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for r in (
        Recording("schema", older_type="schema", frames=4),
        Recording("bare", "sqlite3", metadata_version=5, older_type="bare", frames=4),
    ):
        bag = write_recording(r, tmp_path)
        assert main(["play", str(bag), "--all-topics", "--drain", "0"]) == 0
        out, err = capsys.readouterr()
        assert f"left out {RANGE_TOPIC}:" in err and "damaged" not in err, err
        assert RANGE_TOPIC not in out and '"/cam/color/image_raw": 4' in out
        assert main(["play", str(bag), "--topics", RANGE_TOPIC]) == 2
        err = capsys.readouterr().err
        assert f"topic {RANGE_TOPIC} cannot be played" in err and "damaged" not in err, err


def _placeholder(msgtype: str) -> str:
    return PLACEHOLDER_LOG_MSG if msgtype == LOG else definition(msgtype)


def test_a_stored_definition_that_does_not_describe_the_data_yields_to_the_installed_type(
    tmp_path: Path,
) -> None:
    """Issue 38, finding 6: rosbag2's own sqlite3 talker bag stores "uint8 level" for rcl_interfaces/Log; its
    messages decode with the installed type and were called damaged ("10 message(s) of /rosout do not
    deserialize"). The installed type wins, and the bag's check says so."""
    bag = write_sqlite_bag(tmp_path / "talker", rosout_messages(10), 9, definitions=_placeholder)
    with BagReader(bag) as reader:
        topics = list(reader.topics)
        checked = verify(reader, topics, everything=True)
        assert not checked.problems and not checked.foreign, checked
        said = [n for n in checked.notes if LOG in n]
        # The bag says Jazzy wrote it (its sqlite3 schema table): that distribution's type reads it, whichever
        # distribution this process runs.
        assert len(said) == 1 and "does not describe its messages" in said[0] and "Jazzy" in said[0], said
        store, unknown = reader.typestore(topics)
        assert not unknown and same_layout(store, typestore(None), LOG)
        first = next(reader.messages(["/rosout"]))
        assert store.deserialize_cdr(first.data, LOG).msg == "Publishing: 'Hello World: 0'"


def test_a_stored_definition_is_kept_where_neither_it_nor_the_installed_type_reads_the_data(
    tmp_path: Path,
) -> None:
    """Damage stays damage: a payload neither definition reads is not blamed on the definition."""
    bag = write_sqlite_bag(tmp_path / "talker", rosout_messages(3), 9, definitions=_placeholder)
    db = sqlite3.connect(next(bag.glob("*.db3")))
    db.execute("UPDATE messages SET data = ?", (b"\x00\x01\x00\x00\xff\xff\xff\xff\x01",))
    db.commit()
    db.close()
    with BagReader(bag) as reader:
        checked = verify(reader, list(reader.topics))
    assert checked.problems and "do not deserialize" in checked.problems[0]
