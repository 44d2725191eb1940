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
from typing import TYPE_CHECKING, BinaryIO

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

if TYPE_CHECKING:
    from mcap.records import Message, Statistics

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
    shown = printable(path.name)  # (a file name's bytes that are not UTF-8 go into reports)
    scan = _McapScan(topics, bag, result, everything)
    try:
        with path.open("rb") as fh:
            scan.read(fh)
    except CORRUPT as exc:
        result.problems.append(f"{shown} cannot be read to its end: {_short(exc)}")
    scan.report_payloads(shown)
    scan.report_counts(shown)
    scan.report_crcs(shown)
    for cid, n in scan.seen.items():
        result.counts[scan.channels.get(cid, "?")] += n


class _McapScan:
    """One pass over an MCAP file's records: what was read per channel, what its statistics and indexes
    say, and which payloads did not deserialize."""

    def __init__(self, topics: Collection[str], bag: BagReader, result: Integrity, everything: bool) -> None:
        self.result = result
        self.everything = everything
        self.store, self.unknown = bag.typestore(topics)
        self.types = {t: bag.topics[t].msgtype for t in topics}
        self.channels: dict[int, str] = {}
        self.seen: Counter[int] = Counter()
        self.indexed: Counter[int] = Counter()
        self.stats: Statistics | None = None
        self.chunks = self.indexes = self.without_crc = 0
        self.data_crc = False
        self.undeserialized: Counter[str] = Counter()
        self.too_large: Counter[str] = Counter()
        self.sampled: set[str] = set()  # topics of which a message was deserialized in this file
        self.compressed = bag.metadata is not None and bag.metadata.compression_mode == "message"
        self.layouts = _OtherLayouts(bag, topics)

    def read(self, fh: BinaryIO) -> None:
        """Every record of the file, chunks broken up; raises on a CRC mismatch or a cut file."""
        from mcap.records import Channel, Chunk, ChunkIndex, DataEnd, Message, MessageIndex, Statistics
        from mcap.stream_reader import StreamReader, breakup_chunk

        for record in StreamReader(fh, validate_crcs=True, emit_chunks=True).records:
            if isinstance(record, Chunk):
                self.chunks += 1
                self.without_crc += record.uncompressed_crc == 0
                for inner in breakup_chunk(record, validate_crc=True):  # raises on a CRC mismatch
                    if isinstance(inner, Channel):
                        self.channels[inner.id] = inner.topic
                    elif isinstance(inner, Message):
                        self.message(inner, record.uncompressed_crc != 0)
            elif isinstance(record, Channel):
                self.channels[record.id] = record.topic
            elif isinstance(record, Message):
                self.message(record, False)  # the data section's CRC, if any, is known only at its end
            elif isinstance(record, MessageIndex):
                self.indexed[record.channel_id] += len(record.records)
            elif isinstance(record, ChunkIndex):
                self.indexes += 1
            elif isinstance(record, Statistics):
                self.stats = record
            elif isinstance(record, DataEnd):
                self.data_crc = record.data_section_crc != 0

    def message(self, record: Message, protected: bool) -> None:
        """One message: counted, its time kept, and its payload deserialized where nothing vouches for it."""
        result, types = self.result, self.types
        self.seen[record.channel_id] += 1
        topic = self.channels.get(record.channel_id, "")
        result.saw(topic, record.log_time)
        if topic not in types:
            return
        result.times.setdefault(topic, []).append(record.log_time)
        if types[topic] in self.unknown or topic in result.foreign:
            return
        # Where a verified CRC covers the message, the replay reads it as written: one per topic and file
        # shows the type fits the data, and a compressed one's size is checked from its frame header.
        deep = self.everything or not protected or topic not in self.sampled
        self.sampled.add(topic)
        data = record.data
        try:
            if deep:
                data = decompress_message(record.data) if self.compressed else record.data
                self.store.deserialize_cdr(data, types[topic])
            elif self.compressed:
                check_message_size(record.data)
        except BagError:
            self.too_large[topic] += 1
        except Exception:  # garbage in a payload (whatever the CDR decoder trips over), or another layout
            note = "" if self.undeserialized[topic] else self.layouts.note(topic, types[topic], data)
            if note:
                result.foreign[topic] = note
            else:
                self.undeserialized[topic] += 1

    def report_payloads(self, shown: str) -> None:
        """The payloads that did not deserialize, or decompressed past any frame."""
        for topic, n in self.undeserialized.items():
            self.result.problems.append(
                f"{shown}: {n} message(s) of {topic} do not deserialize as {self.types[topic]}"
            )
        for topic, n in self.too_large.items():
            self.result.problems.append(
                f"{shown}: {n} message(s) of {topic} decompress to more than any frame "
                f"({max_message_bytes()} bytes)"
            )

    def report_counts(self, shown: str) -> None:
        """The messages read per channel against the file's statistics, message index and chunk index."""
        result, channels = self.result, self.channels
        got = {cid: n for cid, n in self.seen.items() if n}
        if self.stats is not None:
            want = {cid: n for cid, n in self.stats.channel_message_counts.items() if n}
            if want != got:
                result.problems.append(
                    f"{shown}: messages read per topic {_by_topic(got, channels)} differ from its statistics "
                    f"{_by_topic(want, channels)}"
                )
        elif not result.problems:
            result.notes.append(
                f"{shown} has no Statistics record: its message counts cannot be checked against one"
            )
        if self.indexed and {cid: n for cid, n in self.indexed.items() if n} != got:
            result.problems.append(
                f"{shown}: messages read per topic {_by_topic(got, channels)} differ from its message index "
                f"{_by_topic(dict(self.indexed), channels)}"
            )
        if self.indexes and self.indexes != self.chunks:
            result.problems.append(f"{shown}: {self.chunks} chunks read, its index lists {self.indexes}")

    def report_crcs(self, shown: str) -> None:
        """Chunks without a CRC in a file without a data-section CRC: their payloads are unverifiable."""
        if self.without_crc and not self.data_crc:
            self.result.unverifiable.append(shown)
            self.result.notes.append(
                f"{shown}: {self.without_crc} of {self.chunks} chunks carry no CRC: damage inside message "
                "payloads cannot be detected (unverifiable)"
            )


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
