"""Is a recording whole? One pass over every storage file before anything is replayed or judged: MCAP chunk
and data-section CRCs, the messages read per channel against the file's statistics and message indexes, per
topic against metadata.yaml; sqlite3's own consistency check and its rows per topic; and the messages of the
topics to replay deserialized where no CRC protects them (sqlite3, MCAP chunks without a CRC, messages outside
chunks), else the first of each topic per file (the types fit the data; the CRCs vouch for the rest). A bag
without CRCs cannot show damage to its message payloads: that is said, not hidden. Per-message compressed
payloads decompress to at most the largest frame (reader.decompress_message). No ROS import."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.reader import (
    CORRUPT,
    BagReader,
    check_message_size,
    decompress_message,
    max_message_bytes,
)

__all__ = ["Integrity", "check_bag", "verify"]


@dataclass
class Integrity:
    """problems: the bag is damaged (never replay or judge it); notes: what could not be checked."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)  # messages read per topic
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)  # topic -> (first, last) message time

    def saw(self, topic: str, ns: int) -> None:
        first, last = self.spans.get(topic, (ns, ns))
        self.spans[topic] = (min(first, ns), max(last, ns))


def _short(exc: BaseException, limit: int = 160) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[:limit] + "..."


def _verify_mcap(
    path: Path, topics: Collection[str], bag: BagReader, result: Integrity, everything: bool
) -> None:
    from mcap.records import Channel, Chunk, ChunkIndex, DataEnd, Message, MessageIndex, Statistics
    from mcap.stream_reader import StreamReader, breakup_chunk

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

    def message(record: Message, protected: bool) -> None:
        seen[record.channel_id] += 1
        topic = channels.get(record.channel_id, "")
        result.saw(topic, record.log_time)
        if topic not in types or types[topic] in unknown:
            return
        # Where a verified CRC covers the message, the replay reads it as written: one per topic and file
        # shows the type fits the data, and a compressed one's size is checked from its frame header.
        deep = everything or not protected or topic not in sampled
        sampled.add(topic)
        try:
            if deep:
                data = decompress_message(record.data) if compressed else record.data
                store.deserialize_cdr(data, types[topic])
            elif compressed:
                check_message_size(record.data)
        except BagError:
            too_large[topic] += 1
        except Exception:  # garbage in a payload: whatever the CDR decoder trips over
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
        result.problems.append(f"{path.name} cannot be read to its end: {_short(exc)}")
    for topic, n in undeserialized.items():
        result.problems.append(f"{path.name}: {n} message(s) of {topic} do not deserialize as {types[topic]}")
    for topic, n in too_large.items():
        result.problems.append(
            f"{path.name}: {n} message(s) of {topic} decompress to more than any frame "
            f"({max_message_bytes()} bytes)"
        )
    got = {cid: n for cid, n in seen.items() if n}
    if stats is not None:
        want = {cid: n for cid, n in stats.channel_message_counts.items() if n}
        if want != got:
            result.problems.append(
                f"{path.name}: messages read per topic {_by_topic(got, channels)} differ from its statistics "
                f"{_by_topic(want, channels)}"
            )
    elif not result.problems:
        result.notes.append(f"{path.name} has no summary: its message counts cannot be checked")
    if indexed and {cid: n for cid, n in indexed.items() if n} != got:
        result.problems.append(
            f"{path.name}: messages read per topic {_by_topic(got, channels)} differ from its message index "
            f"{_by_topic(dict(indexed), channels)}"
        )
    if indexes and indexes != chunks:
        result.problems.append(f"{path.name}: {chunks} chunks read, its index lists {indexes}")
    if without_crc and not data_crc:
        result.notes.append(
            f"{path.name}: {without_crc} of {chunks} chunks carry no CRC: damage inside message payloads "
            "cannot be detected (unverifiable)"
        )
    for cid, n in seen.items():
        result.counts[channels.get(cid, "?")] += n


def _by_topic(counts: dict[int, int], channels: dict[int, str]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for cid, n in counts.items():
        out[channels.get(cid, f"channel {cid}")] += n
    return dict(sorted(out.items()))


def _verify_sqlite(path: Path, result: Integrity) -> None:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            check = db.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                result.problems.append(f"{path.name}: sqlite3 finds it damaged: {str(check[:2])[:160]}")
                return
            rows = db.execute(
                "SELECT topics.name, count(messages.id), min(messages.timestamp), max(messages.timestamp) "
                "FROM topics LEFT JOIN messages ON messages.topic_id = topics.id GROUP BY topics.id"
            ).fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        result.problems.append(f"{path.name} cannot be read: {_short(exc)}")
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
        if path.suffix == ".mcap":
            _verify_mcap(path, topics, bag, result, everything)
        else:
            _verify_sqlite(path, result)
            sqlite_files.append(path)
    if sqlite_files and not result.problems:
        store, unknown = bag.typestore(topics)
        bad: Counter[str] = Counter()
        try:
            for m in bag.messages([t for t in topics if bag.topics[t].msgtype not in unknown]):
                try:
                    store.deserialize_cdr(m.data, m.msgtype)
                except Exception:  # garbage in a payload
                    bad[m.topic] += 1
        except BagError as exc:
            result.problems.append(str(exc))
        for topic, n in bad.items():
            result.problems.append(
                f"{n} message(s) of {topic} do not deserialize as {bag.topics[topic].msgtype}"
            )
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
