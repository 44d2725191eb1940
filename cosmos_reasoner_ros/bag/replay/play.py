"""`cosmos-reasoner-bag play`: publishes a bag's stored CDR bytes through rclpy with the recorded timing (rate
factor, loops, remapping, start offset) and measures how late each message went out."""

from __future__ import annotations

import importlib
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.io import connections_for, messages, open_reader

QOS_CHOICES = ("reliable", "sensor_data", "transient_local")


MATCH_SETTLE_S = 0.5  # [s] after every topic is matched, before the first message


@dataclass(frozen=True)
class PlayOptions:
    rate: float = 1.0  # playback speed factor (2.0: twice as fast)
    loops: int = 1  # how often to play the bag; 0: until stopped
    start_offset_s: float = 0.0  # [s] skip this much of the bag's beginning
    topics: tuple[str, ...] = ()  # bag topics to play; empty: all
    remap: Mapping[str, str] = field(default_factory=dict)  # bag topic -> published topic
    # Reliable keep-last is the default because replay tests must not lose frames between processes;
    # sensor_data (best effort) is what a real camera driver offers.
    qos: str = "reliable"
    qos_depth: int = 10
    topic_qos: Mapping[str, str] = field(default_factory=dict)  # bag topic -> QoS name, overriding `qos`
    wait_for_subscribers_s: float = 0.0  # [s] before starting, wait this long for every topic to be matched
    # [s] after the last message, wait up to this long until reliable subscribers have acknowledged
    # everything: a player that exits at once takes its last, not yet delivered messages with it.
    drain_s: float = 5.0

    def check(self) -> None:
        if not self.rate > 0:
            raise BagError(f"rate must be > 0, got {self.rate}")
        if self.loops < 0 or self.start_offset_s < 0 or self.qos_depth < 1 or self.drain_s < 0:
            raise BagError("loops, start offset and drain must be >= 0, qos depth >= 1")
        for name in (self.qos, *self.topic_qos.values()):
            if name not in QOS_CHOICES:
                raise BagError(f"unknown qos {name!r}; use one of {', '.join(QOS_CHOICES)}")


@dataclass
class PlayStats:
    published: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)
    lags_s: list[float] = field(default_factory=list)  # actual - scheduled publish time, per message
    wall_s: float = 0.0
    unacknowledged: list[str] = field(default_factory=list)  # topics not acknowledged within drain_s

    def summary(self) -> dict[str, Any]:
        lags = sorted(self.lags_s)
        return {
            "published": self.published,
            "per_topic": dict(self.per_topic),
            "wall_s": round(self.wall_s, 3),
            "lag_median_ms": round(statistics.median(lags) * 1e3, 3) if lags else 0.0,
            "lag_p95_ms": round(lags[min(len(lags) - 1, int(0.95 * len(lags)))] * 1e3, 3) if lags else 0.0,
            "lag_max_ms": round(lags[-1] * 1e3, 3) if lags else 0.0,
            "unacknowledged": list(self.unacknowledged),
        }


def parse_remap(items: Sequence[str]) -> dict[str, str]:
    """`old:=new` pairs (ROS 2 remapping syntax) to a dict."""
    out = {}
    for item in items:
        old, sep, new = item.partition(":=")
        if not sep or not old or not new:
            raise BagError(f"remap {item!r} is not old:=new")
        out[old] = new
    return out


def message_class(msgtype: str) -> Any:
    """The rclpy message class of `pkg/msg/Name`."""
    package, kind, name = msgtype.split("/")
    try:
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ImportError, AttributeError):
        raise BagError(f"message type {msgtype} is not installed for rclpy") from None


def qos_profile(name: str, depth: int) -> QoSProfile:
    if name == "sensor_data":
        return qos_profile_sensor_data
    durability = DurabilityPolicy.TRANSIENT_LOCAL if name == "transient_local" else DurabilityPolicy.VOLATILE
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=depth,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=durability,
    )


class Player:
    """Plays one bag on a node's publishers. `run` blocks (call it from a thread when the node spins
    elsewhere)."""

    def __init__(self, node: Node, bag: Path, options: PlayOptions = PlayOptions()) -> None:
        options.check()
        self.node = node
        self.options = options
        self._base = 0.0  # monotonic time of the bag's start, moved on by the time hooks take
        self._running = False
        self._paused = False
        self._loop_ns = 0
        self.reader = open_reader(bag)
        try:
            self.connections = connections_for(self.reader, options.topics)
            self.start_ns = self.reader.start_time + round(options.start_offset_s * 1e9)
            self.end_ns = self.reader.end_time
            self._last_ns = self.start_ns
            if self.start_ns >= self.end_ns:
                raise BagError(f"start offset {options.start_offset_s} s is past the bag's end")
            self.publishers: dict[int, Any] = {}
            by_topic: dict[str, Any] = {}
            for conn in self.connections:
                topic = options.remap.get(conn.topic, conn.topic)
                if topic not in by_topic:
                    qos = qos_profile(options.topic_qos.get(conn.topic, options.qos), options.qos_depth)
                    by_topic[topic] = node.create_publisher(message_class(conn.msgtype), topic, qos)
                self.publishers[conn.id] = (topic, by_topic[topic])
        except BaseException:
            self.reader.close()
            raise

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def wait_for_subscribers(self, timeout_s: float, stop: threading.Event | None = None) -> bool:
        deadline = time.monotonic() + timeout_s
        pubs = {id(p): p for _, p in self.publishers.values()}.values()
        while any(p.get_subscription_count() == 0 for p in pubs):
            if time.monotonic() > deadline or (stop is not None and stop.is_set()):
                return False
            time.sleep(0.02)
        # A writer counts a reader as matched before that reader has matched the writer; what is sent in
        # between is lost for good with volatile durability (a replay's first frames): give it a moment.
        time.sleep(MATCH_SETTLE_S)
        return True

    def run(
        self,
        stop: threading.Event | None = None,
        before_publish: Callable[[int], None] | None = None,
        after_publish: Callable[[Any, int, bytes], None] | None = None,
    ) -> PlayStats:
        """Publish until the last loop ends or `stop` is set.

        `before_publish(bag_ns)` runs before each message and `after_publish(connection, bag_ns, data)` after
        it; time spent inside them pauses the playback clock (evaluation waits for answers this way)."""
        stop = stop or threading.Event()
        if self.options.wait_for_subscribers_s > 0:
            self.wait_for_subscribers(self.options.wait_for_subscribers_s, stop)
        stats = PlayStats()
        rate = self.options.rate
        span_ns = self.end_ns - self.start_ns
        begin = time.monotonic()
        self._base, self._running = begin, True
        loop = 0

        def hook(call: Callable[[], None]) -> None:
            entered = time.monotonic()
            self._paused = True
            try:
                call()
            finally:
                self._paused = False
                self._base += time.monotonic() - entered

        while not stop.is_set() and (self.options.loops == 0 or loop < self.options.loops):
            self._loop_ns = loop * span_ns
            for conn, bag_ns, data in messages(self.reader, self.connections, self.start_ns):
                if stop.is_set():
                    break
                if before_publish is not None:
                    hook(lambda: before_publish(bag_ns))  # noqa: B023 (called at once)
                due = self._base + ((bag_ns - self.start_ns) + loop * span_ns) / 1e9 / rate
                while (wait := due - time.monotonic()) > 0:
                    if stop.wait(min(wait, 0.1)):
                        break
                if stop.is_set():
                    break
                topic, publisher = self.publishers[conn.id]
                stats.lags_s.append(time.monotonic() - due)
                publisher.publish(data)
                self._last_ns = bag_ns
                stats.published += 1
                stats.per_topic[topic] = stats.per_topic.get(topic, 0) + 1
                if after_publish is not None:
                    hook(lambda: after_publish(conn, bag_ns, data))  # noqa: B023
            loop += 1
        stats.wall_s = time.monotonic() - begin
        self._running = False
        if not stop.is_set():
            stats.unacknowledged = self.drain(self.options.drain_s)
        return stats

    def bag_time_ns(self) -> int:
        """The playback clock in the bag's time: it stands still while a hook runs, never runs behind the last
        published message, and stops at the last one when playback has ended."""
        if not self._running or self._paused:
            return self._last_ns
        now = self.start_ns + round((time.monotonic() - self._base) * 1e9 * self.options.rate) - self._loop_ns
        return min(max(self._last_ns, now), self.end_ns)

    def wait_acked(self, timeout_s: float) -> list[str]:
        """Reliable subscribers of every topic have acknowledged what was published (topics still waiting)."""
        return self.drain(timeout_s)

    def drain(self, timeout_s: float) -> list[str]:
        """Wait until reliable subscribers have acknowledged every message (best effort ones return at once);
        returns the topics still waiting after `timeout_s`."""
        from rclpy.duration import Duration

        deadline = time.monotonic() + timeout_s
        waiting = []
        for topic, publisher in {id(p): (t, p) for t, p in self.publishers.values()}.values():
            left = max(0.0, deadline - time.monotonic())
            if not publisher.wait_for_all_acked(Duration(nanoseconds=round(left * 1e9))):
                waiting.append(topic)
        return waiting

    def close(self) -> None:
        self.reader.close()
        for _, publisher in {id(p): (t, p) for t, p in self.publishers.values()}.values():
            self.node.destroy_publisher(publisher)
