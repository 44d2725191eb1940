"""`cosmos-reasoner-bag record`: subscribes raw (no deserialisation) to the node's output topics, discovering
their types from the graph, and writes them into an mcap bag with rosbags. An evaluation also passes the
camera messages it plays through (`add_passthrough`) and stamps everything with the playback's bag time, so
that the recording opens in Foxglove or RViz with the results beside the camera on one timeline."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosbags.typesys.store import Typestore

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.typestore import ensure_type, typestore
from cosmos_reasoner_ros.bag.files.writer import open_writer
from cosmos_reasoner_ros.bag.replay.play import message_class

NODE = "/reasoner_node"
DEFAULT_TOPICS = (
    f"{NODE}/result",
    f"{NODE}/next_action",
    f"{NODE}/annotated_image",
    f"{NODE}/trajectory",
    f"{NODE}/markers",
    "/diagnostics",
)


def default_topics(node_name: str = "reasoner_node") -> tuple[str, ...]:
    return tuple(t.replace(NODE, "/" + node_name.lstrip("/"), 1) for t in DEFAULT_TOPICS)


class Recorder:
    """Records `topics` into a new bag; call `discover()` periodically (topics may appear late)."""

    def __init__(
        self,
        node: Node,
        out: Path,
        topics: Sequence[str],
        storage: str = "mcap",
        clock: Callable[[], int] | None = None,
        names: Mapping[str, str] | None = None,
    ) -> None:
        """clock: the log time of each received message in ns (default: the node's clock). names: the name
        a topic is written under, where it is not its own (an evaluation's node runs under a namespace of its
        run, its outputs are recorded under the names a user knows)."""
        if not topics:
            raise BagError("no topics to record")
        self.node = node
        self._clock = clock or (lambda: self.node.get_clock().now().nanoseconds)
        self._passthrough: dict[str, str] = {}
        self.topics = tuple(topics)
        self._names = dict(names or {})
        self.store = typestore()
        self._lock = threading.Lock()
        self.writer = open_writer(out, storage)
        self.counts: dict[str, int] = {}
        self._subs: dict[str, Any] = {}
        self._closed = False

    def _qos(self, topic: str) -> QoSProfile:
        # Match the offering publishers: a reliable reader never matches a best-effort writer, and a latched
        # (transient local) writer's last sample is only delivered to a transient local reader.
        infos = self.node.get_publishers_info_by_topic(topic)
        best_effort = any(i.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT for i in infos)
        latched = bool(infos) and all(
            i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos
        )
        return QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=100,
            reliability=ReliabilityPolicy.BEST_EFFORT if best_effort else ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
        )

    def discover(self) -> list[str]:
        """Subscribe to the wanted topics that now have a publisher; returns the newly subscribed ones."""
        new = []
        graph = dict(self.node.get_topic_names_and_types())
        for topic in self.topics:
            if topic in self._subs or topic not in graph or not self.node.get_publishers_info_by_topic(topic):
                continue
            msgtype = graph[topic][0]
            ensure_type(self.store, msgtype)
            name = self._names.get(topic, topic)
            with self._lock:
                conn = self.writer.add_topic(name, msgtype, self.store)
            self.counts[name] = 0
            self._subs[topic] = self.node.create_subscription(
                message_class(msgtype), topic, self._callback(name, conn), self._qos(topic), raw=True
            )
            new.append(topic)
        return new

    @property
    def subscribed(self) -> tuple[str, ...]:
        return tuple(self._subs)

    def _callback(self, topic: str, conn: Any) -> Any:
        def on_message(data: bytes) -> None:
            stamp = self._clock()
            with self._lock:
                if self._closed:
                    return
                self.writer.write(conn, stamp, data)
                self.counts[topic] += 1

        return on_message

    def add_passthrough(self, key: str, topic: str, msgtype: str, store: Typestore | None = None) -> None:
        """A topic written directly (`write_passthrough`), e.g. the camera messages an evaluation plays;
        `store` knows its type (the bag's own types, for types this package does not ship)."""
        if store is None:
            ensure_type(self.store, msgtype)
        with self._lock:
            self._passthrough[key] = self.writer.add_topic(topic, msgtype, store or self.store)
        self.counts.setdefault(topic, 0)

    def write_passthrough(self, key: str, stamp_ns: int, data: bytes) -> None:
        topic = self._passthrough[key]
        with self._lock:
            if self._closed:
                return
            self.writer.write(topic, stamp_ns, data)
            self.counts[topic] += 1

    def close(self) -> dict[str, int]:
        with self._lock:
            if self._closed:
                return dict(self.counts)
            self._closed = True
            for sub in self._subs.values():
                self.node.destroy_subscription(sub)
            self.writer.close()
        return dict(self.counts)
