"""`cosmos-reasoner-bag play`: publishes a recording's camera topics (or the topics named) through rclpy with
the recorded timing (rate factor, loops, remapping, start offset), publishes `/clock` in the bag's time as
`ros2 bag play --clock` does, and measures how late each message went out.

Only the chosen topics are read: the camera topics and their CameraInfo and depth topics (named, or found by
message type, files/topics.py), plus any named with `topics`. The bag is checked whole before the first
message goes out (files/integrity.py): a damaged bag is never replayed. Camera topics recorded as video
(foxglove_msgs/msg/CompressedVideo) are decoded and published as sensor_msgs/Image on the same topic name."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rclpy.node import Node

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.integrity import check_bag
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.files.topics import VIDEO_TYPE, CameraTopics, choose_topics
from cosmos_reasoner_ros.bag.files.video import VideoDecoder
from cosmos_reasoner_ros.bag.replay.play_options import (
    CLOCK_QOS,
    QOS_CHOICES,
    PlayOptions,
    parse_remap,
    qos_profile,
)
from cosmos_reasoner_ros.bag.replay.play_stats import LAG_SAMPLES, PlayStats
from cosmos_reasoner_ros.bag.replay.ros_types import importable, message_class, topic_name_problem

# PlayOptions, PlayStats and the rclpy names are imported from here too (play_options, play_stats,
# ros_types).
__all__ = [
    "LAG_SAMPLES",
    "MATCH_SETTLE_S",
    "QOS_CHOICES",
    "PlayOptions",
    "PlayStats",
    "Player",
    "message_class",
    "parse_remap",
    "topic_name_problem",
]


@dataclass
class _Run:
    """One call of Player.run: when it stops, its rate, the marks still to run and the hooks."""

    stop: threading.Event
    rate: float
    span_ns: int  # one pass over the recording, in bag time
    pending: list[int]  # the marks still to run, in order (the first pass only)
    at_mark: Callable[[int], None] | None
    ends_at_marks: bool
    before_publish: Callable[[int], None] | None
    after_publish: Callable[[str, int, bytes], None] | None
    stats: PlayStats = field(default_factory=lambda: PlayStats())


MATCH_SETTLE_S = 0.5  # [s] after every topic is matched, before the first message
_DEFAULTS = PlayOptions()  # (frozen)


class Player:
    """Plays one bag on a node's publishers. `run` blocks (call it from a thread when the node spins
    elsewhere)."""

    def __init__(self, node: Node, bag: Path | BagReader, options: PlayOptions = _DEFAULTS) -> None:
        options.check()
        self.node = node
        self.options = options
        # The playback clock's state (_base, _paused, _running, _loop_ns, _last_ns, _clock_ns) changes and is
        # read under _clock_lock, and each /clock value is computed and published under it: the clock thread
        # then never sees a pause cleared before its length was added to _base (a jump forward by the whole
        # pause, then back at the next message), nor publishes a value older than one just published.
        self._clock_lock = threading.Lock()
        self._base = 0.0  # monotonic time of the bag's start, moved on by the time hooks take
        self._running = False
        self._paused = False
        self._loop_ns = 0
        self._clock_ns = 0  # the last /clock value published in this pass (a new pass starts again)
        self._hold_ns: int | None = None  # a mark the clock is approaching: it never runs past it
        self._clock_pub: Any = None
        self._clock_stop = threading.Event()
        self._clock_thread: threading.Thread | None = None
        self.reader = bag if isinstance(bag, BagReader) else BagReader(bag)
        self.publishers: dict[str, tuple[str, Any]] = {}  # bag topic -> (published topic, publisher)
        self.sent: dict[str, int] = {}  # bag topic -> messages published (decoded video: frames)
        try:
            self.choice, topics = self._select()
            self.integrity = check_bag(self.reader, topics, warn=options.announce)
            topics = self._publishable(topics)
            spans = [self.integrity.spans[t] for t in topics if t in self.integrity.spans]
            if not spans:
                raise BagError(
                    f"bag {self.reader.path} has no messages on {', '.join(topics)}: nothing to replay"
                )
            self.first_ns = min(s[0] for s in spans)  # the replay's time 0: its first message
            self.start_ns = self.first_ns + round(options.start_offset_s * 1e9)
            self.end_ns = max(s[1] for s in spans)
            self._last_ns = self.start_ns
            if self.start_ns > self.end_ns:
                raise BagError(f"start offset {options.start_offset_s} s is past the bag's end")
            if options.until_s is not None:
                self.bound(None, self.first_ns + round(options.until_s * 1e9))
            self.topics = topics
            self.store, unknown = self.reader.typestore(topics)
            self.decoders = {
                t: VideoDecoder(t) for t in topics if self.reader.topics[t].msgtype == VIDEO_TYPE
            }
            for t in self.decoders:
                if VIDEO_TYPE in unknown:
                    raise BagError(f"topic {t}: {VIDEO_TYPE} cannot be read: {unknown[VIDEO_TYPE]}")
            by_topic: dict[str, Any] = {}
            for name in topics:
                topic = options.remap.get(name, name)
                if topic not in by_topic:
                    qos = qos_profile(options.topic_qos.get(name, options.qos), options.qos_depth)
                    by_topic[topic] = node.create_publisher(self._class(name), topic, qos)
                self.publishers[name] = (topic, by_topic[topic])
            if options.clock:
                from rosgraph_msgs.msg import Clock

                self._clock_pub = node.create_publisher(Clock, options.clock_topic, CLOCK_QOS)
        except BaseException:
            self.close()
            raise

    def _select(self) -> tuple[CameraTopics | None, list[str]]:
        o, bag = self.options, self.reader
        skipped = []
        if o.all_topics:
            topics = []
            for t in sorted(bag.topics.values(), key=lambda t: t.name):
                if t.name == o.clock_topic and o.clock:
                    skipped.append(f"{t.name} (this player publishes the clock)")
                elif not t.readable:
                    skipped.append(f"{t.name} ({t.encoding} encoding)")
                elif t.msgtype != VIDEO_TYPE and not importable(t.msgtype):
                    skipped.append(f"{t.name} ({t.msgtype}: not installed for rclpy)")
                else:
                    topics.append(t.name)
            choice = None
        elif o.topics and not (o.cameras or o.infos or o.depths):
            topics, choice = [bag.topic(t).name for t in o.topics], None
        else:
            choice = choose_topics(bag, o.cameras, o.infos, o.depths, o.depth)
            topics = list(dict.fromkeys([*choice.topics, *(bag.topic(t).name for t in o.topics)]))
        if o.announce:
            lines = list(choice.chosen) if choice else []
            if skipped:
                lines.append(f"left out {len(skipped)} topic(s): {', '.join(skipped[:20])}")
            left = len(bag.topics) - len(topics) - len(skipped)
            if left > 0 and not o.all_topics:
                lines.append(f"{left} other topic(s) of the bag not played")
            for line in lines:
                print(f"cosmos-reasoner-bag: {bag.name}: {line}", file=sys.stderr)
        if not topics:
            raise BagError(f"bag {bag.path}: no topic to play; it has: {bag.describe_topics()}")
        return choice, topics

    def _publishable(self, topics: list[str]) -> list[str]:
        """The topics whose recorded bytes this installation's message types read: a topic recorded with
        another distribution's layout of its type (Humble's sensor_msgs/Range in a Jazzy install) is left
        out with --all-topics, else refused, and never called damaged."""
        from cosmos_reasoner_ros.bag.files.reader import same_layout
        from cosmos_reasoner_ros.bag.files.typestore import distro_name, typestore

        store, _ = self.reader.typestore(topics)
        installed = typestore(None)
        left: dict[str, str] = dict(self.integrity.foreign)
        for t in topics:
            if problem := topic_name_problem(self.options.remap.get(t, t)):
                left[t] = problem
                continue
            msgtype = self.reader.topics[t].msgtype
            if t in left or msgtype == VIDEO_TYPE or msgtype not in installed.fielddefs:
                continue
            if not same_layout(store, installed, msgtype):
                left[t] = (
                    f"recorded as another distribution's {msgtype}, which differs from this ROS 2 "
                    f"{distro_name(None)} installation's: its bytes would not read as that type"
                )
        kept = [t for t in topics if t not in left]
        if left and not self.options.all_topics:
            raise BagError("; ".join(f"topic {t} cannot be played: {why}" for t, why in left.items()))
        if left and self.options.announce:
            listed = "; ".join(f"{t}: {why}" for t, why in left.items())
            print(f"cosmos-reasoner-bag: {self.reader.name}: left out {listed}", file=sys.stderr)
        if not kept:
            raise BagError(f"bag {self.reader.path}: no topic left to play")
        return kept

    def _class(self, topic: str) -> Any:
        if topic in self.decoders:
            from sensor_msgs.msg import Image

            return Image
        return message_class(self.reader.topics[topic].msgtype)

    def bound(self, start_ns: int | None, end_ns: int | None) -> None:
        """Play only what was recorded from start_ns to end_ns (bag times; None: the bag's own bound)."""
        if start_ns is not None:
            self.start_ns = self._last_ns = max(self.first_ns, start_ns)
        if end_ns is not None:
            self.end_ns = min(self.end_ns, end_ns)
        if self.start_ns > self.end_ns:
            raise BagError(f"bag {self.reader.path}: nothing recorded between the replay's start and its end")

    @property
    def duration_s(self) -> float:
        """From the replay's first message (or the start offset) to its last."""
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def span_s(self) -> float:
        """From the replay's first message to its last: trigger times are seconds from that first message."""
        return (self.end_ns - self.first_ns) / 1e9

    def publisher(self, topic: str) -> Any:
        return self.publishers[topic][1]

    # ----------------------------------------------------------------------------------------- clock

    @property
    def clock_publisher(self) -> Any:
        return self._clock_pub

    def _publish_clock(self, ns: int | None = None) -> None:
        """Publish `ns` (None: the playback clock now) on /clock, never behind the value published last in
        this pass: a message's own time that the clock thread's reading overtook while the player was late
        keeps the later value."""
        if self._clock_pub is None:
            return
        from rosgraph_msgs.msg import Clock

        msg = Clock()
        with self._clock_lock:
            if self._clock_pub is None:
                return
            value = max(self._bag_time_locked() if ns is None else ns, self._clock_ns, 0)
            self._clock_ns = value
            msg.clock.sec, msg.clock.nanosec = divmod(value, 1_000_000_000)
            self._clock_pub.publish(msg)

    def start_clock(self) -> None:
        """Publish the bag's start time now and then at clock_hz until close(): a node with use_sim_time
        reads time 0 until its first /clock, and would take the first frames as stamped in the future."""
        if self._clock_pub is None or self._clock_thread is not None:
            return
        self._publish_clock()
        period = 1.0 / self.options.clock_hz

        def tick() -> None:
            while not self._clock_stop.wait(period):
                try:
                    self._publish_clock()
                except Exception:  # the context went away (Ctrl-C): the clock ends with it
                    return

        self._clock_thread = threading.Thread(target=tick, daemon=True, name="bag-clock")
        self._clock_thread.start()

    # ------------------------------------------------------------------------------------------- play

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
        after_publish: Callable[[str, int, bytes], None] | None = None,
        marks: Sequence[int] = (),
        at_mark: Callable[[int], None] | None = None,
        stop_after_marks: bool = False,
    ) -> PlayStats:
        """Publish until the last loop ends or `stop` is set.

        `before_publish(bag_ns)` runs before each message and `after_publish(bag topic, bag_ns, data)` after
        it (data: the recorded bytes); time spent inside them pauses the playback clock (evaluation waits for
        answers this way). `at_mark(bag_ns)` runs once per mark (bag times; the first pass only) when the
        playback clock reaches it: after every message recorded before it has gone out, before those recorded
        at or after it, with /clock at the mark, also inside a gap of the recording (the clock runs on
        through a gap, as `ros2 bag play`'s does) and after its last message. A mark before the first
        message played runs at that message's time (the clock never goes back). `stop_after_marks`: the
        playback ends once the last mark has run (evaluation: nothing after the last trigger is asked for).
        Nothing recorded after the end (PlayOptions.until_s) is played."""
        run = _Run(
            stop=stop or threading.Event(),
            rate=self.options.rate,
            span_ns=self.end_ns - self.start_ns + 1,
            pending=sorted(marks) if at_mark is not None else [],
            at_mark=at_mark,
            ends_at_marks=stop_after_marks and at_mark is not None and bool(marks),
            before_publish=before_publish,
            after_publish=after_publish,
        )
        self.start_clock()
        if self.options.wait_for_subscribers_s > 0:
            self.wait_for_subscribers(self.options.wait_for_subscribers_s, run.stop)
        begin = time.monotonic()
        with self._clock_lock:
            self._base, self._running = begin, True
            # The clock thread's ticks never pass the next mark before it is handled.
            self._hold_ns = run.pending[0] if run.pending else None
        loop = 0
        try:
            while not run.stop.is_set() and (self.options.loops == 0 or loop < self.options.loops):
                self._play_pass(run, loop)
                while loop == 0 and run.pending and not run.stop.is_set():  # marks after the last message
                    self._reach(run, run.pending.pop(0))
                loop += 1
                if run.ends_at_marks:
                    break
        finally:
            run.stats.wall_s = time.monotonic() - begin
            with self._clock_lock:
                self._running = False
                self._hold_ns = None
        if not run.stop.is_set():
            run.stats.unacknowledged = self.drain(self.options.drain_s)
        return run.stats

    def _play_pass(self, run: _Run, loop: int) -> None:
        """One pass over the recording: each message at its time, the marks before it run first."""
        with self._clock_lock:
            self._loop_ns = loop * run.span_ns
            self._clock_ns = 0  # a new pass: /clock goes back to the bag's start, as in ros2 bag play
        self.decoders = {t: VideoDecoder(t) for t in self.decoders}  # each loop from a keyframe
        # Video needs its keyframe: read from the first message and decode what lies before the offset.
        read_from = self.first_ns if self.decoders else self.start_ns
        for m in self.reader.messages(self.topics, read_from):
            if run.stop.is_set() or m.log_ns > self.end_ns:
                return
            outgoing = self._outgoing(m.topic, m.data)
            if m.log_ns < self.start_ns or not outgoing:
                continue
            while loop == 0 and run.pending and run.pending[0] < m.log_ns and not run.stop.is_set():
                self._reach(run, run.pending.pop(0))
            if run.ends_at_marks and not run.pending:
                return
            if (before := run.before_publish) is not None:
                self._paused_for(lambda: before(m.log_ns))  # noqa: B023 (called at once)
            due = self._base + ((m.log_ns - self.start_ns) + loop * run.span_ns) / 1e9 / run.rate
            if not self._wait_until(due, run.stop):
                return
            self._publish(m.topic, m.log_ns, outgoing, run.stats, due)
            if (after := run.after_publish) is not None:
                self._paused_for(lambda: after(m.topic, m.log_ns, m.data))  # noqa: B023

    def _publish(
        self, bag_topic: str, log_ns: int, outgoing: list[Any], stats: PlayStats, due: float
    ) -> None:
        """One recorded message out (the clock first: a node stamps the frame's arrival with it), counted."""
        topic, publisher = self.publishers[bag_topic]
        with self._clock_lock:
            self._last_ns = log_ns
        self._publish_clock(log_ns)
        stats.add_lag(time.monotonic() - due)
        for item in outgoing:
            publisher.publish(item)
        stats.published += len(outgoing)
        self.sent[bag_topic] = self.sent.get(bag_topic, 0) + len(outgoing)
        stats.per_topic[topic] = stats.per_topic.get(topic, 0) + len(outgoing)

    def _paused_for(self, call: Callable[[], None]) -> None:
        """Run `call` with the playback clock paused: time spent inside it does not count."""
        with self._clock_lock:
            entered = time.monotonic()
            self._paused = True
        try:
            call()
        finally:
            # The base first, then the pause cleared, in one step for the clock thread.
            with self._clock_lock:
                self._base += time.monotonic() - entered
                self._paused = False

    def _reach(self, run: _Run, mark: int) -> None:
        """Wait until the playback clock reaches the mark, then run at_mark, the clock standing on it."""
        at_mark = run.at_mark
        assert at_mark is not None
        try:
            if self._wait_until(self._base + (mark - self.start_ns) / 1e9 / run.rate, run.stop):
                with self._clock_lock:
                    self._last_ns = max(self._last_ns, mark)
                self._publish_clock(mark)
                self._paused_for(lambda: at_mark(mark))
        finally:
            with self._clock_lock:  # the clock runs on to the next mark, not past it
                self._hold_ns = run.pending[0] if run.pending else None

    @staticmethod
    def _wait_until(due: float, stop: threading.Event) -> bool:
        """Sleep until the monotonic time `due`; False when `stop` was set meanwhile."""
        while (wait := due - time.monotonic()) > 0:
            if stop.wait(min(wait, 0.1)):
                return False
        return not stop.is_set()

    def _outgoing(self, topic: str, data: bytes) -> list[Any]:
        """What one recorded message becomes on the wire: its own bytes, or the frames decoded from video."""
        decoder = self.decoders.get(topic)
        if decoder is None:
            return [data]
        from sensor_msgs.msg import Image

        out = []
        for frame in decoder.decode(self.store.deserialize_cdr(data, VIDEO_TYPE)):
            msg = Image()
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(frame.stamp_ns, 1_000_000_000)
            msg.header.frame_id = frame.frame_id
            msg.height, msg.width = frame.rgb.shape[:2]
            msg.encoding, msg.step = "rgb8", frame.rgb.shape[1] * 3
            msg.data = frame.rgb.tobytes()
            out.append(msg)
        return out

    def bag_time_ns(self) -> int:
        """The playback clock in the bag's time: it stands still while a hook runs, never runs behind the last
        published message, and stops at the last one when playback has ended."""
        with self._clock_lock:
            return self._bag_time_locked()

    def _bag_time_locked(self) -> int:
        if not self._running or self._paused:
            return self._last_ns
        now = self.start_ns + round((time.monotonic() - self._base) * 1e9 * self.options.rate) - self._loop_ns
        if self._hold_ns is not None:  # the clock thread's tick must not pass a mark before it is handled
            now = min(now, self._hold_ns)
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
        self._clock_stop.set()
        if self._clock_thread is not None:
            self._clock_thread.join(timeout=2)
        with self._clock_lock:
            clock, self._clock_pub = self._clock_pub, None
        self.reader.close()
        pubs = {id(p): p for _, p in self.publishers.values()}.values()
        for publisher in [*pubs, *([clock] if clock is not None else [])]:
            with contextlib.suppress(Exception):  # the context is gone already: nothing left to release
                self.node.destroy_publisher(publisher)
        self.publishers = {}
