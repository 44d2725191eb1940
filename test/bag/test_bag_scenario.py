"""bag.scenario: the shipped example scenario loads (goals, parameters, tolerances, sweep variants); bad
scenarios name their problem; folders of scenarios and of bags expand in order; the lock-step ingest count
read from a node's diagnostics values, and the wait for the node's clock to reach the bag's."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.judge.tolerances import load_tolerances
from cosmos_reasoner_ros.bag.replay.lockstep import IngestWatch, camera_progress
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


class _DiagnosticsNode:
    """What IngestWatch uses of a node; the test delivers the diagnostics itself."""

    def __init__(self) -> None:
        self.callback: Any = None

    def create_subscription(self, msg_type: object, topic: str, callback: Any, qos: object) -> object:
        self.callback = callback
        return object()

    def destroy_subscription(self, sub: object) -> None:
        pass


def test_the_first_frame_waits_for_the_nodes_clock_to_reach_the_bag(tmp_path: Path) -> None:
    # Until the node has taken a /clock sample, its diagnostics are stamped 0 (then frames stamped in 2020
    # look decades ahead and are refused): the replay waits for a stamp in bag time, however long the node
    # takes on a busy machine, and fails naming the cause when none comes.
    from builtin_interfaces.msg import Time
    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import Header

    bag_start = 1_600_000_000_123_000_000
    node = _DiagnosticsNode()
    watch = IngestWatch(node)

    def diagnostics(ns: int) -> DiagnosticArray:
        return DiagnosticArray(header=Header(stamp=Time(sec=ns // 10**9, nanosec=ns % 10**9)))

    node.callback(diagnostics(0))
    with pytest.raises(BagError, match=r"clock did not reach the bag's start .* no /diagnostics stamped"):
        watch.wait_clock(bag_start, 0.3)
    delivered: list[int] = []

    def deliver() -> None:
        delivered.append(bag_start)
        node.callback(diagnostics(bag_start))

    late = threading.Timer(1.0, deliver)
    late.start()
    watch.wait_clock(bag_start, 60.0)
    assert delivered  # it returned on the stamp, not before
    late.join()
    watch.wait_clock(bag_start - 1, 0.0)  # already there
    watch.close()


def test_a_server_url_with_credentials_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Wherever a replay's server URL is set: refused (exit 2) before a bag is opened or a node started, with
    # the setting named and the secret never shown (it would be on the node's command line and on
    # /parameter_events).
    secret = "http://robot:s3cret@gpu-box:8000/v1"
    params = tmp_path / "params.yaml"
    params.write_text(f"reasoner_node:\n  ros__parameters:\n    server_url: '{secret}'\n")
    bag = str(tmp_path / "absent_bag")
    cases = [
        (["--server-url", secret], "--server-url"),
        (["-p", f"server_url:={secret}"], "-p server_url"),
        (["-p", f"server_url:='{secret}'"], "-p server_url"),
        (["--params-file", str(params)], "server_url"),
    ]
    for extra, named in cases:
        out = tmp_path / f"out{len(extra[0])}"
        assert main(["evaluate", bag, "-o", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert named in err and "must not contain credentials" in err and "<redacted>@gpu-box" in err, err
        assert "s3cret" not in err and "absent_bag" not in err
    goals = "goals: [{task: x, at: 1}]\n"
    bags = tmp_path / "bags" / "one"
    bags.mkdir(parents=True)
    (bags / "metadata.yaml").write_text("x")
    for text in (
        f"params: {{server_url: '{secret}'}}\n",
        f"sweep: {{parameter: server_url, values: ['http://a:8000/v1', '{secret}']}}\n",
        f"params_file: {params}\n",
    ):
        scenario = tmp_path / "s.yaml"
        scenario.write_text(f"bags: [{bags}]\n{goals}{text}")
        with pytest.raises(BagError, match="must not contain credentials") as caught:
            load_scenario(scenario)
        assert "s3cret" not in str(caught.value)
    assert main(["scenario", str(scenario), "-o", str(tmp_path / "sc"), "--server-url", secret]) == 2
    assert "s3cret" not in capsys.readouterr().err
