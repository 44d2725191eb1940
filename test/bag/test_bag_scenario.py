"""bag.scenario: the shipped example scenario loads (goals, parameters, tolerances, sweep variants); bad
scenarios name their problem; folders of scenarios and of bags expand in order; the lock-step ingest count
read from a node's diagnostics values."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.judge.tolerances import load_tolerances
from cosmos_reasoner_ros.bag.replay.lockstep import camera_progress
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, Goal, TaskSpec, bag_paths, schedule
from cosmos_reasoner_ros.bag.runs.scenario import load_scenario, scenario_files
from cosmos_reasoner_ros.package_files import config_file


def test_the_shipped_example_loads() -> None:
    s = load_scenario(config_file("scenario_example.yaml"))
    assert s.name == "packing_next_action" and s.lock_step and s.in_flight == 0
    assert s.bags == (config_file("scenario_example.yaml").parent / "../bags/packing",)
    assert s.goals == (
        Goal(TaskSpec("next_action"), (2.0, 4.0, 6.0)),
        Goal(TaskSpec("trajectory", "pick up the bottle"), (4.0,)),
        Goal(TaskSpec("assisted_next_action", "pack the box", "put the bottle in"), (), 3.0),
    )
    assert s.params == ("clip_seconds:=4.0", "sample_fps:=4.0")
    variants = s.variants()
    assert [v.name for v in variants] == ["clip_seconds=2.0", "clip_seconds=4.0"]
    assert variants[0].params[-1] == "clip_seconds:=2.0"  # the swept value comes last: it wins
    options = s.options(variants[1], EvalOptions(server_url="http://gpu:8000/v1"))
    assert options.server_url == "http://gpu:8000/v1" and options.lock_step and options.goals == s.goals
    tol = load_tolerances(overrides=s.tolerances)
    assert tol.per_request.require_success and tol.for_task("trajectory").trajectory_mean_px == 25.0
    assert tol.for_task("trajectory").require_success  # task blocks start from the scenario's per_request
    # The schedule of a 7 s bag: goals by time, in their order at one time.
    plan = schedule(7.0, options.goal_list())
    assert [(t, spec.task) for t, spec in plan] == [
        (2.0, "next_action"),
        (3.0, "assisted_next_action"),
        (4.0, "next_action"),
        (4.0, "trajectory"),
        (6.0, "next_action"),
        (6.0, "assisted_next_action"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bags: [b]\ngoals: [{task: x, at: 1}]\ncolour: red\n", "unknown key"),
        ("goals: [{task: x, at: 1}]\n", "bags must name"),
        ("bags: [b]\n", "goals must list"),
        ("bags: [b]\ngoals: [next_action]\n", "a goal is a mapping"),
        ("bags: [b]\ngoals: [{task: x}]\n", "give the bag times"),
        ("bags: [b]\ngoals: [{task: x, at: [-1]}]\n", "must be a number >= 0"),
        ("bags: [b]\ngoals: [{task: x, at: 1, when: 2}]\n", "unknown key"),
        ("bags: [b]\ngoals: [{task: x, at: 1}]\nsweep: {parameter: p}\n", "exactly `parameter` and `values`"),
        ("bags: [b]\ngoals: [{task: x, at: 1}]\nsweep: {parameter: p, values: [1, 1]}\n", "distinct"),
        ("bags: [b]\ngoals: [{task: x, at: 1}]\nlock_step: maybe\n", "true or false"),
        ("bags: [b]\ngoals: [{task: x, at: 1}]\nin_flight: -2\n", "in_flight"),
        ("bags: [b]\ngoals: [{task: x, at: 1}]\nrate: 0\n", "rate must be > 0"),
        ("[1, 2]\n", "must be a mapping"),
    ],
)
def test_bad_scenarios_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(BagError, match=message):
        load_scenario(path)


def test_folders_expand_and_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("b.yaml", "a.yml", "notes.txt"):
        (suite / name).write_text("x")
    assert [p.name for p in scenario_files([suite])] == ["a.yml", "b.yaml"]
    with pytest.raises(BagError, match="holds no scenario"):
        scenario_files([_empty(tmp_path)])
    bags = tmp_path / "bags"
    for name in ("two", "one/inner"):
        (bags / name).mkdir(parents=True)
        (bags / name / "metadata.yaml").write_text("x")
    assert [p.name for p in bag_paths([bags])] == ["inner", "two"]
    with pytest.raises(BagError, match="neither a bag nor a folder"):
        bag_paths([_empty(tmp_path)])
    (bags / "three" / "two").mkdir(parents=True)
    (bags / "three" / "two" / "metadata.yaml").write_text("x")
    with pytest.raises(BagError, match="distinct folder names"):
        bag_paths([bags])
    # Two scenarios of one name: refused before anything runs.
    for name in ("a.yml", "b.yaml"):
        (suite / name).write_text(f"name: same\nbags: [{bags / 'two'}]\ngoals: [{{task: x, at: 1}}]\n")
    assert main(["scenario", str(suite), "-o", str(tmp_path / "out")]) == 2
    assert "must be distinct" in capsys.readouterr().err


def _empty(tmp_path: Path) -> Path:
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    return empty


def test_camera_progress_counts_only_finished_frames() -> None:
    values = {
        "topic": "/cam",
        "frames_received": "10",
        "frames_buffered": "3",
        "frames_skipped_by_sampling": "5",
        "frames_dropped": "1",
    }
    assert camera_progress(values) == ("/cam", 9)  # the tenth is still being handled
    assert camera_progress({**values, "frames_dropped": "2"}) == ("/cam", 10)
    assert camera_progress({"url": "http://x"}) is None  # the server's status
