"""Regression runs end to end: bags replayed (evaluate.evaluate_bags), judged and reported
(finish.finish_run), for one evaluation or for each scenario of a suite and each value of its sweep."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, replace
from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError, RunFailed
from cosmos_reasoner_ros.bag.judge.tolerances import Tolerances, load_tolerances
from cosmos_reasoner_ros.bag.records import ResultRecord, load_records, results_file
from cosmos_reasoner_ros.bag.replay.evaluate import evaluate_bags, read_recorded
from cosmos_reasoner_ros.bag.replay.node_process import NodeStarter, handoff_settings
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, bag_label
from cosmos_reasoner_ros.bag.replay.preflight import answer_kinds
from cosmos_reasoner_ros.bag.report.comparison import SweepColumn, sweep_page
from cosmos_reasoner_ros.bag.report.frames import FrameIndex
from cosmos_reasoner_ros.bag.report.html import BagRow, ReportFiles
from cosmos_reasoner_ros.bag.runs.finish import RunResult, finish_run
from cosmos_reasoner_ros.bag.runs.handoff_ground import BagCameras, handoff_ground
from cosmos_reasoner_ros.bag.runs.scenario import Scenario
from cosmos_reasoner_ros.bag.runs.scoring import RunScoring
from cosmos_reasoner_ros.bag.safe_paths import child, printable
from cosmos_reasoner_ros.errors import ReasonerError

__all__ = ["SuiteRun", "check_baseline", "run_bags", "run_scenario"]


@dataclass(frozen=True)
class SuiteRun:
    """One judged run: its name in JUnit and summaries, its result, its wall time."""

    name: str
    result: RunResult
    seconds: float
    baseline: str = ""


def _baseline(path: Path | None) -> tuple[list[ResultRecord] | None, str]:
    if path is None:
        return None, ""
    return load_records(path), str(results_file(path))


def _listed(items: set[str]) -> str:
    text = ", ".join(sorted(items)[:8]) + (", ..." if len(items) > 8 else "")
    return text or "none"


def check_baseline(
    baseline: Sequence[ResultRecord],
    bags: Sequence[str],
    tasks: set[tuple[str, str, str]],
    bag_ids: dict[str, str] | None = None,
) -> list[ResultRecord]:
    """The baseline's records when they come from the same bags and task set as this run (a single-bag
    baseline written before records named their bag takes this run's bag); BagError naming what differs."""
    if len(bags) == 1 and baseline and all(not r.bag for r in baseline):
        baseline = [replace(r, bag=bags[0]) for r in baseline]
    problems = []
    base_bags, run_bags_ = {r.bag for r in baseline}, set(bags)
    if base_bags != run_bags_:
        problems.append(f"bags: the baseline has {_listed(base_bags)}, this run {_listed(run_bags_)}")
    base_tasks = {(r.task, r.instruction, r.step) for r in baseline}
    if base_tasks != tasks:

        def text(items: set[tuple[str, str, str]]) -> str:
            return _listed({":".join(p for p in item if p)[:60] for item in items})

        problems.append(
            f"tasks: the baseline asked {text(base_tasks - tasks)} that this run does not, this run "
            f"{text(tasks - base_tasks)} that the baseline did not"
        )
    for bag, identity in (bag_ids or {}).items():
        theirs = {r.bag_id for r in baseline if r.bag == bag and r.bag_id}
        if identity and theirs and identity not in theirs:
            problems.append(
                f"bag {bag}: not the recording the baseline replayed (other messages or time span on its "
                "camera topics)"
            )
    if problems:
        raise BagError("the baseline is not a run of these bags and tasks: " + "; ".join(problems))
    return list(baseline)


def run_bags(
    bags: Sequence[Path],
    out: Path,
    options: EvalOptions,
    tolerances: Tolerances | None = None,
    baseline: Path | None = None,
    title: str = "",
    start_node: NodeStarter | None = None,
    name: str = "",
    scoring: RunScoring | None = None,
) -> SuiteRun:
    """Replay the bags, judge the records (against the baseline's when given), score them against labels
    (when given) and write the report."""
    tolerances = tolerances or load_tolerances()
    base_records, base_name = _baseline(baseline)  # read before anything runs: a wrong path fails at once
    labels = [bag_label(b) for b in bags]
    if scoring is not None:
        scoring.check_bags(labels)
    tasks = {(g.spec.task, g.spec.instruction, g.spec.step) for g in options.goal_list()}
    kinds = answer_kinds(options)
    if base_records is not None:
        base_records = check_baseline(base_records, labels, tasks)
    started = time.monotonic()
    records, infos = evaluate_bags(bags, out, options, start_node)
    seconds = time.monotonic() - started
    if base_records is not None:
        ids = {r.bag: r.bag_id for r in records}
        base_records = check_baseline(base_records, labels, tasks, ids)
    with ExitStack() as stack:
        frames = {}
        for info in infos:
            index = FrameIndex(info.path, info.cameras[0] if info.cameras else "", info.first_ns)
            frames[info.bag] = stack.enter_context(closing(index))
        rows = [BagRow(i.bag or i.path.name, i.wall_s) for i in infos]
        cameras = {i.bag: BagCameras(frames[i.bag].reader, i.cameras, i.infos) for i in infos}
        result = finish_run(
            records,
            out,
            frames,
            tolerances,
            base_records,
            base_name,
            options.image_format,
            title,
            rows if len(bags) > 1 else (),
            scoring,
            handoff_ground(handoff_settings(options), cameras),
            kinds,
        )
    return SuiteRun(name or out.name, result, seconds, base_name)


def _variant_baseline(scenario: Scenario, variant: str, root: Path | None) -> Path | None:
    """The previous results of this scenario (and sweep value): under a previous output root given on the
    command line (<root>/<scenario>[/<variant>]), else the scenario's own `baseline`."""
    if root is not None:
        folder = child(root, scenario.name)
        folder = child(folder, variant) if variant else folder
        return folder if (folder / "results.jsonl").is_file() else None
    if scenario.baseline is None:
        return None
    folder = child(scenario.baseline, variant) if variant else scenario.baseline
    if not results_file(folder).is_file():
        raise BagError(f"scenario {scenario.path}: baseline {folder} has no results.jsonl")
    return folder


def run_scenario(
    scenario: Scenario,
    out_root: Path,
    base: EvalOptions,
    baseline_root: Path | None = None,
    tolerances_file: Path | None = None,
    done: list[SuiteRun] | None = None,
    scoring: RunScoring | None = None,
) -> list[SuiteRun]:
    """Every variant of the scenario (one without a sweep) into <out_root>/<name>[/<parameter>=<value>];
    with a sweep, <out_root>/<name>/index.html shows the variants side by side, and with labels
    leaderboard.html / .json / .md rank them. Each finished run is also appended to `done` at once; a
    variant that stops with an error raises RunFailed naming it. scoring: the command line's thresholds,
    intervals and judge (the scenario's own labels and min_scores join them)."""
    tolerances = load_tolerances(tolerances_file, scenario.tolerances)
    scoring = scenario.scoring(scoring)
    runs: list[SuiteRun] = []
    folder = child(out_root, scenario.name)
    for variant in scenario.variants():
        out = child(folder, variant.name) if variant.name else folder
        name = f"{scenario.name}[{variant.name}]" if variant.name else scenario.name
        try:
            run = run_bags(
                scenario.bags,
                out,
                scenario.options(variant, base),
                tolerances,
                _variant_baseline(scenario, variant.name, baseline_root),
                title=f"{name} ({printable(scenario.path.name)})",
                name=name,
                scoring=scoring,
            )
        except (BagError, ReasonerError, ValueError) as exc:
            raise RunFailed(name, f"{name}: {exc}") from None
        runs.append(run)
        if done is not None:
            done.append(run)
    if scenario.sweep_parameter:
        columns = [
            SweepColumn(v.value, v.folder, run.result.verdict)
            for v, run in zip(scenario.variants(), runs, strict=True)
        ]
        sweep_page(
            folder, f"{scenario.name}: sweep of {scenario.sweep_parameter}", scenario.sweep_parameter, columns
        )
        if scoring is not None and scoring.labels:
            _sweep_leaderboard(scenario, folder, runs, scoring)
    return runs


def _sweep_leaderboard(
    scenario: Scenario, folder: Path, runs: Sequence[SuiteRun], scoring: RunScoring
) -> None:
    """leaderboard.json / .html / .md of a sweep's runs in the scenario's folder, a row per value."""
    from cosmos_reasoner_ros.bag.leaderboard import Leaderboard, RunScores, write_leaderboard

    rows = [
        RunScores(v.folder, run.result.scored.scores.tasks, f"{v.folder}/index.html")
        for v, run in zip(scenario.variants(), runs, strict=True)
        if run.result.scored is not None
    ]
    title = f"{scenario.name}: leaderboard of {scenario.sweep_parameter}"
    write_leaderboard(Leaderboard.of(rows), folder, title, scoring.options.confidence)


def evaluate_recorded(
    results_bag: Path,
    out: Path,
    images_bag: Path | None = None,
    camera_topic: str = "",
    image_format: str = "jpg",
) -> ReportFiles:
    """The report from ReasonerResult messages in a recorded bag, with frames from `images_bag` when given."""
    records = read_recorded(results_bag)
    frames = FrameIndex(images_bag, camera_topic) if images_bag is not None else None
    try:
        sources = {"": frames} if frames is not None else {}
        return finish_run(records, out, sources, load_tolerances(), image_format=image_format).files
    finally:
        if frames is not None:
            frames.close()


def evaluate_live(
    bag: Path, out: Path, options: EvalOptions = EvalOptions(), start_node: NodeStarter | None = None
) -> ReportFiles:
    """Replay `bag` into a fresh reasoner_node, trigger the tasks, collect every result, write the report (the
    shipped tolerances, no baseline). start_node: how the node starts (e.g. `ros2 launch`); None: here."""
    return run_bags([bag], out, options, start_node=start_node).result.files
