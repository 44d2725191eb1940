"""The storage files of a recording, read one by one: MCAP with the `mcap` package (any profile, chunk CRCs
checked, channels that are not CDR left aside), sqlite3 with rosbags' storage reader; what a topic of them is
(TopicInfo) and what a damaged file raises (CORRUPT). reader.py merges them into one recording. No ROS
import."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.safe_paths import printable

__all__ = [
    "CORRUPT",
    "NO_MESSAGES",
    "STORAGE_SUFFIXES",
    "Storage",
    "TopicInfo",
    "open_storage",
    "short_error",
    "storage_kind",
    "with_count",
]

STORAGE_SUFFIXES = (".mcap", ".db3")
NO_MESSAGES = 2**63 - 1


def _corrupt_errors() -> tuple[type[BaseException], ...]:
    """What decoders raise on a damaged file: all of it means "this bag is broken", never a traceback."""
    import sqlite3
    import struct

    import zstandard
    from mcap.exceptions import McapError

    errors: list[type[BaseException]] = [
        McapError,
        zstandard.ZstdError,
        sqlite3.Error,
        OSError,
        EOFError,
        ValueError,  # UnicodeDecodeError among them
        KeyError,
        IndexError,
        struct.error,
        AssertionError,
        RuntimeError,  # lz4
        MemoryError,  # a damaged length field
        OverflowError,  # ... one beyond any index
    ]
    with contextlib.suppress(ImportError):
        import apsw

        errors.append(apsw.Error)
    with contextlib.suppress(ImportError):
        from rosbags.rosbag2 import ReaderError

        errors.append(ReaderError)
    return tuple(errors)


CORRUPT = _corrupt_errors()


@dataclass(frozen=True)
class TopicInfo:
    """One topic of a recording, as its storage files hold it."""

    name: str
    msgtype: str
    count: int  # messages in the storage files' indexes (-1: a file without an index)
    declared: int | None = None  # metadata.yaml's message_count for it; None without metadata.yaml
    definition: str = ""  # the message definition stored in the bag ("" when none)
    definition_format: str = ""  # "msg", "idl" or ""
    encoding: str = "cdr"  # message encoding; only CDR is read

    @property
    def readable(self) -> bool:
        return self.encoding == "cdr" and bool(self.msgtype)

    def describe(self) -> str:
        return f"{self.name} ({self.msgtype or 'no type'}, {max(self.count, 0)} messages)"


# ------------------------------------------------------------------------------------------ storages


class Storage:
    path: Path
    topics: dict[str, TopicInfo]
    start_ns: int
    end_ns: int  # the last message's time (inclusive); start > end: no messages

    def messages(self, topics: Collection[str], start_ns: int | None) -> Iterator[tuple[int, str, bytes]]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _definition(encoding: str, data: bytes) -> tuple[str, str]:
    text = data.decode("utf-8", errors="replace")
    if encoding == "ros2msg":
        return text, "msg"
    if encoding == "ros2idl":
        return text, "idl"
    return "", ""


class _McapStorage(Storage):
    def __init__(self, path: Path) -> None:
        from mcap.reader import make_reader

        self.path = path
        self._fh: IO[bytes] = path.open("rb")
        try:
            self._reader = make_reader(self._fh, validate_crcs=True)
            summary = self._reader.get_summary()
            if summary is None:  # unindexed or cut short: one pass collects what the summary would hold
                summary = self._scan()
            stats = summary.statistics
            if stats is not None:
                counts = dict(stats.channel_message_counts)
                if stats.message_count > 0:
                    self.start_ns, self.end_ns = stats.message_start_time, stats.message_end_time
                else:
                    self.start_ns, self.end_ns = NO_MESSAGES, 0
            else:  # no Statistics record (it is optional): one pass counts what it would hold
                counts, self.start_ns, self.end_ns = self._count()
            self.topics = {}
            for cid, channel in sorted(summary.channels.items()):
                schema = summary.schemas.get(channel.schema_id)
                text, fmt = _definition(schema.encoding, schema.data) if schema else ("", "")
                if channel.topic in self.topics:  # several channels of one topic: one topic here
                    prev = self.topics[channel.topic]
                    self.topics[channel.topic] = with_count(prev, prev.count + counts.get(cid, 0))
                    continue
                self.topics[channel.topic] = TopicInfo(
                    channel.topic,
                    schema.name if schema else "",
                    counts.get(cid, 0),
                    None,
                    text,
                    fmt,
                    channel.message_encoding,
                )
        except CORRUPT as exc:
            self._fh.close()
            raise BagError(
                f"cannot read {path} (damaged, truncated or not MCAP): {short_error(exc)}"
            ) from None
        except BaseException:
            self._fh.close()
            raise

    def _scan(self) -> Any:
        from mcap.records import Channel, Schema
        from mcap.stream_reader import StreamReader
        from mcap.summary import Summary

        summary = Summary()
        self._fh.seek(0)
        for record in StreamReader(self._fh, validate_crcs=True).records:
            if isinstance(record, Schema):
                summary.schemas[record.id] = record
            elif isinstance(record, Channel):
                summary.channels[record.id] = record
        return summary

    def _count(self) -> tuple[dict[int, int], int, int]:
        """Messages per channel, the first and the last message time, from one pass over the file."""
        counts: dict[int, int] = {}
        first, last = NO_MESSAGES, 0
        for _, channel, message in self._reader.iter_messages(log_time_order=False):
            counts[channel.id] = counts.get(channel.id, 0) + 1
            first, last = min(first, message.log_time), max(last, message.log_time)
        return counts, first, last

    def messages(self, topics: Collection[str], start_ns: int | None) -> Iterator[tuple[int, str, bytes]]:
        wanted = [t for t in topics if t in self.topics]
        if not wanted:
            return
        for _, channel, message in self._reader.iter_messages(
            topics=wanted, starting_at=start_ns, log_time_order=True
        ):
            if channel.message_encoding == "cdr":
                yield message.log_time, channel.topic, message.data

    def close(self) -> None:
        self._fh.close()


def with_count(t: TopicInfo, count: int) -> TopicInfo:
    return replace(t, count=count)


class _SqliteStorage(Storage):
    def __init__(self, path: Path) -> None:
        from rosbags.rosbag2.storage_sqlite3 import Sqlite3Reader

        self.path = path
        # rosbags opens `file:<path>?immutable=1` as an SQLite URI: a name with ?, # or % (or bytes that are
        # not UTF-8) would be cut there. Such a file is read through a link of a plain name in a folder of
        # this reader's own, removed at close.
        self._link_dir: tempfile.TemporaryDirectory[str] | None = None
        opened = path
        if any(ch in str(path) for ch in "?#%") or printable(str(path)) != str(path):
            self._link_dir = tempfile.TemporaryDirectory(prefix="cosmos-bag-")
            opened = Path(self._link_dir.name) / "storage.db3"
            opened.symlink_to(path.absolute())
        self._reader = Sqlite3Reader(opened)
        try:
            self._reader.open()
        except CORRUPT as exc:
            self._unlink()
            raise BagError(
                f"cannot read {path} (damaged, truncated or not sqlite3): {short_error(exc)}"
            ) from None
        self._conns = {c.topic: c for c in self._reader.connections}
        self.topics = {}
        for conn in self._reader.connections:
            fmt = {"MSG": "msg", "IDL": "idl"}.get(getattr(conn.msgdef.format, "name", ""), "")
            encoding = str(getattr(conn.ext, "serialization_format", "cdr") or "cdr")
            self.topics[conn.topic] = TopicInfo(
                conn.topic,
                conn.msgtype,
                int(conn.msgcount),
                None,
                conn.msgdef.data if fmt else "",
                fmt,
                encoding,
            )
        meta = self._reader.metadata
        if meta.message_count:
            self.start_ns, self.end_ns = meta.start_time, meta.end_time - 1
        else:
            self.start_ns, self.end_ns = NO_MESSAGES, 0

    def messages(self, topics: Collection[str], start_ns: int | None) -> Iterator[tuple[int, str, bytes]]:
        conns = [self._conns[t] for t in topics if t in self._conns]
        if not conns:
            return
        for conn, ns, data in self._reader.messages(conns, start_ns, None):
            yield ns, conn.topic, data

    def close(self) -> None:
        with contextlib.suppress(*CORRUPT):
            self._reader.close()
        self._unlink()

    def _unlink(self) -> None:
        if self._link_dir is not None:
            self._link_dir.cleanup()
            self._link_dir = None


_MAGIC = {b"\x89MCAP": ".mcap", b"SQLite format 3\x00": ".db3"}


def storage_kind(path: Path, sniff: bool = True) -> str:
    """ ".mcap" or ".db3": a storage file's kind by the end of its name (any case; a file named just `.mcap`
    too), else (`sniff`) by its first bytes, so that a recording renamed to anything is still read; "" for
    another file."""
    name = path.name.lower()
    for suffix in STORAGE_SUFFIXES:
        if name.endswith(suffix):
            return suffix
    if not sniff:
        return ""
    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except OSError:
        return ""
    return next((kind for magic, kind in _MAGIC.items() if head.startswith(magic)), "")


def open_storage(path: Path) -> Storage:
    kind = storage_kind(path)
    if kind == ".mcap":
        return _McapStorage(path)
    if kind == ".db3":
        return _SqliteStorage(path)
    raise BagError(f"{path}: not a recording (neither MCAP nor sqlite3)")


def short_error(exc: BaseException, limit: int = 200) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[:limit] + "..."
