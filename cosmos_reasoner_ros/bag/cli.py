"""`cosmos-reasoner-bag`: the command line of the bag tools (make, play, record, evaluate, report). Bad input
(missing topics, unknown storage, a damaged bag) prints one clear line and exits with code 2."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.errors import ReasonerError


def _add_make(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("make", help="video files or image folders to a bag of camera images")
    p.add_argument("sources", nargs="+", type=Path, help="video files, image files or folders of images")
    p.add_argument("-o", "--output", type=Path, required=True, help="new bag directory")
    p.add_argument("--storage", default="mcap", help="mcap (default) or sqlite3")
    p.add_argument("--rate", type=float, default=0.0, help="[Hz] output rate; 0: the source's own frames")
    p.add_argument("--encoding", default="rgb8", help="rgb8, bgr8 (Image) or jpeg (CompressedImage)")
    p.add_argument("--jpeg-quality", type=int, default=90)
    p.add_argument("--topic", default="/camera/image_raw", help="image topic (jpeg: + /compressed)")
    p.add_argument("--info-topic", default="/camera/camera_info", help="CameraInfo topic; '' for none")
    p.add_argument("--frame-id", default="camera_optical_frame")
    p.add_argument("--fov", type=float, default=60.0, help="[deg] horizontal field of view of CameraInfo")
    p.add_argument("--depth", default="none", help="synthetic depth: none, plane or gradient")
    p.add_argument("--depth-encoding", default="16UC1", help="16UC1 [mm] or 32FC1 [m]")
    p.add_argument("--depth-topic", default="/camera/depth/image_raw")
    p.add_argument("--depth-m", type=float, default=1.5, help="[m] plane distance / gradient middle")
    p.add_argument("--image-fps", type=float, default=10.0, help="[Hz] frame rate of image folders")
    p.add_argument("--max-long-side", type=int, default=0, help="[px] downscale; 0: keep the size")
    p.add_argument(
        "--start",
        type=float,
        default=None,
        help="[s since the epoch] the first frame's stamp (default: now); replays run on the bag's clock",
    )


def _add_play(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("play", help="publish a bag through rclpy with its recorded timing")
    p.add_argument("bag", type=Path)
    p.add_argument("--rate", type=float, default=1.0, help="speed factor")
    p.add_argument("--loop", action="store_true", help="play until interrupted")
    p.add_argument("--loops", type=int, default=1, help="number of passes (--loop: endless)")
    p.add_argument("--start-offset", type=float, default=0.0, help="[s] skip the bag's first seconds")
    _add_topics(p)
    p.add_argument(
        "--topics",
        nargs="*",
        default=[],
        help="further bag topics to play (alone, without --camera-topic: only these)",
    )
    p.add_argument(
        "--all-topics",
        action="store_true",
        help="play every topic whose message type rclpy has (the others are named and left out)",
    )
    p.add_argument("--no-clock", action="store_true", help="do not publish /clock in the bag's time")
    p.add_argument("--remap", nargs="*", default=[], metavar="OLD:=NEW")
    p.add_argument("--qos", default="reliable", help="reliable (default), sensor_data or transient_local")
    p.add_argument("--qos-depth", type=int, default=10)
    p.add_argument(
        "--topic-qos", nargs="*", default=[], metavar="TOPIC=QOS", help="per-topic QoS (bag topic)"
    )
    p.add_argument(
        "--wait-for-subscribers",
        type=float,
        default=0.0,
        metavar="S",
        help="[s] wait for a subscriber on every topic before starting",
    )
    p.add_argument(
        "--drain",
        type=float,
        default=5.0,
        metavar="S",
        help="[s] after the last message, wait this long for reliable subscribers to acknowledge everything",
    )
    p.add_argument("--stats", type=Path, help="write the lag statistics (JSON) here")


def _add_record(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("record", help="record the node's output topics into an mcap bag")
    p.add_argument("-o", "--output", type=Path, required=True, help="new bag directory")
    p.add_argument(
        "--topics",
        nargs="*",
        default=[],
        help="topics to record besides the defaults: the node's result, next_action, annotated_image, "
        "trajectory, markers and /diagnostics",
    )
    p.add_argument("--no-default-topics", action="store_true", help="record only the --topics given")
    p.add_argument("--node-name", default="reasoner_node", help="name of the node whose outputs to record")
    p.add_argument("--duration", type=float, default=0.0, help="[s] stop after this long; 0: until Ctrl-C")
    p.add_argument("--storage", default="mcap")


def _add_checks(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--baseline", type=Path, help="previous results to compare with (results.jsonl or its folder)"
    )
    p.add_argument("--tolerances", type=Path, help="YAML overriding the shipped config/tolerances.yaml")
    p.add_argument(
        "--junit", type=Path, metavar="FILE", help="write JUnit XML (a test case per request and check)"
    )


def _add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server-url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--timeout", type=float, default=120.0, help="[s] to wait for outstanding answers")
    p.add_argument("--image-format", default="jpg", choices=["jpg", "png"])
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--record",
        action="store_true",
        help="also record the camera and the node's outputs into OUTPUT/outputs",
    )
    p.add_argument(
        "--media-dir",
        type=Path,
        help="where the node writes clips (the server must read it); default OUTPUT/media",
    )


def _add_evaluate(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("evaluate", help="replay bags into reasoner_node, trigger tasks, judge and report")
    p.add_argument(
        "bags", type=Path, nargs="*", help="camera bags or folders of bags (with --results: the frames)"
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="report folder")
    p.add_argument("--results", type=Path, help="build the report from ReasonerResults recorded in this bag")
    p.add_argument(
        "--task",
        action="append",
        default=[],
        metavar="NAME[:INSTRUCTION[|STEP]]",
        help="task to trigger (repeatable; default next_action)",
    )
    p.add_argument("--period", type=float, default=2.0, help="[s of bag time] trigger period")
    p.add_argument("--at", default="", help="comma-separated trigger times [s from the bag's start]")
    _add_topics(p)
    p.add_argument("--params-file", type=Path, help="node parameters (default: the shipped reasoner.yaml)")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME:=VALUE")
    p.add_argument("--rate", type=float, default=1.0, help="playback speed factor")
    p.add_argument(
        "--lock-step",
        "--wait",
        dest="lock_step",
        action="store_true",
        help="playback waits until the node has taken in every frame before a trigger and stands still while "
        "its requests are in flight: the same clip windows on any machine",
    )
    p.add_argument(
        "--in-flight",
        type=int,
        default=0,
        metavar="N",
        help="at most N requests in flight; several bags then play at once, each into its own node "
        "(0: no bound)",
    )
    p.add_argument("--title", default="")
    _add_run(p)
    _add_checks(p)


def _add_scenario(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "scenario", help="run scenario files (or folders of them): bags, goals, tolerances, sweeps"
    )
    p.add_argument("scenarios", type=Path, nargs="+", help="scenario YAML files or folders of them")
    p.add_argument(
        "-o", "--output", type=Path, required=True, help="output folder (a sub-folder per scenario)"
    )
    p.add_argument("--params-file", type=Path, help="node parameters for scenarios that name none")
    _add_run(p)
    p.add_argument("--baseline", type=Path, help="a previous output folder of the same scenarios")
    p.add_argument(
        "--tolerances", type=Path, help="YAML overriding the shipped tolerances (before a scenario's own)"
    )
    p.add_argument(
        "--junit", type=Path, metavar="FILE", help="write JUnit XML (a test suite per scenario run)"
    )


def _add_report(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="HTML page and plots from a results.jsonl")
    p.add_argument("results", type=Path, help="JSONL, one result record per line")
    p.add_argument("-o", "--output", type=Path, help="report folder (default: the results file's folder)")
    p.add_argument("--title", default="Cosmos Reasoner evaluation")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cosmos-reasoner-bag", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_make, _add_play, _add_record, _add_evaluate, _add_scenario, _add_report):
        add(sub)
    return parser


def _make(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag

    made = make_bag(
        args.sources,
        args.output,
        MakeOptions(
            rate_hz=args.rate,
            encoding=args.encoding,
            jpeg_quality=args.jpeg_quality,
            image_topic=args.topic,
            info_topic=args.info_topic,
            frame_id=args.frame_id,
            fov_deg=args.fov,
            depth=args.depth,
            depth_encoding=args.depth_encoding,
            depth_topic=args.depth_topic,
            depth_m=args.depth_m,
            image_fps=args.image_fps,
            max_long_side=args.max_long_side,
            start_ns=None if args.start is None else _start_ns(args.start),
            storage=args.storage,
        ),
    )
    print(
        f"wrote {made.path}: {made.frames} frames {made.width}x{made.height} over {made.duration_s:.2f} s; "
        + ", ".join(f"{t} {n}" for t, n in made.topics.items())
    )
    return 0


def _start_ns(seconds: float) -> int:
    import math

    if not math.isfinite(seconds) or not 0 <= seconds < 2**63 / 1e9:
        raise BagError(f"--start must be seconds since the epoch, got {seconds}")
    return round(seconds * 1e9)


def _add_topics(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--camera-topic",
        "--image-topic",
        dest="camera_topics",
        action="append",
        default=[],
        metavar="TOPIC",
        help="camera topic to replay (Image, CompressedImage or foxglove CompressedVideo; repeatable); "
        "default: the bag's only camera topic",
    )
    p.add_argument(
        "--info-topic",
        dest="info_topics",
        action="append",
        default=[],
        metavar="TOPIC",
        help="its CameraInfo topic (one per camera topic); default: the one in the camera's namespace",
    )
    p.add_argument(
        "--depth-topic",
        dest="depth_topics",
        action="append",
        default=[],
        metavar="TOPIC",
        help="its depth topic (one per camera topic); default: the bag's depth topic when unambiguous",
    )
    p.add_argument("--no-depth", action="store_true", help="leave the bag's depth topics out")


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key or not value:
        raise BagError(f"{item!r} is not TOPIC=VALUE")
    return key, value


def _play(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from cosmos_reasoner_ros.bag.replay.play import Player, PlayOptions, parse_remap
    from cosmos_reasoner_ros.ros_compat import initialized

    options = PlayOptions(
        rate=args.rate,
        loops=0 if args.loop else args.loops,
        start_offset_s=args.start_offset,
        cameras=tuple(args.camera_topics),
        infos=tuple(args.info_topics),
        depths=tuple(args.depth_topics),
        depth=not args.no_depth,
        topics=tuple(args.topics),
        all_topics=args.all_topics,
        remap=parse_remap(args.remap),
        qos=args.qos,
        qos_depth=args.qos_depth,
        topic_qos=dict(_pair(item) for item in args.topic_qos),
        wait_for_subscribers_s=args.wait_for_subscribers,
        drain_s=args.drain,
        clock=not args.no_clock,
    )
    options.check()
    if args.stats is not None:
        from cosmos_reasoner_ros.bag.safe_paths import writable_file

        writable_file(args.stats, "statistics file")
    # rclpy's own signal handler would invalidate the context under the publishing threads: the player stops
    # and closes its publishers itself. Ctrl-C before the playback (the bag's check) ends with code 130.
    with initialized(signal_handler_options=SignalHandlerOptions.NO):
        node = rclpy.create_node("cosmos_reasoner_bag_play")
        try:
            player = Player(node, args.bag, options)
            try:
                stats = _play_until_signalled(player)
            finally:
                player.close()
        finally:
            node.destroy_node()
    summary = stats.summary()
    if args.stats:
        try:
            args.stats.write_text(json.dumps(summary))
        except OSError as exc:
            raise BagError(f"cannot write {args.stats}: {exc.strerror or exc}") from None
    print(json.dumps(summary))
    return 0


def _play_until_signalled(player: Any) -> Any:
    """`player.run` on a thread of its own until it ends or SIGINT / SIGTERM asks it to stop (exit 0).

    The handlers are installed whatever the process inherited, as ROS 2 tools do: a shell starts a
    background job with SIGINT ignored, and Python then leaves it ignored (no KeyboardInterrupt): `play
    --loop` run by a test suite in the background played on for hours after its SIGINT. The signals only set
    a flag that this thread polls: a KeyboardInterrupt raised wherever the playing thread happens to be
    (inside a publish, a lock, a finalizer, where Python drops it as "Exception ignored") could leave the
    player's state half changed."""
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def play() -> None:
        try:
            outcome["stats"] = player.run(stop)
        except BaseException as exc:  # handed to the main thread, which raises it
            outcome["error"] = exc

    with _stop_signals() as signalled:
        worker = threading.Thread(target=play, name="bag-play")
        worker.start()
        while worker.is_alive():
            if signalled:
                stop.set()
            worker.join(0.1)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["stats"]


def _record(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from cosmos_reasoner_ros.bag.replay.record import Recorder, default_topics
    from cosmos_reasoner_ros.ros_compat import initialized

    topics = list(
        dict.fromkeys([*(() if args.no_default_topics else default_topics(args.node_name)), *args.topics])
    )
    if not topics:
        raise BagError("no topic to record: give --topics (or leave out --no-default-topics)")
    # SIGINT/SIGTERM end the recording through a flag (rclpy's handler would shut the context down first, and
    # what the readers already hold would be lost); installed whatever was inherited, as in play.
    with initialized(signal_handler_options=SignalHandlerOptions.NO), _stop_signals() as stopped:
        node = rclpy.create_node("cosmos_reasoner_bag_record")
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        recorder = Recorder(node, args.output, topics, args.storage)
        end = time.monotonic() + args.duration if args.duration > 0 else float("inf")
        next_discovery = 0.0
        try:
            while time.monotonic() < end and not stopped:
                if time.monotonic() >= next_discovery:
                    for topic in recorder.discover():
                        print(f"recording {topic}", file=sys.stderr, flush=True)
                    next_discovery = time.monotonic() + 0.5
                executor.spin_once(timeout_sec=0.1)
            # What reached the subscriptions before the stop (acknowledged to its publishers) is recorded too.
            _take_pending(executor, recorder, 2.0)
        except ExternalShutdownException:
            pass
        finally:
            counts = recorder.close()
            node.destroy_node()
    print(json.dumps({"bag": str(args.output), "messages": counts}))
    return 0


@contextlib.contextmanager
def _stop_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM append to the yielded list instead of raising (the caller polls it); the handlers
    are installed whatever the process inherited (a background job of a shell ignores SIGINT) and restored
    afterwards."""
    import signal

    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _take_pending(executor: Any, recorder: Any, timeout_s: float) -> None:
    """Spin until a round takes no message (or timeout_s): samples already delivered to the subscriptions."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = sum(recorder.counts.values())
        try:
            executor.spin_once(timeout_sec=0.05)
        except Exception:  # the context went away meanwhile: nothing more to take
            return
        if sum(recorder.counts.values()) == before:
            return


def _finish(runs: list[Any], junit: Path | None) -> int:
    """Write the JUnit file, then print each run's summary; 1 when a tolerance was exceeded. The JUnit file
    comes first: output that cannot be written is exit 2 before any verdict is printed."""
    from cosmos_reasoner_ros.bag.report.junit import JUnitSuite, write_junit
    from cosmos_reasoner_ros.bag.runs.finish import summary_lines

    written = None
    if junit is not None:
        suites = [
            JUnitSuite(
                run.name,
                run.result.verdict,
                run.seconds,
                (("baseline", run.baseline),) if run.baseline else (),
            )
            for run in runs
        ]
        try:
            written = write_junit(junit, suites)
        except OSError as exc:
            raise BagError(f"cannot write the JUnit file {junit}: {exc.strerror or exc}") from None
    for run in runs:
        for line in summary_lines(run.result, run.name if len(runs) > 1 else ""):
            print(line)
    if written is not None:
        print(f"junit: {written}")
    return 0 if all(run.result.verdict.passed for run in runs) else 1


def _check_outputs(output: Path, junit: Path | None) -> None:
    """Before anything runs: the report folder and the JUnit file can be written."""
    from cosmos_reasoner_ros.bag.safe_paths import writable_file, writable_folder

    writable_folder(output, "report folder")
    if junit is not None:
        writable_file(junit, "JUnit file")


def _evaluate(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.judge.tolerances import load_tolerances
    from cosmos_reasoner_ros.bag.replay.evaluate import read_recorded
    from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, TaskSpec, bag_paths

    tolerances = load_tolerances(args.tolerances)
    _check_outputs(args.output, args.junit)
    if args.results is not None:
        from cosmos_reasoner_ros.bag.records import load_records, results_file
        from cosmos_reasoner_ros.bag.report.frames import FrameIndex
        from cosmos_reasoner_ros.bag.runs.finish import finish_run
        from cosmos_reasoner_ros.bag.runs.suite import SuiteRun

        if len(args.bags) > 1:
            raise BagError("--results takes at most one camera bag (its frames)")
        baseline = load_records(args.baseline) if args.baseline else None
        records = read_recorded(args.results)
        if len(args.camera_topics) > 1:
            raise BagError("--results draws on one camera topic")
        frames = (
            FrameIndex(args.bags[0], args.camera_topics[0] if args.camera_topics else "")
            if args.bags
            else None
        )
        try:
            result = finish_run(
                records,
                args.output,
                {"": frames} if frames is not None else {},
                tolerances,
                baseline,
                str(results_file(args.baseline)) if args.baseline else "",
                args.image_format,
                args.title,
            )
        finally:
            if frames is not None:
                frames.close()
        return _finish([SuiteRun(args.output.name, result, 0.0)], args.junit)
    if not args.bags:
        raise BagError("evaluate needs a bag (or --results RECORDED_BAG)")
    if args.in_flight < 0:
        raise BagError("--in-flight must be >= 0")
    at = tuple(float(t) for t in args.at.split(",") if t.strip()) if args.at else ()
    options = EvalOptions(
        server_url=args.server_url,
        tasks=tuple(TaskSpec.parse(t) for t in args.task) or (TaskSpec("next_action"),),
        period_s=args.period,
        at_s=at,
        cameras=tuple(args.camera_topics),
        infos=tuple(args.info_topics),
        depths=tuple(args.depth_topics),
        params_file=args.params_file,
        params=tuple(args.param),
        rate=args.rate,
        lock_step=args.lock_step,
        in_flight=args.in_flight,
        timeout_s=args.timeout,
        image_format=args.image_format,
        progress=not args.no_progress,
        record=args.record,
        depth=not args.no_depth,
        media_dir=args.media_dir,
    )
    from cosmos_reasoner_ros.bag.runs.suite import run_bags

    bags = bag_paths(args.bags)
    run = run_bags(bags, args.output, options, tolerances, args.baseline, args.title)
    return _finish([run], args.junit)


def _scenario(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.replay.plan import EvalOptions
    from cosmos_reasoner_ros.bag.runs.scenario import load_scenario, scenario_files
    from cosmos_reasoner_ros.bag.runs.suite import run_scenario

    scenarios = [
        load_scenario(path) for path in scenario_files(args.scenarios)
    ]  # all checked before any runs
    names = [s.folder for s in scenarios]
    if len(set(names)) != len(names):
        raise BagError(f"scenario names must be distinct (they name the output folders): {names}")
    _check_outputs(args.output, args.junit)
    base = EvalOptions(
        server_url=args.server_url,
        params_file=args.params_file,
        timeout_s=args.timeout,
        image_format=args.image_format,
        progress=not args.no_progress,
        record=args.record,
        media_dir=args.media_dir,
    )
    runs = []
    for scenario in scenarios:
        runs += run_scenario(scenario, args.output, base, args.baseline, args.tolerances)
    return _finish(runs, args.junit)


def _report(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.report.html import load_records, write_report

    out = args.output or args.results.parent
    files = write_report(load_records(args.results), out, args.title)
    print(f"report: {files.index}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = {
        "make": _make,
        "play": _play,
        "record": _record,
        "evaluate": _evaluate,
        "scenario": _scenario,
        "report": _report,
    }
    try:
        return run[args.command](args)
    except (
        BagError,
        ReasonerError,
        ValueError,
    ) as exc:  # the user's bags, tasks or options
        print(f"cosmos-reasoner-bag {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
