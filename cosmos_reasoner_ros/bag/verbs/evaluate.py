"""`cosmos-reasoner-bag evaluate`: replay bags into reasoner_node, trigger tasks, judge and report
(bag/runs/suite.py); or build the report from ReasonerResults recorded earlier (`--results`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cosmos_reasoner_ros.bag.errors import BagError, RunFailed
from cosmos_reasoner_ros.bag.verbs.arguments import add_checks, add_run, add_topics, run_options
from cosmos_reasoner_ros.bag.verbs.judged import check_outputs, epilog, finish, judged_main
from cosmos_reasoner_ros.bag.verbs.scoring_args import add_scoring_arguments, scoring_from_args

if TYPE_CHECKING:
    from cosmos_reasoner_ros.bag.judge.tolerances import Tolerances
    from cosmos_reasoner_ros.bag.runs.scoring import RunScoring

__all__ = ["HELP", "add_arguments", "main"]

HELP = "replay bags into reasoner_node, trigger tasks, judge and report"


def add_arguments(p: argparse.ArgumentParser) -> None:
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
    p.add_argument(
        "--at",
        default="",
        help="comma-separated trigger times [s from the recording's start: its first message, on any topic]",
    )
    p.add_argument(
        "--start",
        type=float,
        default=0.0,
        metavar="S",
        help="[s from the recording's start] replay from here",
    )
    p.add_argument(
        "--until",
        type=float,
        default=None,
        metavar="S",
        help="[s from the recording's start] replay up to here (default: the last trigger; a replay never "
        "plays past its last trigger)",
    )
    add_topics(p)
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
    add_run(p)
    add_checks(p)
    add_scoring_arguments(p)
    p.epilog = epilog(
        "Trigger times (--at, --period) are seconds from the recording's start: its first message on any "
        "topic (`check` shows it), up to the last message replayed; each trigger is asked when the playback "
        "clock reaches it, inside a gap of the recording too. Before any node starts, the server is asked "
        "whether it is ready (/health, else /v1/models) for up to wait_for_server_s (10 s; -p "
        "wait_for_server_s:=S): not ready is exit 2."
    )


@judged_main
def main(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.judge.tolerances import load_tolerances

    tolerances = load_tolerances(args.tolerances)
    scoring = scoring_from_args(args)  # labels files read now: a bad one is exit 2 before anything runs
    check_outputs(args.output, args.junit, args.media_dir)
    if args.results is not None:
        return _from_results(args, tolerances, scoring)
    from cosmos_reasoner_ros.bag.replay.plan import TaskSpec, bag_paths
    from cosmos_reasoner_ros.bag.replay.preflight import check_tasks
    from cosmos_reasoner_ros.bag.runs.suite import run_bags

    if not args.bags:
        raise BagError("evaluate needs a bag (or --results RECORDED_BAG)")
    if args.in_flight < 0:
        raise BagError("--in-flight must be >= 0")
    at = tuple(float(t) for t in args.at.split(",") if t.strip()) if args.at else ()
    options = run_options(
        args,
        tasks=tuple(TaskSpec.parse(t) for t in args.task) or (TaskSpec("next_action"),),
        period_s=args.period,
        at_s=at,
        start_s=args.start,
        until_s=args.until,
        cameras=tuple(args.camera_topics),
        infos=tuple(args.info_topics),
        depths=tuple(args.depth_topics),
        params_file=args.params_file,
        params=tuple(args.param),
        rate=args.rate,
        lock_step=args.lock_step,
        in_flight=args.in_flight,
        depth=not args.no_depth,
    )
    check_tasks(options)  # a misspelled task: exit 2 now, not a replay whose every request fails
    bags = bag_paths(args.bags)
    try:
        run = run_bags(bags, args.output, options, tolerances, args.baseline, args.title, scoring=scoring)
    except (BagError, ValueError) as exc:  # the JUnit file says so too, whatever the exit
        failed = RunFailed(args.output.name, str(exc))
        finish([], args.junit, failed)
        raise failed from None
    return finish([run], args.junit)


def _from_results(args: argparse.Namespace, tolerances: Tolerances, scoring: RunScoring | None) -> int:
    from cosmos_reasoner_ros.bag.records import load_records, results_file
    from cosmos_reasoner_ros.bag.replay.evaluate import read_recorded
    from cosmos_reasoner_ros.bag.replay.node_process import handoff_settings
    from cosmos_reasoner_ros.bag.replay.plan import EvalOptions
    from cosmos_reasoner_ros.bag.replay.preflight import answer_kinds
    from cosmos_reasoner_ros.bag.report.frames import FrameIndex
    from cosmos_reasoner_ros.bag.runs.finish import finish_run
    from cosmos_reasoner_ros.bag.runs.handoff_ground import BagCameras, handoff_ground
    from cosmos_reasoner_ros.bag.runs.suite import SuiteRun

    if len(args.bags) > 1:
        raise BagError("--results takes at most one camera bag (its frames)")
    baseline = load_records(args.baseline) if args.baseline else None
    records = read_recorded(args.results)
    if len(args.camera_topics) > 1:
        raise BagError("--results draws on one camera topic")
    if scoring is not None:
        scoring.check_bags(sorted({r.bag for r in records}) or [""])
    frames = (
        FrameIndex(args.bags[0], args.camera_topics[0] if args.camera_topics else "") if args.bags else None
    )
    # The robot's handoff ground plane, where --params-file / -p give it; its camera's CameraInfo in the bag.
    options = EvalOptions(params_file=args.params_file, params=tuple(args.param))
    settings = handoff_settings(options)
    cameras = {"": BagCameras.of(frames.reader, frames.topic)} if frames is not None else {}
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
            scoring=scoring,
            ground=handoff_ground(settings, cameras),
            kinds=answer_kinds(options),
        )
    finally:
        if frames is not None:
            frames.close()
    return finish([SuiteRun(args.output.name, result, 0.0)], args.junit)
