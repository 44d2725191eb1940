"""Bag access shared by the bag tools: opening rosbag2 bags with clear errors, storage names, and a typestore
that knows this package's messages (no ROS import: rosbags reads and writes the CDR itself)."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

from rosbags.interfaces import Connection
from rosbags.rosbag2 import Reader, ReaderError, StoragePlugin, Writer, WriterError
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.package_files import PACKAGE, share_dirs

STORAGES: dict[str, StoragePlugin] = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")


# Reading a damaged file surfaces as whatever its decoder trips over; all of them mean "this bag is broken".
_CORRUPT = (
    ReaderError,
    sqlite3.Error,
    OSError,
    EOFError,
    ValueError,
    KeyError,
    IndexError,
    struct.error,
    AssertionError,
)


def storage_plugin(name: str) -> StoragePlugin:
    try:
        return STORAGES[name]
    except KeyError:
        raise BagError(f"unknown storage format {name!r}; use one of {', '.join(STORAGES)}") from None


def _msg_dirs(package: str) -> list[Path]:
    dirs = [root / "msg" for root in share_dirs()] if package == PACKAGE else []
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:
        return dirs
    with contextlib.suppress(PackageNotFoundError, ValueError):
        dirs.append(Path(get_package_share_directory(package)) / "msg")
    return dirs


def _register_from_share(store: Typestore, msgtype: str) -> bool:
    """Find `pkg/msg/Name` as a .msg file of an installed package and register it (and what it uses)."""
    package, _, name = msgtype.split("/")
    for folder in _msg_dirs(package):
        path = folder / f"{name}.msg"
        if path.is_file():
            types = get_types_from_msg(path.read_text(), msgtype)
            store.register(types)
            for _, (_, fields) in types.items():
                for _, desc in fields:
                    for sub in _nested_types(desc):
                        if sub not in store.types:
                            _register_from_share(store, sub)
            return True
    return False


def _nested_types(desc: object) -> Iterator[str]:
    # Field descriptions are nested tuples; message references are (Nodetype.NAME, "pkg/msg/Name").
    if isinstance(desc, tuple):
        for item in desc:
            if isinstance(item, str) and item.count("/") == 2:
                yield item
            else:
                yield from _nested_types(item)


@functools.lru_cache(maxsize=1)
def typestore() -> Typestore:
    """ROS 2 Kilted's standard types plus this package's messages."""
    store = get_typestore(Stores.ROS2_KILTED)
    for name in ("BoundingBox2D", "TimeSegment", "Trajectory2D", "ReasonerResult"):
        ensure_type(store, f"{PACKAGE}/msg/{name}")
    return store


def ensure_type(store: Typestore, msgtype: str) -> None:
    if msgtype in store.types:
        return
    if not _register_from_share(store, msgtype):
        raise BagError(f"message type {msgtype} is unknown (no .msg file found for it)")


def open_reader(path: Path) -> Reader:
    """An opened reader; a missing, unknown or damaged bag raises BagError instead of a library traceback."""
    if not path.exists():
        raise BagError(f"bag {path} does not exist")
    try:
        reader = Reader(path)
        reader.open()
    except FileNotFoundError as exc:
        raise BagError(f"{path} is not a rosbag2 bag: {exc}") from None
    except _CORRUPT as exc:
        raise BagError(f"cannot open bag {path} (damaged, truncated or not a bag): {exc}") from None
    return reader


def messages(
    reader: Reader, connections: Sequence[Connection] = (), start_ns: int | None = None
) -> Iterator[tuple[Connection, int, bytes]]:
    """The reader's messages in time order; a truncated or corrupt file raises BagError when it is reached."""
    try:
        yield from reader.messages(connections=connections, start=start_ns)
    except _CORRUPT as exc:
        raise BagError(f"bag {reader.path} is damaged or truncated: {exc}") from None


def connections_for(reader: Reader, topics: Sequence[str]) -> list[Connection]:
    """The connections of `topics` (all when empty); names each missing topic and lists what the bag has."""
    have = {c.topic for c in reader.connections}
    if missing := [t for t in topics if t not in have]:
        available = ", ".join(f"{c.topic} ({c.msgtype})" for c in reader.connections) or "none"
        raise BagError(f"bag {reader.path} has no topic {', '.join(missing)}; it has: {available}")
    return [c for c in reader.connections if not topics or c.topic in topics]


def image_connections(reader: Reader, topic: str = "") -> list[Connection]:
    """The colour image topic(s): the named one, else every Image/CompressedImage topic but depth."""
    if topic:
        conns = connections_for(reader, [topic])
        if conns[0].msgtype not in IMAGE_TYPES:
            raise BagError(f"topic {topic} carries {conns[0].msgtype}, not an image")
        return conns
    conns = [c for c in reader.connections if c.msgtype in IMAGE_TYPES and "depth" not in c.topic]
    if not conns:
        available = ", ".join(f"{c.topic} ({c.msgtype})" for c in reader.connections) or "none"
        raise BagError(f"bag {reader.path} has no image topic; it has: {available}")
    return conns


def open_writer(path: Path, storage: str = "mcap") -> Writer:
    plugin = storage_plugin(storage)
    try:
        writer = Writer(path, version=9, storage_plugin=plugin)
        writer.open()
    except (WriterError, OSError) as exc:
        raise BagError(f"cannot create bag {path}: {exc}") from None
    return writer
