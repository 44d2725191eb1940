"""bag.runs.scenario: the shipped example scenario loads (goals, parameters, tolerances, sweep variants); bad
scenarios name their problem; folders of scenarios and of bags expand in order; a server URL with credentials
is refused wherever it is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.judge.tolerances import load_tolerances
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, Goal, TaskSpec, bag_paths, schedule
from cosmos_reasoner_ros.bag.runs.scenario import load_scenario, scenario_files
from cosmos_reasoner_ros.package_files import config_file


def test_the_shipped_example_loads() -> None:
    s = load_scenario(config_file("scenario_example.yaml"))
    assert s.name == "packing_next_action" and s.lock_step and s.in_flight == 0
    assert s.bags == (config_file("scenario_example.yaml").parent / "bags/packing",)
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
        (
            "bags: [b]\ngoals: [{task: x, at: 1}]\nsweep: {parameter: clip_seconds, values: [1.0, 1.0]}\n",
            "distinct",
        ),
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


@pytest.mark.parametrize(
    "labels_name", ["packing.labels.yaml", "packing.labels.yml", "labels.yaml", "Robot.LABELS.yaml"]
)
def test_labels_files_beside_scenarios_are_not_scenarios(tmp_path: Path, labels_name: str) -> None:
    """Issue 38, finding 7: `scenario FOLDER` read `labels draft`'s packing.labels.yaml as a scenario
    ("unknown key(s) bag, version"). The naming rule: *.labels.yaml / .yml, or labels.yaml / .yml."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "s.yaml").write_text("x")
    (suite / labels_name).write_text("version: 1\nbag: packing\nlabels: []\n")
    assert [p.name for p in scenario_files([suite])] == ["s.yaml"]
    with pytest.raises(BagError, match="is a labels file"):  # named directly: said, not read as a scenario
        scenario_files([suite / labels_name])
    (suite / "s.yaml").unlink()
    with pytest.raises(BagError, match="holds no scenario"):
        scenario_files([suite])
    assert [p.name for p in scenario_files([_write(suite / "labels_of_the_week.yaml")])] == [
        "labels_of_the_week.yaml"  # the rule is the suffix, not any name that starts with labels
    ]


def _write(path: Path) -> Path:
    path.write_text("x")
    return path


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
    (suite / "bags").symlink_to(bags)  # the suite's folder reaches the bags through a link
    for name in ("a.yml", "b.yaml"):
        (suite / name).write_text("name: same\nbags: [bags/two]\ngoals: [{task: x, at: 1}]\n")
    assert main(["scenario", str(suite), "-o", str(tmp_path / "out")]) == 2
    assert "must be distinct" in capsys.readouterr().err


def _empty(tmp_path: Path) -> Path:
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    return empty


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
        f"params_file: {params.name}\n",
    ):
        scenario = tmp_path / "s.yaml"
        scenario.write_text(f"bags: [bags/one]\n{goals}{text}")
        with pytest.raises(BagError, match="must not contain credentials") as caught:
            load_scenario(scenario)
        assert "s3cret" not in str(caught.value)
    assert main(["scenario", str(scenario), "-o", str(tmp_path / "sc"), "--server-url", secret]) == 2
    assert "s3cret" not in capsys.readouterr().err


def _suite(tmp_path: Path) -> Path:
    """A suite folder holding one (unreadable) bag at bags/one."""
    suite = tmp_path / "suite"
    (suite / "bags" / "one").mkdir(parents=True)
    (suite / "bags" / "one" / "metadata.yaml").write_text("x")
    return suite


def test_the_paths_a_scenario_names_lie_inside_its_folder(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    secret = tmp_path / "shadow"
    secret.write_text("root:*:20228:0:99999:7:::\nadmin:$6$s3cret-hash:20228::::::\n")
    goals = "goals: [{task: x, at: 1}]\n"
    for key, value in (
        ("params_file", "../../../../../../../../etc/shadow"),
        ("params_file", str(secret)),
        ("params_file", "~/shadow"),
        ("bags", "[../bags]"),
        ("baseline", "a/../../out"),
        ("params", "{tasks_file: ../shadow}"),
        ("sweep", "{parameter: tasks_file, values: [a.yaml, /etc/passwd]}"),
    ):
        scenario = suite / "s.yaml"
        bags = "" if key == "bags" else "bags: [bags/one]\n"
        scenario.write_text(f"{bags}{goals}{key}: {value}\n")
        with pytest.raises(BagError, match="must name a path inside the suite's folder") as caught:
            load_scenario(scenario)
        assert "s3cret" not in str(caught.value) and "root:" not in str(caught.value)
    # A link in the suite's folder is how a suite reaches files elsewhere: followed. The file it leads to is
    # not node parameters: the error says where, never what the file holds (it echoed the hash before).
    (suite / "params.yaml").symlink_to(secret)
    (suite / "s.yaml").write_text(f"bags: [bags/one]\n{goals}params_file: params.yaml\n")
    with pytest.raises(BagError) as caught:
        load_scenario(suite / "s.yaml")
    assert "s3cret" not in str(caught.value) and "root:" not in str(caught.value)
    secret.write_text("root: x\nadmin: [$6$s3cret-hash\n")  # not YAML: PyYAML's message quotes the line
    with pytest.raises(BagError, match=r"not valid YAML \(line 3, column 1\)") as caught:
        load_scenario(suite / "s.yaml")
    assert "s3cret" not in str(caught.value) and "admin" not in str(caught.value)
    secret.write_text("admin: $6$s3cret-hash\n")  # YAML, but no ros__parameters block
    with pytest.raises(BagError, match="entry 1 needs a ros__parameters mapping") as caught:
        load_scenario(suite / "s.yaml")
    assert "s3cret" not in str(caught.value) and "admin" not in str(caught.value)
    # A tasks_file inside the suite becomes an absolute path for the node.
    (suite / "s.yaml").write_text(f"bags: [bags/one]\n{goals}params: {{tasks_file: tasks.yaml}}\n")
    assert load_scenario(suite / "s.yaml").params == (f'tasks_file:="{suite.absolute() / "tasks.yaml"}"',)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("params: {clip_secs: 2.0}", "params.clip_secs: clip_secs is not a parameter of reasoner_node"),
        ("params: {max_pixels: 1.5}", "params.max_pixels: max_pixels must be an integer, got float"),
        ("params: {media_dir: /tmp/x}", "media_dir is set by the run"),
        (
            "sweep: {parameter: sample_fps, values: [2.0, fast]}",
            "sweep.values[1]: sample_fps must be a number",
        ),
        ("sweep: {parameter: sample_fsp, values: [2.0, 4.0]}", "sample_fsp is not a parameter"),
        ("sweep: {parameter: camera.front.compressed, values: [true, 1]}", "must be true or false, got int"),
    ],
)
def test_node_parameters_are_checked_before_anything_runs(tmp_path: Path, text: str, message: str) -> None:
    # A bad second sweep value ran the first for 60 s, then exit 2 before (its JUnit file: test_bad_input.py).
    suite = _suite(tmp_path)
    (suite / "s.yaml").write_text(f"bags: [bags/one]\ngoals: [{{task: x, at: 1}}]\n{text}\n")
    with pytest.raises(BagError) as caught:
        load_scenario(suite / "s.yaml")
    assert message in str(caught.value)


def test_evaluate_checks_its_parameters_before_a_bag_is_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["evaluate", str(tmp_path / "absent"), "-o", str(out), "-p", "sample_fps:=fast"]) == 2
    err = capsys.readouterr().err
    assert "node parameter sample_fps must be a number" in err and "absent" not in err
    assert not (out / "node.log").exists()
