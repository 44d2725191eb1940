"""Reading a recording whatever wrote it: a rosbag2 folder (metadata.yaml of any version 4-9 beside its
storage files), a folder of storage files without metadata.yaml, or a bare `.mcap` / `.db3` file.

Topics are taken from the storage files and matched to metadata.yaml by name and type only: rosbags'
folder reader also compares the QoS text and silently yields nothing when the two differ (rosbag2's own test
bags, every MCAP written by another tool). MCAP is read with the `mcap` package (any profile, chunk CRCs
checked, channels that are not CDR left aside), sqlite3 with rosbags' storage reader; split recordings are
merged by time. Only the topics asked for are read, and their message types are resolved only for them: a
type that nothing here knows, on a topic nobody asked for, never stops a run. No ROS import."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import IO, Any

from rosbags.typesys import get_types_from_idl, get_types_from_msg
from rosbags.typesys.store import Typestore

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.safe_paths import printable
from cosmos_reasoner_ros.bag.yaml_files import load_yaml

__all__ = [
    "BagMessage",
    "BagReader",
    "TopicInfo",
    "check_message_size",
    "decompress_message",
    "max_message_bytes",
    "same_layout",
    "storage_files",
    "storage_kind",
]

STORAGE_SUFFIXES = (".mcap", ".db3")
_NO_MESSAGES = 2**63 - 1


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


@dataclass(frozen=True)
class BagMessage:
    topic: str
    msgtype: str
    log_ns: int  # the recording's receive time of the message
    data: bytes  # CDR


# ------------------------------------------------------------------------------------------ storages


class _Storage:
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


class _McapStorage(_Storage):
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
                    self.start_ns, self.end_ns = _NO_MESSAGES, 0
            else:  # no Statistics record (it is optional): one pass counts what it would hold
                counts, self.start_ns, self.end_ns = self._count()
            self.topics = {}
            for cid, channel in sorted(summary.channels.items()):
                schema = summary.schemas.get(channel.schema_id)
                text, fmt = _definition(schema.encoding, schema.data) if schema else ("", "")
                if channel.topic in self.topics:  # several channels of one topic: one topic here
                    prev = self.topics[channel.topic]
                    self.topics[channel.topic] = _with_count(prev, prev.count + counts.get(cid, 0))
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
            raise BagError(f"cannot read {path} (damaged, truncated or not MCAP): {_short(exc)}") from None
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
        first, last = _NO_MESSAGES, 0
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


def _with_count(t: TopicInfo, count: int) -> TopicInfo:
    return replace(t, count=count)


class _SqliteStorage(_Storage):
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
            raise BagError(f"cannot read {path} (damaged, truncated or not sqlite3): {_short(exc)}") from None
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
            self.start_ns, self.end_ns = _NO_MESSAGES, 0

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


def _open_storage(path: Path) -> _Storage:
    kind = storage_kind(path)
    if kind == ".mcap":
        return _McapStorage(path)
    if kind == ".db3":
        return _SqliteStorage(path)
    raise BagError(f"{path}: not a recording (neither MCAP nor sqlite3)")


def _short(exc: BaseException, limit: int = 200) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[:limit] + "..."


# ------------------------------------------------------------------------------------------ metadata


@dataclass(frozen=True)
class _Metadata:
    version: int
    storage: str
    files: tuple[str, ...]
    compression_mode: str  # "", "file" or "message"
    declared: Mapping[str, tuple[str, int]]  # topic -> (type, message_count)
    ros_distro: str = ""  # the distribution that recorded it (metadata version 8 on), lower case


def _read_metadata(path: Path) -> _Metadata:
    where = path / "metadata.yaml"
    data = load_yaml(where, "rosbag2 metadata")
    try:
        info = data["rosbag2_bagfile_information"]
        mode = str(info.get("compression_mode") or "").lower()
        mode = "" if mode == "none" else mode
        if mode and str(info.get("compression_format") or "") != "zstd":
            raise BagError(f"{where}: compression {info.get('compression_format')!r} is not supported (zstd)")
        declared = {}
        for item in info.get("topics_with_message_count") or []:
            meta = item["topic_metadata"]
            declared[str(meta["name"])] = (str(meta["type"]), int(item.get("message_count", 0)))
        files = tuple(str(f) for f in info["relative_file_paths"])
        if str(info["storage_identifier"]) not in ("mcap", "sqlite3"):
            storage = str(info["storage_identifier"])[:40]
            raise BagError(f"{where}: storage {storage!r} is not supported (mcap, sqlite3)")
        distro = str(info.get("ros_distro") or "").strip().lower()[:40]
        return _Metadata(
            int(info.get("version", 0)), str(info["storage_identifier"]), files, mode, declared, distro
        )
    except BagError:
        raise
    except KeyError as exc:
        raise BagError(f"{printable(str(where))} is not rosbag2 metadata: it lacks {exc}") from None
    except (TypeError, ValueError, AttributeError):  # (their messages may quote the file's values)
        raise BagError(
            f"{printable(str(where))} is not rosbag2 metadata: a field has the wrong type"
        ) from None


def storage_files(folder: Path) -> list[Path]:
    """The storage files directly inside a folder (a recording written without metadata.yaml): those whose
    names end in .mcap or .db3 (any case)."""
    return sorted(p for p in folder.iterdir() if storage_kind(p, sniff=False) and p.is_file())


# ------------------------------------------------------------------------------------------ the reader


class BagReader:
    """One recording, opened; `messages(topics)` reads the named topics in time order across its files."""

    def __init__(self, path: Path) -> None:
        if not path.exists():
            raise BagError(f"bag {path} does not exist")
        self.path = path
        # The name the user gave (a symlink's own name), which labels the bag's results: as text any report
        # can carry (a file system allows bytes that are not UTF-8).
        self.name = printable(path.absolute().stem if path.is_file() else path.absolute().name)
        self.metadata: _Metadata | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._storages: list[_Storage] = []
        try:
            self._open(path)
        except BaseException:
            self.close()
            raise
        self._stores: dict[frozenset[str], tuple[Typestore, dict[str, str], dict[str, str]]] = {}
        self.checked: dict[frozenset[str], Any] = {}  # integrity.check_bag's results, per topic set

    def _open(self, path: Path) -> None:
        if path.is_file():
            files = [path]
        elif (path / "metadata.yaml").is_file():
            self.metadata = _read_metadata(path)
            # Only the file names count: metadata cannot point outside the bag's folder.
            files = [path / PurePath(f).name for f in self.metadata.files]
            if missing := [f.name for f in files if not f.is_file()]:
                raise BagError(f"bag {path} lacks its storage file(s) {', '.join(missing)}")
            if self.metadata.compression_mode == "file":
                files = self._decompressed(files)
        else:
            files = storage_files(path)
            if not files:
                inside = sorted(
                    p.name
                    for p in path.iterdir()
                    if p.is_dir() and ((p / "metadata.yaml").is_file() or storage_files(p))
                )
                if inside:
                    listed = ", ".join(inside[:10]) + (", ..." if len(inside) > 10 else "")
                    raise BagError(f"{path} holds {len(inside)} bags ({listed}), not one: name one of them")
                raise BagError(f"{path} is not a bag: no metadata.yaml and no .mcap or .db3 file in it")
        for file in files:
            self._storages.append(_open_storage(file))
        self.topics: dict[str, TopicInfo] = {}
        for storage in self._storages:
            for name, t in storage.topics.items():
                if name in self.topics:
                    prev = self.topics[name]
                    count = -1 if -1 in (prev.count, t.count) else prev.count + t.count
                    self.topics[name] = _with_count(prev, count)
                else:
                    self.topics[name] = t
        if self.metadata is not None:
            for name, (msgtype, count) in self.metadata.declared.items():
                known = self.topics.get(name)
                if known is not None and (known.msgtype in ("", msgtype)):
                    self.topics[name] = replace(known, msgtype=msgtype, declared=count)
        self.start_ns = min((s.start_ns for s in self._storages), default=_NO_MESSAGES)
        self.end_ns = max((s.end_ns for s in self._storages), default=0)

    def _decompressed(self, files: list[Path]) -> list[Path]:
        import zstandard

        self._tmp = tempfile.TemporaryDirectory(prefix="cosmos-bag-")
        out = []
        for file in files:
            target = Path(self._tmp.name) / (file.stem if file.suffix == ".zstd" else file.name)
            try:
                with file.open("rb") as src, target.open("wb") as dst:
                    zstandard.ZstdDecompressor().copy_stream(src, dst)
            except CORRUPT as exc:
                raise BagError(f"cannot decompress {file}: {_short(exc)}") from None
            out.append(target)
        return out

    # -------------------------------------------------------------------------------------------- facts

    @property
    def storage_paths(self) -> list[Path]:
        return [s.path for s in self._storages]

    @property
    def has_messages(self) -> bool:
        return self.start_ns <= self.end_ns

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9 if self.has_messages else 0.0

    def topic(self, name: str) -> TopicInfo:
        """The named topic; BagError naming what the bag has instead."""
        if name not in self.topics:
            raise BagError(f"bag {self.path} has no topic {name}; it has: {self.describe_topics()}")
        return self.topics[name]

    def describe_topics(self, limit: int = 40) -> str:
        items = [t.describe() for t in sorted(self.topics.values(), key=lambda t: t.name)]
        more = f", ... and {len(items) - limit} more" if len(items) > limit else ""
        return (", ".join(items[:limit]) + more) or "none"

    # ------------------------------------------------------------------------------------------ reading

    def messages(self, topics: Collection[str], start_ns: int | None = None) -> Iterator[BagMessage]:
        """The messages of `topics` in time order across the storage files; a damaged file raises BagError
        when it is reached."""
        types = {t: self.topic(t).msgtype for t in topics}
        compressed = self.metadata is not None and self.metadata.compression_mode == "message"
        streams = [
            ((ns, i, topic, data) for ns, topic, data in storage.messages(list(types), start_ns))
            for i, storage in enumerate(self._storages)
        ]
        decompress = decompress_message if compressed else None
        try:
            for ns, _, topic, data in heapq.merge(*streams, key=lambda m: (m[0], m[1])):
                yield BagMessage(topic, types[topic], ns, decompress(data) if decompress else bytes(data))
        except CORRUPT as exc:
            raise BagError(f"bag {self.path} is damaged or truncated: {_short(exc)}") from None

    @property
    def ros_distro(self) -> str:
        """The distribution the bag says recorded it (metadata.yaml version 8 on), else ""."""
        return self.metadata.ros_distro if self.metadata is not None else ""

    def typestore(self, topics: Collection[str]) -> tuple[Typestore, dict[str, str]]:
        """A typestore knowing the standard types of the distribution that recorded the bag (else this
        process's), this package's messages and, for the given topics, the types whose definitions the bag
        stores; and {type: why it cannot be read} for the ones it cannot."""
        store, problems, _ = self._types(topics)
        return store, problems

    def own_definitions(self, topics: Collection[str]) -> dict[str, str]:
        """{type: note} for the standard types among the topics' that the bag recorded with a definition of
        its own (another distribution's), which typestore() reads them with."""
        return self._types(topics)[2]

    def _types(self, topics: Collection[str]) -> tuple[Typestore, dict[str, str], dict[str, str]]:
        key = frozenset(topics)
        if key not in self._stores:
            topics_ = [self.topic(t) for t in sorted(topics)]
            self._stores[key] = _typestore_for(
                topics_, self.ros_distro or None, lambda msgtype: self._samples(msgtype, topics_)
            )
        return self._stores[key]

    def _samples(self, msgtype: str, topics: list[TopicInfo]) -> list[bytes]:
        """The first few messages of the topics of a type: what tells whether a definition describes them."""
        names = [t.name for t in topics if t.msgtype == msgtype]
        try:
            return [m.data for m in itertools.islice(self.messages(names), _SAMPLES)]
        except BagError:  # a damaged file: verify() says so; the definition is judged on nothing
            return []

    def close(self) -> None:
        for storage in self._storages:
            storage.close()
        self._storages = []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> BagReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def max_message_bytes() -> int:
    """The most one recorded message may decompress to: the largest frame the node accepts (8K UHD, clips'
    DEFAULT_MAX_PIXELS) at 8 bytes a pixel (rgba16), plus 1 MiB for the rest of the message."""
    from cosmos_reasoner_ros.clips import DEFAULT_MAX_PIXELS

    return DEFAULT_MAX_PIXELS * 8 + (1 << 20)


def decompress_message(data: bytes) -> bytes:
    """One message of a bag compressed per message (rosbag2's zstd `message` mode), never larger than
    max_message_bytes(): a crafted frame declaring gigabytes is refused before anything is allocated (zstd
    allocates what a frame declares, whatever the output bound), one that declares nothing is cut there."""
    import zstandard

    limit = max_message_bytes()
    declared = zstandard.frame_content_size(data)  # -1: not declared
    if declared > limit:
        raise BagError(f"a message declares {declared} bytes uncompressed, more than any frame ({limit})")
    try:
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=limit)
    except zstandard.ZstdError as exc:
        if declared < 0 and "did not decompress full frame" in str(exc):
            raise BagError(f"a message decompresses to more than any frame ({limit} bytes)") from None
        raise


def check_message_size(data: bytes) -> None:
    """decompress_message's bound, checked without decompressing where the frame declares its size (rosbag2's
    compressor always does); BagError when it is broken."""
    import zstandard

    if zstandard.frame_content_size(data) < 0 or zstandard.frame_content_size(data) > max_message_bytes():
        decompress_message(data)


def _typestore_for(
    topics: list[TopicInfo], distro: str | None, samples: Callable[[str], list[bytes]]
) -> tuple[Typestore, dict[str, str], dict[str, str]]:
    """(store, {type: why it cannot be read}, {type: note}) for the topics: the standard types of the
    distribution (store_of), this package's messages, the types the bag defines that nothing here knows, and
    a standard type the bag recorded with another definition (an older distribution's: Humble's
    sensor_msgs/Range lacks Jazzy's `variance`) with the bag's own definition, said in the notes; unless that
    definition does not read the type's messages (`samples`: a few of them) and the installed type does
    (rosbag2's placeholders: "uint8 level" for rcl_interfaces/Log): then the installed type, said too."""
    from cosmos_reasoner_ros.bag.files.typestore import distro_name, fresh_typestore

    store = fresh_typestore(distro)
    problems: dict[str, str] = {}
    defined: dict[str, dict[str, Any]] = {}  # type -> the types its stored definition defines
    for t in topics:
        if t.msgtype in defined or t.msgtype in problems:
            continue
        known = t.msgtype in store.fielddefs
        if not t.definition_format:  # (an empty definition is an empty message: std_msgs/Empty)
            if not known:
                problems[t.msgtype] = "not a standard ROS 2 type, and the bag stores no definition of it"
            continue
        try:
            types = _parse_definition(t)
        except Exception as exc:  # rosbags' parser errors: that type only
            if not known:
                problems[t.msgtype] = f"its stored definition does not parse: {_short(exc, 120)}"
            continue
        if t.msgtype not in types:
            if not known:
                problems[t.msgtype] = "its stored definition does not define it"
            continue
        defined[t.msgtype] = types
    own: dict[str, str] = {}
    overrides: dict[str, Any] = {}
    for msgtype, types in defined.items():
        differing = [
            n for n, fd in types.items() if n in store.fielddefs and _differs(store.fielddefs[n], fd)
        ]
        if differing and _installed_reads(store, types, msgtype, samples(msgtype)):
            own[msgtype] = (
                f"the bag's stored definition of {msgtype} does not describe its messages: read with ROS 2 "
                f"{distro_name(distro)}'s installed type, which does"
            )
        elif differing:
            own[msgtype] = (
                f"recorded with a definition of {msgtype} that differs from ROS 2 "
                f"{distro_name(distro)}'s (another distribution's): read with the bag's own"
            )
            for n, fd in types.items():
                overrides.setdefault(n, fd)
    if overrides:  # the bag's definitions first, then every standard type they leave
        store = _overridden(store, overrides)
    for types in defined.values():  # types nothing here knows, from their stored definitions
        new = {k: v for k, v in types.items() if k not in store.fielddefs}
        if new:
            store.register(new)
    return store, problems, own


def _overridden(store: Typestore, overrides: Mapping[str, Any]) -> Typestore:
    """A store of `overrides` and every type of `store` they leave."""
    from rosbags.typesys import get_typestore
    from rosbags.typesys.stores import Stores

    rebuilt = get_typestore(Stores.EMPTY)
    rebuilt.register(dict(overrides))
    rebuilt.register({n: fd for n, fd in store.fielddefs.items() if n not in rebuilt.fielddefs})
    return rebuilt


def _installed_reads(store: Typestore, types: Mapping[str, Any], msgtype: str, data: list[bytes]) -> bool:
    """Whether the installed type reads every sampled message and the bag's own definition does not read one
    of them: then the stored definition does not describe the data (with no message, it is believed)."""

    def reads(s: Typestore, message: bytes) -> bool:
        try:
            s.deserialize_cdr(message, msgtype)
        except Exception:  # whatever the CDR decoder trips over
            return False
        return True

    if not data or not all(reads(store, m) for m in data):
        return False
    own = _overridden(store, types)
    return not all(reads(own, m) for m in data)


def _parse_definition(t: TopicInfo) -> dict[str, Any]:
    if t.definition_format == "idl":
        types: dict[str, Any] = {}
        for part in _idl_parts(t.definition):
            types.update(get_types_from_idl(part))
        return types
    return dict(get_types_from_msg(t.definition, t.msgtype))


def same_layout(a: Typestore, b: Typestore, msgtype: str) -> bool:
    """Whether two stores lay out a type's CDR alike, its nested types included (a type one of them lacks
    does not)."""
    seen: set[str] = set()
    todo = [msgtype]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in a.fielddefs or name not in b.fielddefs:
            return False
        if _differs(a.fielddefs[name], b.fielddefs[name]):
            return False
        todo += [n for _, desc in a.fielddefs[name][1] for n in _names(desc)]
    return True


def _names(desc: Any) -> list[str]:
    """The message types a field description refers to."""
    if isinstance(desc, tuple):
        if len(desc) == 2 and _plain(desc[0]) == 2 and isinstance(desc[1], str):  # (Nodetype.NAME, type)
            return [desc[1]]
        return [n for d in desc for n in _names(d)]
    return []


_PLACEHOLDER = [("structure_needs_at_least_one_member", (1, ("uint8", 0)))]
_SAMPLES = 5  # messages of a type that judge whether its stored definition describes them


def _differs(standard: Any, recorded: Any) -> bool:
    """Whether two definitions of a type lay out its CDR differently (constants do not count; an empty message
    is the placeholder byte whichever way it is written)."""

    def fields(fd: Any) -> list[Any]:
        out = [(name, _plain(desc)) for name, desc in fd[1]]
        return out or list(_PLACEHOLDER)

    return bool(fields(standard) != fields(recorded))


def _plain(desc: Any) -> Any:
    """A field description with rosbags' Nodetype enums as plain ints, nested tuples kept."""
    if isinstance(desc, tuple):
        return tuple(_plain(d) for d in desc)
    return int(desc) if type(desc).__name__ == "Nodetype" else desc


def _idl_parts(text: str) -> list[str]:
    """rosbag2 concatenates IDL definitions, each after a line of '=' and an `IDL: name` line."""
    sep = "=" * 80 + "\n"
    if not text.startswith(sep):
        return [text]
    return [part.split("\n", 1)[1] for part in text.split(sep)[1:] if "\n" in part]
