"""Writing rosbag2 bags: MCAP through the `mcap` package with chunk and data-section CRCs (so that damage to a
bag this package wrote is found before it is replayed; rosbags' MCAP writer leaves the CRCs at 0) beside a
version 9 metadata.yaml, or sqlite3 through rosbags. No ROS import."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from rosbags.typesys.store import Typestore

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.safe_paths import printable

__all__ = ["STORAGES", "BagWriter", "open_writer"]

STORAGES = ("mcap", "sqlite3")


@dataclass
class _Topic:
    name: str
    msgtype: str
    channel: Any
    count: int = 0


class _NoAliases(yaml.SafeDumper):
    """rosbag2 (yaml-cpp) writes no anchors for repeated values; neither do we."""

    def ignore_aliases(self, data: object) -> bool:
        return True


@dataclass
class BagWriter:
    """A new bag at `path`; `add_topic` then `write`; `close` finishes it (metadata.yaml included), `abort`
    removes what was written."""

    path: Path
    storage: str = "mcap"
    _topics: dict[str, _Topic] = field(default_factory=dict)
    _fh: IO[bytes] | None = None
    _mcap: Any = None
    _rosbags: Any = None
    _first: int | None = None
    _last: int = 0
    _staging: Any = None  # a TemporaryDirectory rosbags writes into when the path is no plain SQLite URI

    def open(self) -> BagWriter:
        if self.storage not in STORAGES:
            raise BagError(f"unknown storage format {self.storage!r}; use one of {', '.join(STORAGES)}")
        if self.path.exists() or self.path.is_symlink():
            raise BagError(f"{self.path} exists already; choose a new bag path")
        try:
            if self.storage == "sqlite3":
                from rosbags.rosbag2 import StoragePlugin, Writer

                # rosbags opens `file:<path>` as an SQLite URI: a name with ?, # or % (or bytes that are not
                # UTF-8) is cut there, and the database went beside the bag. Such a bag is written in a
                # folder of a plain name and moved into place when it is finished.
                target = self.path
                if any(ch in str(self.path) for ch in "?#%") or printable(str(self.path)) != str(self.path):
                    import tempfile

                    self._staging = tempfile.TemporaryDirectory(prefix="cosmos-bag-")
                    target = Path(self._staging.name) / "bag"
                self._rosbags = Writer(target, version=9, storage_plugin=StoragePlugin.SQLITE3)
                self._rosbags.open()
                return self
            from mcap.writer import CompressionType
            from mcap.writer import Writer as McapWriter

            self.path.mkdir(parents=True)
            self._fh = (self.path / f"{self.path.name}_0.mcap").open("xb")
            self._mcap = McapWriter(
                self._fh, compression=CompressionType.ZSTD, enable_crcs=True, enable_data_crcs=True
            )
            self._mcap.start(profile="ros2", library="cosmos_reasoner_ros")
        except OSError as exc:
            raise BagError(f"cannot create bag {self.path}: {exc}") from None
        except Exception as exc:  # rosbags' WriterError
            raise BagError(f"cannot create bag {self.path}: {exc}") from None
        return self

    def add_topic(self, topic: str, msgtype: str, store: Typestore) -> str:
        """Declare a topic (once); returns the key `write` takes."""
        if topic in self._topics:
            return topic
        if self._rosbags is not None:
            channel = self._rosbags.add_connection(topic, msgtype, typestore=store)
        else:
            text = store.generate_msgdef(msgtype, ros_version=2)[0]
            schema = self._mcap.register_schema(msgtype, "ros2msg", text.encode())
            channel = self._mcap.register_channel(topic, "cdr", schema, {"offered_qos_profiles": ""})
        self._topics[topic] = _Topic(topic, msgtype, channel)
        return topic

    def write(self, topic: str, stamp_ns: int, data: bytes | memoryview) -> None:
        t = self._topics[topic]
        try:
            if self._rosbags is not None:
                self._rosbags.write(t.channel, stamp_ns, bytes(data))
            else:
                self._mcap.add_message(t.channel, log_time=stamp_ns, data=bytes(data), publish_time=stamp_ns)
        except OSError as exc:
            raise BagError(f"cannot write bag {self.path}: {exc}") from None
        t.count += 1
        self._first = stamp_ns if self._first is None else min(self._first, stamp_ns)
        self._last = max(self._last, stamp_ns)

    @property
    def counts(self) -> dict[str, int]:
        return {t.name: t.count for t in self._topics.values()}

    def close(self) -> None:
        try:
            if self._rosbags is not None:
                self._rosbags.close()
                if self._staging is not None:
                    import shutil

                    shutil.move(Path(self._staging.name) / "bag", self.path)
                return
            if self._mcap is None or self._fh is None:
                return
            self._mcap.finish()
            self._fh.close()
            self._write_metadata()
        except OSError as exc:
            raise BagError(f"cannot finish bag {self.path}: {exc}") from None
        finally:
            self._release()

    def abort(self) -> None:
        import shutil

        with contextlib.suppress(Exception):
            if self._rosbags is not None:
                self._rosbags.close()
        if self._fh is not None:
            self._fh.close()
        self._release()
        shutil.rmtree(self.path, ignore_errors=True)

    def _release(self) -> None:
        """The writer is done: no writer left, the staging folder (sqlite3) removed."""
        self._mcap = self._rosbags = None
        if self._staging is not None:
            self._staging.cleanup()
            self._staging = None

    def _write_metadata(self) -> None:
        """metadata.yaml as rosbag2 writes version 9, so that ros2 bag and rosbags read the bag; it names the
        distribution this process runs on (its typestore wrote the definitions)."""
        from cosmos_reasoner_ros.ros_compat import ros_distro

        name = f"{self.path.name}_0.mcap"
        start = self._first or 0
        duration = self._last - start if self._first is not None else 0
        total = sum(t.count for t in self._topics.values())
        info = {
            "version": 9,
            "storage_identifier": "mcap",
            "duration": {"nanoseconds": duration},
            "starting_time": {"nanoseconds_since_epoch": start},
            "message_count": total,
            "topics_with_message_count": [
                {
                    "topic_metadata": {
                        "name": t.name,
                        "type": t.msgtype,
                        "serialization_format": "cdr",
                        "offered_qos_profiles": [],
                        "type_description_hash": "",
                    },
                    "message_count": t.count,
                }
                for t in self._topics.values()
            ],
            "compression_format": "",
            "compression_mode": "",
            "relative_file_paths": [name],
            "files": [
                {
                    "path": name,
                    "starting_time": {"nanoseconds_since_epoch": start},
                    "duration": {"nanoseconds": duration},
                    "message_count": total,
                }
            ],
            "custom_data": {},
            "ros_distro": ros_distro(),
        }
        text = yaml.dump({"rosbag2_bagfile_information": info}, Dumper=_NoAliases, sort_keys=False)
        (self.path / "metadata.yaml").write_text(text, encoding="utf-8")


def open_writer(path: Path, storage: str = "mcap") -> BagWriter:
    return BagWriter(path, storage).open()
