"""`cosmos-reasoner-bag evaluate`: replays bags into `reasoner_node` (a child process per bag), sends Reason
goals at bag times and collects one ResultRecord per goal; or reads ReasonerResults recorded earlier.

Timing modes: by default the bag plays with its recorded timing and requests run beside it, as on a robot.
In lock-step the player waits, before each trigger, until the node has handled every frame published so far
(lockstep.IngestWatch), and stands still while the trigger's requests are in flight: each request then sees
the same frames on any machine, at any playback rate. `in_flight` bounds the requests in flight over the run;
several bags are then replayed at once (up to that many), each into its own node under its own namespace.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.integrity import Integrity, check_bag
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.files.topics import CameraTopics, choose_topics
from cosmos_reasoner_ros.bag.records import ResultRecord, record_from_msg
from cosmos_reasoner_ros.bag.replay.node_process import (
    NodeCamera,
    NodeHandle,
    NodeProcess,
    NodeStarter,
    camera_names,
    check_params_file,
    default_params_file,
    namespaced_params_file,
    node_command,
    node_parameters,
)
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, bag_label, schedule
from cosmos_reasoner_ros.bag.replay.reason_goals import ReasonGoals
from cosmos_reasoner_ros.bag.safe_paths import child, safe_name

__all__ = ["BagRunInfo", "bag_id", "evaluate_bags", "prepare_bag", "read_recorded"]


# ------------------------------------------------------------------------------------------- one bag


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
    first_ns: int = 0  # the replay's time 0: its first message (trigger times count from it)
    notes: tuple[str, ...] = ()  # what could not be checked in the bag


@dataclass
class _Shared:
    """What the bags of one run share: the rclpy context, the request bound, the progress bar."""

    context: Any
    executor: Any
    gate: Any
    bar: Any
    options: EvalOptions
    out: Path
    start_node: NodeStarter | None
    lock: threading.Lock = field(default_factory=threading.Lock)


# Image messages the player may publish beyond those the node has handled, in lock-step: below the node's
# reliable keep-last depth (10), so that no frame is ever overwritten in its subscription queue.
_LOCKSTEP_CREDIT = 8


def bag_id(integrity: Integrity, cameras: Sequence[str]) -> str:
    """A short fingerprint of a recording's replayed camera topics: their names, message counts and time
    spans. A baseline made from another recording under the same name differs in it."""
    import hashlib

    parts = [f"{c}:{integrity.counts.get(c, 0)}:{integrity.spans.get(c, (0, 0))}" for c in cameras]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def prepare_bag(bag: Path, options: EvalOptions) -> tuple[BagReader, CameraTopics, Integrity]:
    """The bag opened, its topics chosen and the bag checked whole: what must hold before any node starts."""
    reader = BagReader(bag)
    try:
        choice = choose_topics(reader, options.cameras, options.infos, options.depths, options.depth)
        if options.verbose:
            for line in choice.chosen:
                print(f"cosmos-reasoner-bag: {reader.name}: {line}", file=sys.stderr)
        integrity = check_bag(reader, choice.topics, warn=options.verbose)
        if not any(integrity.counts.get(t, 0) for t in choice.cameras):
            raise BagError(f"bag {bag} has no messages on {', '.join(choice.cameras)}: nothing to replay")
    except BaseException:
        reader.close()
        raise
    return reader, choice, integrity


def _run_bag(
    shared: _Shared, prepared: tuple[BagReader, CameraTopics, Integrity], label: str, namespace: str
) -> tuple[list[ResultRecord], BagRunInfo]:
    import rclpy
    from rclpy.action.client import ActionClient

    from cosmos_reasoner_ros.action import Reason
    from cosmos_reasoner_ros.bag.replay.lockstep import IngestWatch
    from cosmos_reasoner_ros.bag.replay.play import Player, PlayOptions
    from cosmos_reasoner_ros.bag.replay.record import Recorder, default_topics

    options, out = shared.options, shared.out
    reader, choice, integrity = prepared
    safe_label = safe_name(label)
    work = child(out / "bags", safe_label) if namespace else out
    work.mkdir(parents=True, exist_ok=True)
    media_root = options.media_dir or out / "media"
    media = child(media_root, safe_label) if namespace else media_root
    media.mkdir(parents=True, exist_ok=True)
    remap = {t: f"{namespace}{t}" for t in choice.topics} if namespace else {}
    cameras = [
        NodeCamera(
            name,
            remap.get(topic, topic),
            choice.kind(i) == "compressed",
            remap.get(choice.depths[i], choice.depths[i]),
            remap.get(choice.infos[i], choice.infos[i]) if choice.depths[i] else "",
        )
        for i, (name, topic) in enumerate(zip(camera_names(len(choice.cameras)), choice.cameras, strict=True))
    ]
    node_fqn = f"{namespace}/{options.node_name}" if namespace else f"/{options.node_name}"
    outputs = child(out / "outputs", safe_label) if namespace else (out / "outputs")
    if options.record and outputs.exists():
        raise BagError(f"{outputs} exists already; choose a new report folder")
    node = rclpy.create_node(
        f"cosmos_reasoner_bag_evaluate_{safe_label}"[:60].rstrip("_"), context=shared.context
    )
    with shared.lock:
        shared.executor.add_node(node)
    handle: NodeHandle | None = None
    recorder: Recorder | None = None
    watch: IngestWatch | None = None
    player: Player | None = None
    started = time.monotonic()
    try:
        player = Player(
            node,
            reader,
            PlayOptions(
                rate=options.rate,
                cameras=choice.cameras,
                infos=tuple(t for t in choice.infos if t),
                depths=tuple(t for t in choice.depths if t),
                depth=any(choice.depths),
                remap=remap,
                clock_topic=f"{namespace}/clock" if namespace else "/clock",
                announce=False,
            ),
        )
        plan = schedule(player.span_s, options.goal_list())
        watch = IngestWatch(node, f"{namespace}/diagnostics" if namespace else "/diagnostics")
        if shared.start_node is None:
            params_file = options.params_file or default_params_file()
            if namespace and params_file is not None:
                params_file = namespaced_params_file(
                    params_file, namespace, options.node_name, work / "params.yaml"
                )
            cmd = node_command(options, cameras, media, namespace, params_file)
            handle = NodeProcess(cmd, work / "node.log")
        else:
            parameters = node_parameters(options, cameras, media)
            handle = shared.start_node(
                options.params_file or default_params_file(), parameters, work / "node.log"
            )
        player.start_clock()  # the node's clock reads the bag's start before its first frame
        client: ActionClient = ActionClient(node, Reason, f"{node_fqn}/reason")
        deadline = time.monotonic() + options.startup_timeout_s
        while not client.wait_for_server(timeout_sec=0.5):
            handle.check_alive()
            if time.monotonic() > deadline:
                raise BagError(
                    f"reasoner_node's action server did not appear within {options.startup_timeout_s} s"
                )
        waits = [(player.publisher(t), f"the camera topic {t}") for t in choice.cameras]
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
        watch.wait_clock(player.first_ns, max(10.0, deadline - time.monotonic()), handle.check_alive)
        if options.record:
            topics = [
                t if t != "/diagnostics" else f"{namespace}/diagnostics" for t in default_topics(node_fqn)
            ]
            recorder = Recorder(node, outputs, topics, clock=player.bag_time_ns)
            for t in player.topics:
                recorder.add_passthrough(t, t, reader.topics[t].msgtype, player.store)
            recorder.discover()

        goals = ReasonGoals(client, shared.gate, lambda: shared.bar.update(1), options.timeout_s)
        queue = list(plan)
        node_topics = [c.topic for c in cameras]
        alive = handle.check_alive
        next_discovery = [time.monotonic() + 1.0]

        def sent(i: int) -> int:
            assert player is not None
            return player.sent.get(choice.cameras[i], 0)

        def fire(upto_s: float | None) -> None:
            due = [item for item in queue if upto_s is None or item[0] < upto_s - 1e-9]
            if not due:
                return
            if options.lock_step:
                assert watch is not None and player is not None
                for i, topic in enumerate(node_topics):
                    watch.wait(topic, sent(i), options.timeout_s, alive)
                player.wait_acked(2.0)  # depth and CameraInfo: reliable, delivered before the request
            for item in due:
                queue.remove(item)
                goals.send(item[1], item[0])
                shared.bar.set_postfix(bag=label, bag_s=f"{item[0]:.1f}")
            if options.lock_step:
                goals.wait_all(options.timeout_s)

        def before_publish(bag_ns: int) -> None:
            # A trigger fires once every message stamped before it has gone out.
            assert player is not None
            fire((bag_ns - player.first_ns) / 1e9)
            alive()
            if recorder is not None and time.monotonic() > next_discovery[0]:
                recorder.discover()  # topics the node creates late (none today; cheap insurance)
                next_discovery[0] = time.monotonic() + 1.0

        def after_publish(topic: str, bag_ns: int, data: bytes) -> None:
            if recorder is not None:
                recorder.write_passthrough(topic, bag_ns, data)
            if topic not in choice.cameras or not options.lock_step or watch is None:
                return
            i = choice.cameras.index(topic)
            behind = sent(i) - watch.handled(node_topics[i])
            if behind >= _LOCKSTEP_CREDIT:
                watch.wait(node_topics[i], sent(i) - _LOCKSTEP_CREDIT // 2, options.timeout_s, alive)

        stats = player.run(before_publish=before_publish, after_publish=after_publish)
        fire(None)  # triggers at the very end of the bag
        goals.wait_all(options.timeout_s)
        if recorder is not None:
            time.sleep(0.5)  # the result topic's last samples, published just before the action results
            recorder.close()
        identity = bag_id(integrity, choice.cameras)
        records = []
        for p in goals.items:
            if p.result is not None:
                record = record_from_msg(p.result, p.trigger_s, bag=label, step=p.spec.step)
            else:
                record = ResultRecord(
                    task=p.spec.task,
                    instruction=p.spec.instruction,
                    step=p.spec.step,
                    trigger_s=p.trigger_s,
                    error_kind="internal" if p.done.is_set() else "timeout",
                    error=p.error or "no result within the timeout",
                    bag=label,
                )
            records.append(replace(record, bag_id=identity))
        info_ = BagRunInfo(
            label,
            reader.path,
            time.monotonic() - started,
            len(records),
            stats.per_topic.get(remap.get(choice.cameras[0], choice.cameras[0]), 0),
            options.lock_step,
            choice.cameras,
            player.first_ns,
            tuple(integrity.notes),
        )
        return records, info_
    finally:
        if recorder is not None:
            recorder.close()
        if handle is not None:
            handle.stop()
        if watch is not None:
            watch.close()
        if player is not None:
            player.close()
        with shared.lock:
            shared.executor.remove_node(node)
        node.destroy_node()


@contextmanager
def _ros() -> Iterator[tuple[Any, Any]]:
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import MultiThreadedExecutor

    context = Context()
    rclpy.init(context=context)
    executor = MultiThreadedExecutor(num_threads=2, context=context)
    stop = threading.Event()
    failures: list[BaseException] = []

    def spin() -> None:
        # spin_once in a loop rather than spin(): a failing callback is kept and reported, and does not end
        # the spinning (every bag's results arrive through this executor).
        while not stop.is_set() and context.ok():
            try:
                executor.spin_once(timeout_sec=0.1)
            except Exception as exc:
                failures.append(exc)
                print(f"cosmos-reasoner-bag: a callback failed: {exc!r}", file=sys.stderr)

    spinner = threading.Thread(target=spin, daemon=True, name="evaluate-executor")
    spinner.start()
    try:
        yield context, executor
    finally:
        stop.set()
        spinner.join(timeout=5)
        executor.shutdown()
        if context.ok():
            rclpy.shutdown(context=context)


def evaluate_bags(
    bags: Sequence[Path],
    out: Path,
    options: EvalOptions = EvalOptions(),
    start_node: NodeStarter | None = None,
) -> tuple[list[ResultRecord], list[BagRunInfo]]:
    """Replay each bag into a fresh reasoner_node and collect one record per goal, in the bags' order.

    Every bag is opened, its topics chosen and checked whole, and every trigger time checked, before any node
    starts. With `options.in_flight` N > 1 (and no `start_node`), up to N bags play at once, each into its own
    node under the namespace /eval<k>. start_node: how the node starts (e.g. `ros2 launch`); then bags play
    one at a time under the bag's own topic names. None: `python -m cosmos_reasoner_ros.node` here."""
    from tqdm import tqdm

    from cosmos_reasoner_ros.bag.replay.lockstep import RequestGate

    if not bags:
        raise BagError("no bag to evaluate")
    if not options.rate > 0:
        raise BagError(f"rate must be > 0, got {options.rate}")
    if options.params_file is not None:
        check_params_file(options.params_file)
    labels = [bag_label(b) for b in bags]
    prepared: list[tuple[BagReader, CameraTopics, Integrity]] = []
    try:
        total = 0
        for bag in bags:
            prepared.append(prepare_bag(bag, options))
            _, choice, integrity = prepared[-1]
            first = min(integrity.spans[t][0] for t in choice.topics if t in integrity.spans)
            last = max(integrity.spans[t][1] for t in choice.topics if t in integrity.spans)
            total += len(schedule((last - first) / 1e9, options.goal_list()))
        out.mkdir(parents=True, exist_ok=True)
        concurrent = 1 if start_node is not None else max(1, min(options.in_flight, len(bags)))
        namespaced = start_node is None and len(bags) > 1
        bar = tqdm(total=total, unit="req", desc="evaluate", disable=not options.progress, file=sys.stderr)
        results: dict[int, tuple[list[ResultRecord], BagRunInfo]] = {}
        try:
            with _ros() as (context, executor):
                shared = _Shared(
                    context, executor, RequestGate(options.in_flight), bar, options, out, start_node
                )

                def one(i: int) -> None:
                    results[i] = _run_bag(
                        shared, prepared[i], labels[i], f"/eval{i + 1}" if namespaced else ""
                    )

                if concurrent == 1:
                    for i in range(len(bags)):
                        one(i)
                else:
                    with ThreadPoolExecutor(
                        max_workers=concurrent, thread_name_prefix="evaluate-bag"
                    ) as pool:
                        for future in [pool.submit(one, i) for i in range(len(bags))]:
                            future.result()
        finally:
            bar.close()
    finally:
        for reader, _, _ in prepared:
            reader.close()
    records = [r for i in range(len(bags)) for r in results[i][0]]
    return records, [results[i][1] for i in range(len(bags))]


# ------------------------------------------------------------------------------------------- recorded


def read_recorded(results_bag: Path) -> list[ResultRecord]:
    """ReasonerResult messages of a recorded bag (every topic of that type), as records; the trigger time is
    the message's time in that bag from its first message."""
    with BagReader(results_bag) as reader:
        topics = [
            t.name for t in reader.topics.values() if t.msgtype == "cosmos_reasoner_ros/msg/ReasonerResult"
        ]
        if not topics:
            raise BagError(
                f"bag {results_bag} has no ReasonerResult topic; it has: {reader.describe_topics()}"
            )
        check_bag(reader, topics)
        store, _ = reader.typestore(topics)  # the recording distribution's types
        start = reader.start_ns
        return [
            record_from_msg(store.deserialize_cdr(m.data, m.msgtype), (m.log_ns - start) / 1e9)
            for m in reader.messages(topics)
        ]
