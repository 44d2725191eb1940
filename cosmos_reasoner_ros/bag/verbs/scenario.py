"""`cosmos-reasoner-bag scenario`: run scenario files (or folders of them), each with its bags, goals,
tolerances and sweep (bag/runs/scenario.py, bag/runs/suite.py); every file is checked before the first
runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError, RunFailed
from cosmos_reasoner_ros.bag.safe_paths import printable
from cosmos_reasoner_ros.bag.verbs.arguments import add_run, run_options
from cosmos_reasoner_ros.bag.verbs.judged import check_outputs, epilog, finish, judged_main
from cosmos_reasoner_ros.bag.verbs.scoring_args import add_scoring_arguments, scoring_from_args

__all__ = ["HELP", "add_arguments", "main"]

HELP = "run scenario files (or folders of them): bags, goals, tolerances, sweeps"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "scenarios",
        type=Path,
        nargs="+",
        help="scenario YAML files or folders of them (labels files beside them, *.labels.yaml or "
        "labels.yaml, are skipped)",
    )
    p.add_argument(
        "-o", "--output", type=Path, required=True, help="output folder (a sub-folder per scenario)"
    )
    p.add_argument("--params-file", type=Path, help="node parameters for scenarios that name none")
    add_run(p)
    p.add_argument("--baseline", type=Path, help="a previous output folder of the same scenarios")
    p.add_argument(
        "--tolerances", type=Path, help="YAML overriding the shipped tolerances (before a scenario's own)"
    )
    p.add_argument(
        "--junit", type=Path, metavar="FILE", help="write JUnit XML (a test suite per scenario run)"
    )
    add_scoring_arguments(p, labels=False)  # a scenario names its own labels
    p.epilog = epilog(
        "A scenario's goal times (at, every) are seconds from the recording's start: its first message on "
        "any topic (start and until bound the replay, as evaluate's --start and --until). The paths a "
        "scenario names lie inside its folder (config/scenario_example.yaml). Before the first run, each "
        "variant's server is asked whether it is ready (/health, else /v1/models) for up to "
        "wait_for_server_s (10 s): not ready is exit 2."
    )


@judged_main
def main(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.replay.preflight import check_tasks
    from cosmos_reasoner_ros.bag.replay.reachability import check_servers, server_target
    from cosmos_reasoner_ros.bag.runs.scenario import load_scenario, scenario_files
    from cosmos_reasoner_ros.bag.runs.suite import SuiteRun, run_scenario

    scoring = scoring_from_args(args, need_labels=False)
    # Every scenario is checked before the first one runs.
    scenarios = [load_scenario(path) for path in scenario_files(args.scenarios)]
    names = [s.folder for s in scenarios]
    if len(set(names)) != len(names):
        raise BagError(f"scenario names must be distinct (they name the output folders): {names}")
    check_outputs(args.output, args.junit, args.media_dir)
    base = run_options(args, params_file=args.params_file)
    targets = []
    for scenario in scenarios:  # every variant's tasks against its catalog (a sweep may change tasks_file)
        for variant in scenario.variants():
            options = scenario.options(variant, base)
            check_tasks(options, f"{printable(str(scenario.path))}: {variant.name or 'goals'}: ")
            _check_folder(args.output, scenario.name, variant.name)
            targets.append(server_target(options))
    # Each server a variant calls (a sweep may name several), once, before the first run.
    check_servers(targets)
    runs: list[SuiteRun] = []
    try:
        for scenario in scenarios:
            run_scenario(
                scenario, args.output, base, args.baseline, args.tolerances, done=runs, scoring=scoring
            )
    except RunFailed as exc:  # the runs before it are reported all the same, then exit 2
        finish(runs, args.junit, exc)
        raise
    return finish(runs, args.junit)


def _check_folder(output: Path, scenario: str, variant: str) -> None:
    """A run's folder (OUT/<scenario>[/<variant>], as run_scenario names it) is no file: else the run would
    stop at its start, after the runs before it."""
    from cosmos_reasoner_ros.bag.safe_paths import child

    folder = child(output, scenario)
    for path in (folder, child(folder, variant) if variant else folder):
        if path.exists() and not path.is_dir():
            raise BagError(f"{printable(str(path))} is a file where the run writes its folder")
