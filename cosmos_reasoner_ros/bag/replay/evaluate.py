"""`cosmos-reasoner-bag evaluate`'s replay: every bag prepared (opened, topics chosen, checked whole) before
any node starts, then each replayed into a `reasoner_node` of its own (bag_run.BagRun), one ResultRecord per
goal; or ReasonerResults recorded earlier read back.

Each run's nodes, the topics it plays and its /clock live under a namespace of the run's own
(/cosmos_eval_<run id>): a node of a previous run still in discovery, or of a run beside it on the same ROS
domain, never takes its goals nor hears its frames. `in_flight` bounds the requests in flight over the run;
several bags are then replayed at once (up to that many), each into its own node under /eval<k> in the run's
namespace. Records, the report and recorded outputs name topics without the run's namespace. Lock-step
(bag_run) makes each request see the same frames on any machine, at any playback rate.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.integrity import check_bag
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.files.topics import choose_topics
from cosmos_reasoner_ros.bag.records import ResultRecord, record_from_msg
from cosmos_reasoner_ros.bag.replay.bag_run import BagRun, BagRunInfo, PreparedBag, RunShared, run_namespace
from cosmos_reasoner_ros.bag.replay.node_process import NodeStarter, check_parameters, check_params_file
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, bag_label, schedule
from cosmos_reasoner_ros.bag.replay.reachability import check_server
from cosmos_reasoner_ros.bag.safe_paths import printable

__all__ = ["evaluate_bags", "prepare_bag", "read_recorded"]


def prepare_bag(bag: Path, options: EvalOptions) -> PreparedBag:
    """The bag opened, its topics chosen and the bag checked whole: what must hold before any node starts."""
    reader = BagReader(bag)
    try:
        choice = choose_topics(reader, options.cameras, options.infos, options.depths, options.depth)
        if options.verbose:
            for line in choice.chosen:
                print(f"cosmos-reasoner-bag: {reader.name}: {line}", file=sys.stderr)
        integrity = check_bag(reader, choice.topics, warn=options.verbose)
        from cosmos_reasoner_ros.bag.replay.play import topic_name_problem

        if named := [p for t in choice.topics if (p := topic_name_problem(t))]:
            raise BagError(f"bag {bag}: " + "; ".join(named))
        if foreign := {t: why for t, why in integrity.foreign.items() if t in choice.topics}:
            raise BagError(
                "; ".join(f"bag {bag}: topic {t} cannot be replayed: {w}" for t, w in foreign.items())
            )
        if not any(integrity.counts.get(t, 0) for t in choice.cameras):
            raise BagError(f"bag {bag} has no messages on {', '.join(choice.cameras)}: nothing to replay")
    except BaseException:
        reader.close()
        raise
    return PreparedBag(reader, choice, integrity)


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
    starts. Each node runs under the run's own namespace (run_namespace), the bag's topics and /clock played
    there. With `options.in_flight` N > 1 (and no `start_node`), up to N bags play at once, each into its own
    node under /eval<k> in it. start_node: how the node starts (e.g. `ros2 launch`); then bags play one at a
    time under the bag's own topic names, into /reasoner_node. None: `python -m cosmos_reasoner_ros.node`
    here."""
    _check_run(bags, out, options)
    labels = [bag_label(b) for b in bags]
    prepared: list[PreparedBag] = []
    try:
        total = _prepare(bags, options, prepared)
        if start_node is None:  # one readiness request (within wait_for_server_s) before any node starts
            check_server(options)
        # A starter (the demo's `ros2 launch`) may start the server itself, beside the node: the node's own
        # readiness wait covers it (the demo failed here: its vLLM was not up 10 s before the launch began).
        out.mkdir(parents=True, exist_ok=True)
        results = _run_bags(prepared, labels, out, options, start_node, total)
    finally:
        for one_bag in prepared:
            one_bag.reader.close()
    records = [r for i in range(len(bags)) for r in results[i][0]]
    return records, [results[i][1] for i in range(len(bags))]


def _check_run(bags: Sequence[Path], out: Path, options: EvalOptions) -> None:
    """What is refused before any bag is opened: no bag, the rate, the parameters, the media folder."""
    if not bags:
        raise BagError("no bag to evaluate")
    if not options.rate > 0:
        raise BagError(f"rate must be > 0, got {options.rate}")
    if options.params_file is not None:
        check_params_file(options.params_file)
    check_parameters(options.params)
    media_root = options.media_dir or out / "media"
    if printable(str(media_root)) != str(media_root):  # it goes to the node as a ROS parameter: UTF-8 text
        raise BagError(
            f"the media folder {printable(str(media_root))} is not UTF-8 text, which a ROS parameter must "
            "be: choose another report folder (-o) or --media-dir"
        )


def _prepare(bags: Sequence[Path], options: EvalOptions, prepared: list[PreparedBag]) -> int:
    """Each bag opened, its topics chosen and checked whole, into `prepared` (the caller closes them, also
    when one fails); the number of requests the run will make."""
    total = 0
    for bag in bags:
        prepared.append(prepare_bag(bag, options))
        ready = prepared[-1]
        spans = ready.integrity.spans
        # Trigger times count from the recording's start (its first message, on any topic), up to the
        # last replayed message: every time is checked here, before any node starts.
        last = max(spans[t][1] for t in ready.choice.topics if t in spans)
        end_s = options.end_s((last - ready.reader.start_ns) / 1e9)
        total += len(schedule(end_s, options.goal_list(), options.start_s))
    return total


def _run_bags(
    prepared: Sequence[PreparedBag],
    labels: Sequence[str],
    out: Path,
    options: EvalOptions,
    start_node: NodeStarter | None,
    total: int,
) -> dict[int, tuple[list[ResultRecord], BagRunInfo]]:
    """Each prepared bag replayed into its node (up to in_flight at once), by its index."""
    from tqdm import tqdm

    from cosmos_reasoner_ros.bag.replay.lockstep import RequestGate

    count = len(prepared)
    concurrent = 1 if start_node is not None else max(1, min(options.in_flight, count))
    namespaced = start_node is None and count > 1
    bar = tqdm(total=total, unit="req", desc="evaluate", disable=not options.progress, file=sys.stderr)
    results: dict[int, tuple[list[ResultRecord], BagRunInfo]] = {}
    try:
        with _ros() as (context, executor):
            shared = RunShared(
                context,
                executor,
                RequestGate(options.in_flight),
                bar,
                options,
                out,
                start_node,
                namespace="" if start_node is not None else run_namespace(),
                several=count > 1,
            )

            def one(i: int) -> None:
                namespace = f"/eval{i + 1}" if namespaced else ""
                results[i] = BagRun(shared, prepared[i], labels[i], namespace).run()

            if concurrent == 1:
                for i in range(count):
                    one(i)
            else:
                with ThreadPoolExecutor(max_workers=concurrent, thread_name_prefix="evaluate-bag") as pool:
                    for future in [pool.submit(one, i) for i in range(count)]:
                        future.result()
    finally:
        bar.close()
    return results


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
