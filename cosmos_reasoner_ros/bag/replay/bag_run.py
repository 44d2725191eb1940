"""One bag's replay into its own reasoner_node, step by step: start the node, wait until it is ready (its
action server, its subscriptions, its clock in bag time), play the bag while sending the Reason goals at
their bag times, collect one ResultRecord per goal, close. `BagRun.run()` takes the steps in order and always
closes.

Timing modes: by default the bag plays with its recorded timing and requests run beside it, as on a robot.
In lock-step the player waits, before each trigger, until the node has handled every frame published so far
(lockstep.IngestWatch), and stands still while the trigger's requests are in flight."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.integrity import Integrity
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.files.topics import CameraTopics
from cosmos_reasoner_ros.bag.records import ResultRecord, record_from_msg
from cosmos_reasoner_ros.bag.replay.expected_clips import ClipSettings
from cosmos_reasoner_ros.bag.replay.losses import ReplayFacts, with_losses
from cosmos_reasoner_ros.bag.replay.node_process import (
    NodeCamera,
    NodeHandle,
    NodeProcess,
    NodeStarter,
    camera_names,
    default_params_file,
    namespaced_params_file,
    node_command,
    node_parameters,
)
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, TaskSpec, schedule
from cosmos_reasoner_ros.bag.replay.reason_goals import ReasonGoals
from cosmos_reasoner_ros.bag.safe_paths import child, safe_name

if TYPE_CHECKING:
    from cosmos_reasoner_ros.bag.replay.lockstep import IngestWatch
    from cosmos_reasoner_ros.bag.replay.play import Player
    from cosmos_reasoner_ros.bag.replay.record import Recorder

__all__ = ["BagRun", "BagRunInfo", "PreparedBag", "RunShared", "bag_id", "run_namespace"]


@dataclass(frozen=True)
class PreparedBag:
    """A bag opened, its topics chosen and checked whole: what must hold before any node starts."""

    reader: BagReader
    choice: CameraTopics
    integrity: Integrity


@dataclass(frozen=True)
class BagRunInfo:
    """What a bag's replay took: wall time, frames published, the clock mode, the topics replayed."""

    bag: str
    path: Path
    wall_s: float
    requests: int
    frames_published: int
    lock_step: bool
    cameras: tuple[str, ...] = ()  # the bag's camera topics that were replayed (the report draws the first)
    first_ns: int = 0  # time 0 of trigger times: the recording's start (its first message, on any topic)
    notes: tuple[str, ...] = ()  # what could not be checked in the bag
    infos: tuple[str, ...] = ()  # each camera's CameraInfo topic ("": none), in the order of `cameras`


@dataclass
class RunShared:
    """What the bags of one run share: the rclpy context, the request bound, the progress bar; the run's own
    ROS namespace (`namespace`, /cosmos_eval_<run id>; "" when `start_node` starts the node) and whether the
    run replays several bags (each then has its folders under bags/, media/ and outputs/)."""

    context: Any
    executor: Any
    gate: Any
    bar: Any
    options: EvalOptions
    out: Path
    start_node: NodeStarter | None
    namespace: str = ""
    several: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


# Image messages the player may publish beyond those the node has handled, in lock-step: below the node's
# reliable keep-last depth (10), so that no frame is ever overwritten in its subscription queue.
_LOCKSTEP_CREDIT = 8


def bag_id(integrity: Integrity, cameras: tuple[str, ...] | list[str]) -> str:
    """A short fingerprint of a recording's replayed camera topics: their names, message counts and time
    spans. A baseline made from another recording under the same name differs in it."""
    import hashlib

    parts = [f"{c}:{integrity.counts.get(c, 0)}:{integrity.spans.get(c, (0, 0))}" for c in cameras]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def run_namespace() -> str:
    """A namespace of a run's own (/cosmos_eval_<12 hex digits>, random): its nodes, the topics it plays and
    /clock under it, a node of a previous run still in discovery, or of a run beside it on the same ROS
    domain, neither takes its goals nor hears its frames and clock (issue 38, finding 9)."""
    import secrets

    return f"/cosmos_eval_{secrets.token_hex(6)}"


class BagRun:
    """One bag replayed into a fresh reasoner_node, under the run's namespace (`shared.namespace`) followed by
    `namespace` (/eval<k> when several bags play at once). The player publishes the bag's topics and /clock
    under that namespace, so that only this run's node hears them; what the user sees (records, the report,
    recorded outputs) names the topics without the run's namespace.

    The helper node is made here; `run()` then starts the node, waits until it is ready, plays and collects,
    and closes whatever was started. Trigger times count from the recording's start (its first message, on
    any topic); each trigger is sent when the playback clock reaches it, with /clock standing on it until
    the node has stamped the goal and cut its clip (in lock-step: until its answers are in)."""

    def __init__(self, shared: RunShared, prepared: PreparedBag, label: str, namespace: str) -> None:
        import rclpy

        self.shared, self.options = shared, shared.options
        self.prepared, self.label = prepared, label
        self.shown = namespace  # the namespace users see (/eval<k>, or none)
        self.namespace = namespace = shared.namespace + namespace  # the ROS namespace the node runs under
        out, options, choice, several = shared.out, shared.options, prepared.choice, shared.several
        safe_label = safe_name(label)
        self.work = child(out / "bags", safe_label) if several else out
        self.work.mkdir(parents=True, exist_ok=True)
        media_root = options.media_dir or out / "media"
        self.media = child(media_root, safe_label) if several else media_root
        self.media.mkdir(parents=True, exist_ok=True)
        self.remap = {t: f"{namespace}{t}" for t in choice.topics} if namespace else {}
        remap = self.remap
        self.cameras = [
            NodeCamera(
                name,
                remap.get(topic, topic),
                choice.kind(i) == "compressed",
                remap.get(choice.depths[i], choice.depths[i]),
                remap.get(choice.infos[i], choice.infos[i]) if choice.depths[i] else "",
                remap.get(choice.infos[i], choice.infos[i]),
            )
            for i, (name, topic) in enumerate(
                zip(camera_names(len(choice.cameras)), choice.cameras, strict=True)
            )
        ]
        self.node_fqn = f"{namespace}/{options.node_name}" if namespace else f"/{options.node_name}"
        self.outputs = child(out / "outputs", safe_label) if several else (out / "outputs")
        if options.record and self.outputs.exists():
            raise BagError(f"{self.outputs} exists already; choose a new report folder")
        self.origin_ns = prepared.reader.start_ns  # trigger times count from the recording's start
        self.handle: NodeHandle | None = None
        self.recorder: Recorder | None = None
        self.watch: IngestWatch | None = None
        self.player: Player | None = None
        self.client: Any = None
        self.goals: ReasonGoals | None = None
        self.clip_settings: ClipSettings | None = None
        self.refused: dict[str, dict[str, int]] = {}  # camera topic -> refused frames by kind
        self.ingest_notes: list[str] = []
        self._marks: dict[int, list[tuple[float, TaskSpec]]] = {}  # bag ns -> the goals asked then
        self._next_discovery = 0.0
        self._started = time.monotonic()
        # The helper node's name comes from the namespace (/cosmos_eval_<run id>/eval<k>), never from the
        # bag's name: a folder named as `ros2 bag record` names it (rosbag2_2025_06_01-10_20_30) is no valid
        # ROS name.
        self.node = rclpy.create_node(
            "cosmos_reasoner_bag_evaluate" + namespace.replace("/", "_"), context=shared.context
        )
        with shared.lock:
            shared.executor.add_node(self.node)

    # ------------------------------------------------------------------------------------------- steps

    def run(self) -> tuple[list[ResultRecord], BagRunInfo]:
        try:
            self.start_node()
            self.wait_until_ready()
            stats = self.play()
            return self.collect(stats)
        finally:
            self.close()

    def start_node(self) -> None:
        """The player (and its /clock), the diagnostics watch, then the node: its own process, or as the
        run's `start_node` starts it."""
        from cosmos_reasoner_ros.bag.replay.lockstep import IngestWatch
        from cosmos_reasoner_ros.bag.replay.play import Player, PlayOptions

        options, ns, choice = self.options, self.namespace, self.prepared.choice
        self.player = Player(
            self.node,
            self.prepared.reader,
            PlayOptions(
                rate=options.rate,
                cameras=choice.cameras,
                infos=tuple(t for t in choice.infos if t),
                depths=tuple(t for t in choice.depths if t),
                depth=any(choice.depths),
                remap=self.remap,
                clock_topic=f"{ns}/clock" if ns else "/clock",
                announce=False,
            ),
        )
        until = None if options.until_s is None else self.origin_ns + round(options.until_s * 1e9)
        self.player.bound(self.origin_ns + round(options.start_s * 1e9), until)
        end_s = (self.player.end_ns - self.origin_ns) / 1e9
        for t, spec in schedule(end_s, options.goal_list(), options.start_s):
            self._marks.setdefault(self.origin_ns + round(t * 1e9), []).append((t, spec))
        self.watch = IngestWatch(self.node, f"{ns}/diagnostics" if ns else "/diagnostics")
        if self.shared.start_node is None:
            params_file = options.params_file or default_params_file()
            if ns and params_file is not None:
                params_file = namespaced_params_file(
                    params_file, ns, options.node_name, self.work / "node_params.yaml"
                )
            cmd = node_command(options, self.cameras, self.media, ns, params_file, self.remap)
            self.handle = NodeProcess(cmd, self.work / "node.log")
        else:
            parameters = node_parameters(options, self.cameras, self.media)
            self.handle = self.shared.start_node(
                options.params_file or default_params_file(), parameters, self.work / "node.log"
            )
        self.player.start_clock()  # the node's clock reads the bag's start before its first frame

    def wait_until_ready(self) -> None:
        """The node's action server, its subscriptions to the camera topics and /clock, and its clock at the
        bag's start; its clip parameters; then the recorder (with --record)."""
        from rclpy.action.client import ActionClient

        from cosmos_reasoner_ros.action import Reason
        from cosmos_reasoner_ros.bag.replay.record import Recorder, default_topics

        assert self.player is not None and self.watch is not None and self.handle is not None
        options, player, handle = self.options, self.player, self.handle
        self.client = ActionClient(self.node, Reason, f"{self.node_fqn}/reason")
        deadline = time.monotonic() + options.startup_timeout_s
        while not self.client.wait_for_server(timeout_sec=0.5):
            handle.check_alive()
            if time.monotonic() > deadline:
                raise BagError(
                    f"reasoner_node's action server did not appear within {options.startup_timeout_s} s"
                )
        waits = [(player.publisher(t), f"the camera topic {t}") for t in self.prepared.choice.cameras]
        waits.append((player.clock_publisher, "/clock (use_sim_time)"))
        for publisher, what in waits:
            while publisher.get_subscription_count() == 0:
                handle.check_alive()
                if time.monotonic() > deadline:
                    raise BagError(f"reasoner_node did not subscribe to {what}")
                time.sleep(0.05)
        # Until the node has taken a /clock sample its clock reads 0, and frames stamped in the bag's time are
        # refused as stamped decades ahead: the first frame goes out once the node's own diagnostics carry a
        # stamp in bag time (they tick on the steady clock, stamped with the node's clock).
        self.watch.wait_clock(player.first_ns, max(10.0, deadline - time.monotonic()), handle.check_alive)
        # Our node is up (it subscribed): another one of its name on the domain would take goals too.
        self._only_one_server(f"{self.node_fqn}/reason/_action/send_goal")
        self.clip_settings = self._read_clip_settings()
        if options.record:
            ns, shown = self.namespace, self.shown
            topics = [
                t if t != "/diagnostics" else f"{ns}/diagnostics" for t in default_topics(self.node_fqn)
            ]
            # Recorded under the names users know: /eval<k>/reasoner_node/result, not the run's namespace.
            names = {t: shown + t.removeprefix(ns) for t in topics if ns and t.startswith(ns + "/")}
            self.recorder = Recorder(self.node, self.outputs, topics, clock=player.bag_time_ns, names=names)
            for t in player.topics:
                self.recorder.add_passthrough(t, t, self.prepared.reader.topics[t].msgtype, player.store)
            self.recorder.discover()
        shared = self.shared
        self.goals = ReasonGoals(self.client, shared.gate, lambda: shared.bar.update(1), options.timeout_s)

    def _only_one_server(self, service: str) -> None:
        """Refuse to replay beside another node of the same name on this ROS domain: it would accept some of
        the goals too (the client takes the first reply), and their results would never come (stop 34's CI:
        a node left running by another session, 'more than one action server', a replay waiting 300 s)."""
        servers = self.node.count_services(service)
        if servers > 1:
            domain = os.environ.get("ROS_DOMAIN_ID", "0")
            raise BagError(
                f"{servers} servers of {service} on ROS domain {domain}: another {self.node_fqn} runs there; "
                "stop it, or replay on another ROS_DOMAIN_ID"
            )

    def play(self) -> Any:
        """The bag played (from --start to --until, and no further than its last trigger), each trigger's
        goals sent when the playback clock reaches its bag time (also inside a gap of the recording and after
        its last message); every answer awaited; then what the node says it refused of the frames it was
        sent."""
        assert self.player is not None and self.goals is not None
        self._next_discovery = time.monotonic() + 1.0
        stats = self.player.run(
            before_publish=self._before_publish,
            after_publish=self._after_publish,
            marks=sorted(self._marks),
            at_mark=self._at_mark,
            stop_after_marks=True,  # nothing after the last trigger is asked for: the replay ends there
        )
        for mark in sorted(self._marks):  # none normally: the player reached every mark
            self._at_mark(mark)
        self.goals.wait_all(self.options.timeout_s)
        self._read_refusals()
        if self.recorder is not None:
            time.sleep(0.5)  # the result topic's last samples, published just before the action results
            self.recorder.close()
        return stats

    def collect(self, stats: Any) -> tuple[list[ResultRecord], BagRunInfo]:
        """One record per goal (a goal without a result: `timeout`, or `internal` when it ended without one)
        with what its clip and its bag lost, and what the replay took."""
        assert self.goals is not None and self.player is not None
        choice, integrity = self.prepared.choice, self.prepared.integrity
        identity = bag_id(integrity, choice.cameras)
        records = []
        for p in self.goals.items:
            if p.result is not None:
                record = record_from_msg(p.result, p.trigger_s, bag=self.label, step=p.spec.step)
            else:
                record = ResultRecord(
                    task=p.spec.task,
                    instruction=p.spec.instruction,
                    step=p.spec.step,
                    trigger_s=p.trigger_s,
                    error_kind="internal" if p.done.is_set() else "timeout",
                    error=p.error or "no result within the timeout",
                    bag=self.label,
                )
            records.append(replace(record, bag_id=identity))
        choice = self.prepared.choice
        records = with_losses(
            records,
            ReplayFacts(
                self.prepared.reader,
                integrity,
                self.origin_ns,
                choice.cameras,
                tuple(choice.kind(i) for i in range(len(choice.cameras))),
                tuple(c.name for c in self.cameras),
                self.clip_settings,
                self.refused,
                exact=self.options.lock_step,
            ),
        )
        first_camera = self.remap.get(choice.cameras[0], choice.cameras[0])
        info = BagRunInfo(
            self.label,
            self.prepared.reader.path,
            time.monotonic() - self._started,
            len(records),
            stats.per_topic.get(first_camera, 0),
            self.options.lock_step,
            choice.cameras,
            self.origin_ns,
            tuple(integrity.notes) + tuple(self.ingest_notes),
            choice.infos,
        )
        return records, info

    def close(self) -> None:
        """Stop whatever was started, the node first (it may still be sending), the helper node last."""
        if self.recorder is not None:
            self.recorder.close()
        if self.handle is not None:
            self.handle.stop()
        if self.watch is not None:
            self.watch.close()
        if self.player is not None:
            self.player.close()
        with self.shared.lock:
            self.shared.executor.remove_node(self.node)
        self.node.destroy_node()

    # ------------------------------------------------------------------------------- what was lost

    def _read_clip_settings(self) -> ClipSettings | None:
        """clip_seconds, sample_fps and buffer_seconds of the running node (its parameter service); None
        when it does not answer within a few seconds (clips are then not checked for missing frames)."""
        from rcl_interfaces.srv import GetParameters
        from rclpy.parameter import parameter_value_to_python

        names = ["clip_seconds", "sample_fps", "buffer_seconds"]
        client: Any = self.node.create_client(GetParameters, f"{self.node_fqn}/get_parameters")
        try:
            if not client.wait_for_service(timeout_sec=5.0):
                return None
            future = client.call_async(GetParameters.Request(names=names))
            done = threading.Event()
            future.add_done_callback(lambda _: done.set())
            response: Any = future.result() if done.wait(5.0) else None
            if response is None:
                return None
            raw: list[Any] = [parameter_value_to_python(v) for v in response.values]
            values = [float(v) for v in raw]
        except (TypeError, ValueError):  # a parameter of another type: not this node's schema
            return None
        finally:
            self.node.destroy_client(client)
        if len(values) != 3 or not all(v > 0 for v in values):
            return None
        return ClipSettings(*values)

    def _read_refusals(self) -> None:
        """The frames of each camera the node refused, once its diagnostics account for every frame sent."""
        assert self.watch is not None and self.player is not None
        for i, camera in enumerate(self.cameras):
            topic = self.prepared.choice.cameras[i]
            try:
                self.watch.wait(camera.topic, self._sent(i), 10.0, self._alive)
            except BagError:
                handled, sent = self.watch.handled(camera.topic), self._sent(i)
                self.ingest_notes.append(f"the node accounted for {handled} of the {sent} frames of {topic}")
            refused = self.watch.refused(camera.topic)
            if refused:
                self.refused[topic] = refused

    # --------------------------------------------------------------------------------- player's hooks

    def _sent(self, i: int) -> int:
        assert self.player is not None
        return self.player.sent.get(self.prepared.choice.cameras[i], 0)

    def _alive(self) -> None:
        assert self.handle is not None
        self.handle.check_alive()

    def _at_mark(self, mark: int) -> None:
        """The playback clock stands on a trigger's bag time: send its goals and wait until the node has
        taken them (and, in lock-step, first until it has taken in every frame sent and its clock shows the
        trigger's time, afterwards until the answers are in)."""
        assert self.goals is not None and self.player is not None and self.watch is not None
        due = self._marks.pop(mark, [])
        if not due:
            return
        options = self.options
        if options.lock_step:
            for i, camera in enumerate(self.cameras):
                self.watch.wait(camera.topic, self._sent(i), options.timeout_s, self._alive)
            self.player.wait_acked(2.0)  # depth and CameraInfo: reliable, delivered before the request
            self.watch.wait_clock(max(mark, self.player.first_ns), options.timeout_s, self._alive)
        sent = []
        for t, spec in due:
            sent.append(self.goals.send(spec, t))
            self.shared.bar.set_postfix(bag=self.label, bag_s=f"{t:.1f}")
        if options.lock_step:
            self.goals.wait_all(options.timeout_s)
        else:
            # The clock stands still until the node has stamped the goals and cut their clips: a busy node
            # takes them at their bag time, not seconds of playback later (up to 3 s were seen).
            self.goals.wait_captured(sent, min(options.timeout_s, 30.0))

    def _before_publish(self, bag_ns: int) -> None:
        self._alive()
        if self.recorder is not None and time.monotonic() > self._next_discovery:
            self.recorder.discover()  # topics the node creates late (none today; cheap insurance)
            self._next_discovery = time.monotonic() + 1.0

    def _after_publish(self, topic: str, bag_ns: int, data: bytes) -> None:
        if self.recorder is not None:
            self.recorder.write_passthrough(topic, bag_ns, data)
        cameras = self.prepared.choice.cameras
        if topic not in cameras or not self.options.lock_step or self.watch is None:
            return
        i = cameras.index(topic)
        node_topic = self.cameras[i].topic
        behind = self._sent(i) - self.watch.handled(node_topic)
        if behind >= _LOCKSTEP_CREDIT:
            self.watch.wait(
                node_topic, self._sent(i) - _LOCKSTEP_CREDIT // 2, self.options.timeout_s, self._alive
            )
