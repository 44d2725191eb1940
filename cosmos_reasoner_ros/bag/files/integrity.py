"""Is a recording whole? One pass over every storage file before anything is replayed or judged: MCAP chunk
and data-section CRCs, the messages read per channel against the file's statistics and message indexes, per
topic against metadata.yaml; sqlite3's own consistency check and its rows per topic; and the messages of the
topics to replay deserialized where no CRC protects them (sqlite3, MCAP chunks without a CRC, messages outside
chunks), else the first of each topic per file (the types fit the data; the CRCs vouch for the rest). A bag
without CRCs cannot show damage to its message payloads: that is said, not hidden. Per-message compressed
payloads decompress to at most the largest frame (reader.decompress_message). No ROS import."""

from __future__ import annotations

import itertools
import sqlite3
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from rosbags.typesys.store import Typestore

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.reader import (
    BagReader,
    check_message_size,
    decompress_message,
    max_message_bytes,
)
from cosmos_reasoner_ros.bag.files.storages import CORRUPT, storage_kind
from cosmos_reasoner_ros.bag.safe_paths import printable

__all__ = ["GAP_MIN_S", "Integrity", "check_bag", "find_gaps", "verify"]

GAP_MIN_S = (
    1.0  # [s] a pause between two messages of a topic is a gap from this long (and 4 median periods) on
)


@dataclass
class Integrity:
    """problems: the bag is damaged (never replay or judge it); notes: what could not be checked."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)  # messages read per topic
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)  # topic -> (first, last) message time
    times: dict[str, list[int]] = field(default_factory=dict)  # the checked topics' message times, sorted
    unverifiable: list[str] = field(default_factory=list)  # storage files whose payloads no CRC protects
    foreign: dict[str, str] = field(default_factory=dict)  # topic -> why it is left out: another layout

    def saw(self, topic: str, ns: int) -> None:
        first, last = self.spans.get(topic, (ns, ns))
        self.spans[topic] = (min(first, ns), max(last, ns))

    def gaps(self, topic: str) -> list[tuple[int, int]]:
        """The topic's gaps in the recording, (last message before, first message after) in bag ns."""
        return find_gaps(self.times.get(topic, []))


def find_gaps(times: list[int], min_s: float = GAP_MIN_S) -> list[tuple[int, int]]:
    """Pauses between consecutive (sorted) message times longer than min_s and than 4 times the median
    period: a camera that stopped for a while, not the jitter of its rate."""
    if len(times) < 2:
        return []
    steps = sorted(b - a for a, b in itertools.pairwise(times))
    limit = max(round(min_s * 1e9), 4 * steps[len(steps) // 2])
    return [(a, b) for a, b in itertools.pairwise(times) if b - a > limit]


class _OtherLayouts:
    """A standard type the bag stores no definition of, whose messages do not deserialize with the
    distribution the bag is read as: tried with every other distribution's layout of it (rosbags has them
    all). A message that decodes with one is of that distribution, not damaged (Humble's sensor_msgs/Range,
    without Jazzy's `variance`, in a sqlite3 bag of Humble's time)."""

    def __init__(self, bag: BagReader, topics: Collection[str]) -> None:
        self.bag = bag
        self.own = bag.own_definitions(topics)

    def note(self, topic: str, msgtype: str, data: bytes) -> str:
        """Why the topic is left out ("" when no other layout reads the message: it is damaged)."""
        from rosbags.typesys import Stores

        from cosmos_reasoner_ros.bag.files.typestore import distro_name, typestore

        info = self.bag.topics[topic]
        if info.definition_format or msgtype in self.own:  # read with the bag's own definition: damage
            return ""
        for member in reversed(Stores.__members__):  # the newest distribution whose layout reads it
            if not member.startswith("ROS2_"):
                continue
            distro = member.removeprefix("ROS2_").lower()
            store = typestore(distro)
            if msgtype not in store.fielddefs or not _decodes(store, data, msgtype):
                continue
            return (
                f"its messages are ROS 2 {distro_name(distro)}'s {msgtype}, not "
                f"{distro_name(self.bag.ros_distro or None)}'s, and the bag stores no definition of it: "
                "left out"
            )
        return ""


def _decodes(store: Typestore, data: bytes, msgtype: str) -> bool:
    try:
        store.deserialize_cdr(data, msgtype)
    except Exception:  # whatever the CDR decoder trips over
        return False
    return True


def _short(exc: BaseException, limit: int = 160) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[:limit] + "..."


def _verify_mcap(
    path: Path, topics: Collection[str], bag: BagReader, result: Integrity, everything: bool
) -> None:
    from mcap.records import Channel, Chunk, ChunkIndex, DataEnd, Message, MessageIndex, Statistics
    from mcap.stream_reader import StreamReader, breakup_chunk

    shown = printable(path.name)  # (a file name's bytes that are not UTF-8 go into reports)

    store, unknown = bag.typestore(topics)
    types = {t: bag.topics[t].msgtype for t in topics}
    channels: dict[int, str] = {}
    seen: Counter[int] = Counter()
    indexed: Counter[int] = Counter()
    stats: Statistics | None = None
    chunks = indexes = without_crc = 0
    data_crc = False
    undeserialized: Counter[str] = Counter()
    too_large: Counter[str] = Counter()
    sampled: set[str] = set()  # topics of which a message was deserialized in this file
    compressed = bag.metadata is not None and bag.metadata.compression_mode == "message"
    layouts = _OtherLayouts(bag, topics)

    def message(record: Message, protected: bool) -> None:
        seen[record.channel_id] += 1
        topic = channels.get(record.channel_id, "")
        result.saw(topic, record.log_time)
        if topic not in types:
            return
        result.times.setdefault(topic, []).append(record.log_time)
        if types[topic] in unknown or topic in result.foreign:
            return
        # Where a verified CRC covers the message, the replay reads it as written: one per topic and file
        # shows the type fits the data, and a compressed one's size is checked from its frame header.
        deep = everything or not protected or topic not in sampled
        sampled.add(topic)
        data = record.data
        try:
            if deep:
                data = decompress_message(record.data) if compressed else record.data
                store.deserialize_cdr(data, types[topic])
            elif compressed:
                check_message_size(record.data)
        except BagError:
            too_large[topic] += 1
        except Exception:  # garbage in a payload (whatever the CDR decoder trips over), or another layout
            note = "" if undeserialized[topic] else layouts.note(topic, types[topic], data)
            if note:
                result.foreign[topic] = note
            else:
                undeserialized[topic] += 1

    try:
        with path.open("rb") as fh:
            for record in StreamReader(fh, validate_crcs=True, emit_chunks=True).records:
                if isinstance(record, Chunk):
                    chunks += 1
                    without_crc += record.uncompressed_crc == 0
                    for inner in breakup_chunk(record, validate_crc=True):  # raises on a CRC mismatch
                        if isinstance(inner, Channel):
                            channels[inner.id] = inner.topic
                        elif isinstance(inner, Message):
                            message(inner, record.uncompressed_crc != 0)
                elif isinstance(record, Channel):
                    channels[record.id] = record.topic
                elif isinstance(record, Message):
                    message(record, False)  # the data section's CRC, if any, is known only at its end
                elif isinstance(record, MessageIndex):
                    indexed[record.channel_id] += len(record.records)
                elif isinstance(record, ChunkIndex):
                    indexes += 1
                elif isinstance(record, Statistics):
                    stats = record
                elif isinstance(record, DataEnd):
                    data_crc = record.data_section_crc != 0
    except CORRUPT as exc:
        result.problems.append(f"{shown} cannot be read to its end: {_short(exc)}")
    for topic, n in undeserialized.items():
        result.problems.append(f"{shown}: {n} message(s) of {topic} do not deserialize as {types[topic]}")
    for topic, n in too_large.items():
        result.problems.append(
            f"{shown}: {n} message(s) of {topic} decompress to more than any frame "
            f"({max_message_bytes()} bytes)"
        )
    got = {cid: n for cid, n in seen.items() if n}
    if stats is not None:
        want = {cid: n for cid, n in stats.channel_message_counts.items() if n}
        if want != got:
            result.problems.append(
                f"{shown}: messages read per topic {_by_topic(got, channels)} differ from its statistics "
                f"{_by_topic(want, channels)}"
            )
    elif not result.problems:
        result.notes.append(
            f"{shown} has no Statistics record: its message counts cannot be checked against one"
        )
    if indexed and {cid: n for cid, n in indexed.items() if n} != got:
        result.problems.append(
            f"{shown}: messages read per topic {_by_topic(got, channels)} differ from its message index "
            f"{_by_topic(dict(indexed), channels)}"
        )
    if indexes and indexes != chunks:
        result.problems.append(f"{shown}: {chunks} chunks read, its index lists {indexes}")
    if without_crc and not data_crc:
        result.unverifiable.append(shown)
        result.notes.append(
            f"{shown}: {without_crc} of {chunks} chunks carry no CRC: damage inside message payloads "
            "cannot be detected (unverifiable)"
        )
    for cid, n in seen.items():
        result.counts[channels.get(cid, "?")] += n


def _by_topic(counts: dict[int, int], channels: dict[int, str]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for cid, n in counts.items():
        out[channels.get(cid, f"channel {cid}")] += n
    return dict(sorted(out.items()))


def _verify_sqlite(path: Path, topics: Collection[str], result: Integrity) -> None:
    shown = printable(path.name)
    try:
        # As a URI with the path percent-encoded: a file name with ?, # or % is that name, not a query.
        # immutable: no lock or -shm file is ever written beside someone's recording.
        db = sqlite3.connect(path.absolute().as_uri() + "?mode=ro&immutable=1", uri=True)
        try:
            check = db.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                result.problems.append(f"{shown}: sqlite3 finds it damaged: {str(check[:2])[:160]}")
                return
            rows = db.execute(
                "SELECT topics.name, count(messages.id), min(messages.timestamp), max(messages.timestamp) "
                "FROM topics LEFT JOIN messages ON messages.topic_id = topics.id GROUP BY topics.id"
            ).fetchall()
            for topic in topics:
                result.times.setdefault(topic, []).extend(
                    int(t)
                    for (t,) in db.execute(
                        "SELECT messages.timestamp FROM messages JOIN topics "
                        "ON messages.topic_id = topics.id WHERE topics.name = ?",
                        (topic,),
                    )
                )
        finally:
            db.close()
    except sqlite3.Error as exc:
        result.problems.append(f"{shown} cannot be read: {_short(exc)}")
        return
    for name, n, first, last in rows:
        result.counts[str(name)] += int(n)
        if n:
            result.saw(str(name), int(first))
            result.saw(str(name), int(last))


def verify(bag: BagReader, topics: Collection[str], everything: bool = False) -> Integrity:
    """Every storage file of the bag checked; `topics` (those to replay) also deserialized, every message
    where no CRC protects it and a first one of each topic per file where one does (`everything`: all of them,
    as before: the replay then reads a long bag's payloads twice)."""
    result = Integrity()
    sqlite_files = []
    for path in bag.storage_paths:
        if storage_kind(path) == ".mcap":
            _verify_mcap(path, topics, bag, result, everything)
        else:
            _verify_sqlite(path, topics, result)
            sqlite_files.append(path)
    if sqlite_files and not result.problems:
        store, unknown = bag.typestore(topics)
        layouts = _OtherLayouts(bag, topics)
        bad: Counter[str] = Counter()
        try:
            for m in bag.messages([t for t in topics if bag.topics[t].msgtype not in unknown]):
                if m.topic in result.foreign:
                    continue
                try:
                    store.deserialize_cdr(m.data, m.msgtype)
                except Exception:  # garbage in a payload, or another distribution's layout
                    note = "" if bad[m.topic] else layouts.note(m.topic, m.msgtype, m.data)
                    if note:
                        result.foreign[m.topic] = note
                    else:
                        bad[m.topic] += 1
        except BagError as exc:
            result.problems.append(str(exc))
        for topic, n in bad.items():
            result.problems.append(
                f"{n} message(s) of {topic} do not deserialize as {bag.topics[topic].msgtype}"
            )
    # Which definition each standard type the bag defines its own way was read with: the record says so.
    result.notes += [f"{t}: {note}" for t, note in sorted(bag.own_definitions(topics).items())]
    for times in result.times.values():  # (files and chunks need not be in time order)
        times.sort()
    if bag.metadata is not None and not result.problems:
        for name, (_, declared) in sorted(bag.metadata.declared.items()):
            if result.counts.get(name, 0) != declared:
                result.problems.append(
                    f"metadata.yaml declares {declared} messages of {name}; the storage holds "
                    f"{result.counts.get(name, 0)}"
                )
    return result


def check_bag(bag: BagReader, topics: Collection[str], warn: bool = True) -> Integrity:
    """verify(), and BagError listing the problems of a damaged bag (it is never replayed or judged); notes
    go to stderr."""
    import sys

    key = frozenset(topics)
    if key in bag.checked:  # one pass per bag and topic set (evaluate checks every bag before any runs)
        done: Integrity = bag.checked[key]
        return done
    result = verify(bag, topics)
    if result.problems:
        listed = "; ".join(result.problems[:5])
        more = f"; and {len(result.problems) - 5} more" if len(result.problems) > 5 else ""
        raise BagError(f"bag {bag.path} is damaged, not replayed: {listed}{more}")
    if warn:
        for note in result.notes:
            print(f"cosmos-reasoner-bag: note: bag {bag.name}: {note}", file=sys.stderr)
    bag.checked[key] = result
    return result
