"""What a playback is asked to do (`cosmos-reasoner-bag play`'s options, checked) and the QoS it publishes
with: the recorded timing's rate, loops and bounds, the topics, their remapping and QoS, the clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["CLOCK_QOS", "QOS_CHOICES", "PlayOptions", "parse_remap", "qos_profile"]

QOS_CHOICES = ("reliable", "sensor_data", "transient_local")


@dataclass(frozen=True)
class PlayOptions:
    rate: float = 1.0  # playback speed factor (2.0: twice as fast)
    loops: int = 1  # how often to play the bag; 0: until stopped
    start_offset_s: float = 0.0  # [s] skip this much of the bag's beginning
    until_s: float | None = None  # [s from the bag's first message] play no message recorded after this
    cameras: tuple[str, ...] = ()  # camera topics; empty: the bag's only camera topic
    infos: tuple[str, ...] = ()  # their CameraInfo topics; empty: found by namespace
    depths: tuple[str, ...] = ()  # their depth topics; empty: found when unambiguous
    depth: bool = True  # also play the depth topic (when there is one)
    topics: tuple[str, ...] = ()  # further topics to play (alone: only these)
    all_topics: bool = False  # every topic whose type rclpy has (the others are named and left out)
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
    clock: bool = True  # publish rosgraph_msgs/Clock in the bag's time (nodes with use_sim_time follow it)
    clock_topic: str = "/clock"
    clock_hz: float = 40.0  # [Hz] /clock while nothing else is published (also while paused: the same time)
    announce: bool = True  # say on stderr which topics were chosen

    def check(self) -> None:
        if not self.rate > 0:
            raise BagError(f"rate must be > 0, got {self.rate}")
        if self.loops < 0 or self.start_offset_s < 0 or self.qos_depth < 1 or self.drain_s < 0:
            raise BagError("loops, start offset and drain must be >= 0, qos depth >= 1")
        if self.until_s is not None and not self.start_offset_s < self.until_s:
            raise BagError(f"the end ({self.until_s} s) must come after the start ({self.start_offset_s} s)")
        if not 0 < self.clock_hz <= 1000:
            raise BagError(f"clock rate must be in (0, 1000] Hz, got {self.clock_hz}")
        for name in (self.qos, *self.topic_qos.values()):
            if name not in QOS_CHOICES:
                raise BagError(f"unknown qos {name!r}; use one of {', '.join(QOS_CHOICES)}")


def parse_remap(items: Sequence[str]) -> dict[str, str]:
    """`old:=new` pairs (ROS 2 remapping syntax) to a dict."""
    out = {}
    for item in items:
        old, sep, new = item.partition(":=")
        if not sep or not old or not new:
            raise BagError(f"remap {item!r} is not old:=new")
        out[old] = new
    return out


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


# rosgraph_msgs/Clock as rclcpp::ClockQoS: the newest value is all that counts.
CLOCK_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
