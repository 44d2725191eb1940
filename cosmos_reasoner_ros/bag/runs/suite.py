"""Regression runs end to end: bags replayed (evaluate.evaluate_bags), judged and reported
(finish.finish_run), for one evaluation or for each scenario of a suite and each value of its sweep."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.judge.tolerances import Tolerances, load_tolerances
from cosmos_reasoner_ros.bag.records import ResultRecord, load_records, results_file
from cosmos_reasoner_ros.bag.replay.evaluate import evaluate_bags, read_recorded
from cosmos_reasoner_ros.bag.replay.node_process import NodeStarter
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions
from cosmos_reasoner_ros.bag.report.comparison import SweepColumn, sweep_page
from cosmos_reasoner_ros.bag.report.frames import FrameIndex
from cosmos_reasoner_ros.bag.report.html import BagRow, ReportFiles
from cosmos_reasoner_ros.bag.runs.finish import RunResult, finish_run
from cosmos_reasoner_ros.bag.runs.scenario import Scenario

__all__ = ["SuiteRun", "run_bags", "run_scenario"]


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


def run_bags(
    bags: Sequence[Path],
    out: Path,
    options: EvalOptions,
    tolerances: Tolerances | None = None,
    baseline: Path | None = None,
    title: str = "",
    start_node: NodeStarter | None = None,
    name: str = "",
) -> SuiteRun:
    """Replay the bags, judge the records (against the baseline's when given) and write the report."""
    tolerances = tolerances or load_tolerances()
    base_records, base_name = _baseline(baseline)  # read before anything runs: a wrong path fails at once
    started = time.monotonic()
    records, infos = evaluate_bags(bags, out, options, start_node)
    seconds = time.monotonic() - started
    with ExitStack() as stack:
        frames = {}
        for bag, info in zip(bags, infos, strict=True):
            frames[info.bag] = stack.enter_context(closing(FrameIndex(bag, options.image_topic)))
        rows = [BagRow(i.bag or i.path.name, i.wall_s) for i in infos]
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
        )
    return SuiteRun(name or out.name, result, seconds, base_name)


def _variant_baseline(scenario: Scenario, variant: str, root: Path | None) -> Path | None:
    """The previous results of this scenario (and sweep value): under a previous output root given on the
    command line (<root>/<scenario>[/<variant>]), else the scenario's own `baseline`."""
    if root is not None:
        folder = root / scenario.name / variant if variant else root / scenario.name
        return folder if (folder / "results.jsonl").is_file() else None
    if scenario.baseline is None:
        return None
    folder = scenario.baseline / variant if variant else scenario.baseline
    if not results_file(folder).is_file():
        raise BagError(f"scenario {scenario.path}: baseline {folder} has no results.jsonl")
    return folder


def run_scenario(
    scenario: Scenario,
    out_root: Path,
    base: EvalOptions,
    baseline_root: Path | None = None,
    tolerances_file: Path | None = None,
) -> list[SuiteRun]:
    """Every variant of the scenario (one without a sweep) into <out_root>/<name>[/<parameter>=<value>];
    with a sweep, <out_root>/<name>/index.html shows the variants side by side."""
    tolerances = load_tolerances(tolerances_file, scenario.tolerances)
    runs = []
    folder = out_root / scenario.name
    for variant in scenario.variants():
        out = folder / variant.name if variant.name else folder
        name = f"{scenario.name}[{variant.name}]" if variant.name else scenario.name
        runs.append(
            run_bags(
                scenario.bags,
                out,
                scenario.options(variant, base),
                tolerances,
                _variant_baseline(scenario, variant.name, baseline_root),
                title=f"{name} ({scenario.path.name})",
                name=name,
            )
        )
    if scenario.sweep_parameter:
        columns = [
            SweepColumn(v.value, v.name, run.result.verdict)
            for v, run in zip(scenario.variants(), runs, strict=True)
        ]
        sweep_page(
            folder, f"{scenario.name}: sweep of {scenario.sweep_parameter}", scenario.sweep_parameter, columns
        )
    return runs


def evaluate_recorded(
    results_bag: Path,
    out: Path,
    images_bag: Path | None = None,
    image_topic: str = "",
    image_format: str = "jpg",
) -> ReportFiles:
    """The report from ReasonerResult messages in a recorded bag, with frames from `images_bag` when given."""
    records = read_recorded(results_bag)
    frames = FrameIndex(images_bag, image_topic) if images_bag is not None else None
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
