"""Reading a recording whatever wrote it: a rosbag2 folder (metadata.yaml of any version 4-9 beside its
storage files), a folder of storage files without metadata.yaml, or a bare `.mcap` / `.db3` file.

Topics are taken from the storage files and matched to metadata.yaml by name and type only: rosbags'
folder reader also compares the QoS text and silently yields nothing when the two differ (rosbag2's own test
bags, every MCAP written by another tool). Each storage file is read by storages.py; split recordings are
merged by time. Only the topics asked for are read, and their message types are resolved only for them
(stored_types.py): a type that nothing here knows, on a topic nobody asked for, never stops a run. No ROS
import."""

from __future__ import annotations

import heapq
import itertools
import tempfile
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import Any

from rosbags.typesys.store import Typestore

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.storages import (
    CORRUPT,
    NO_MESSAGES,
    Storage,
    TopicInfo,
    open_storage,
    short_error,
    storage_kind,
    with_count,
)
from cosmos_reasoner_ros.bag.files.stored_types import SAMPLES, same_layout, typestore_for
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


@dataclass(frozen=True)
class BagMessage:
    topic: str
    msgtype: str
    log_ns: int  # the recording's receive time of the message
    data: bytes  # CDR


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
        self._storages: list[Storage] = []
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
            self._storages.append(open_storage(file))
        self.topics: dict[str, TopicInfo] = {}
        for storage in self._storages:
            for name, t in storage.topics.items():
                if name in self.topics:
                    prev = self.topics[name]
                    count = -1 if -1 in (prev.count, t.count) else prev.count + t.count
                    self.topics[name] = with_count(prev, count)
                else:
                    self.topics[name] = t
        if self.metadata is not None:
            for name, (msgtype, count) in self.metadata.declared.items():
                known = self.topics.get(name)
                if known is not None and (known.msgtype in ("", msgtype)):
                    self.topics[name] = replace(known, msgtype=msgtype, declared=count)
        self.start_ns = min((s.start_ns for s in self._storages), default=NO_MESSAGES)
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
                raise BagError(f"cannot decompress {file}: {short_error(exc)}") from None
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
            raise BagError(f"bag {self.path} is damaged or truncated: {short_error(exc)}") from None

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
            self._stores[key] = typestore_for(
                topics_, self.ros_distro or None, lambda msgtype: self._samples(msgtype, topics_)
            )
        return self._stores[key]

    def _samples(self, msgtype: str, topics: list[TopicInfo]) -> list[bytes]:
        """The first few messages of the topics of a type: what tells whether a definition describes them."""
        names = [t.name for t in topics if t.msgtype == msgtype]
        try:
            return [m.data for m in itertools.islice(self.messages(names), SAMPLES)]
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
