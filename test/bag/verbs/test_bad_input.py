"""Bad input is exit 2 before anything replays, and leaves its JUnit file (issue 38, findings 1 and 2):
generated misspelled task names (with and without a tasks_file that adds a task), invalid sweep values and
broken labels files, through the command line. The replay itself is replaced by a tripwire: reaching it is
the oracle's "it replayed"; a valid control reaches it, so the checks refuse only what is bad."""

from __future__ import annotations

import string
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.bag import cli
from cosmos_reasoner_ros.bag.runs import suite
from cosmos_reasoner_ros.reasoner import TaskCatalog

KNOWN = sorted(TaskCatalog.load(None).names())
CUSTOM_TASKS = (
    "tasks:\n  pick_cup:\n    template: Where is the cup?\n    media: video\n    reasoning: false\n"
    "    answer_kind: text\n    profile: reasoning\n"
)


class Replayed(Exception):
    """The tripwire: the verb went on to replay."""


@pytest.fixture(autouse=True)
def tripwire(monkeypatch: pytest.MonkeyPatch) -> None:
    def replay(*_args: object, **_kwargs: object) -> None:
        raise Replayed

    monkeypatch.setattr(suite, "run_bags", replay)
    monkeypatch.setattr(suite, "run_scenario", replay)


def _folder(root: Path) -> Path:
    (root / "bags" / "one").mkdir(parents=True, exist_ok=True)
    (root / "bags" / "one" / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
    (root / "tasks.yaml").write_text(CUSTOM_TASKS)
    return root


def _error_case(junit: Path) -> str:
    """The JUnit file's one test case in error: its message."""
    root = ET.parse(junit).getroot()
    errors = [e for e in root.iter("error")]
    assert root.get("errors") == "1" and len(errors) == 1
    return errors[0].get("message", "")


def _run(argv: list[str]) -> int:
    return cli.main(argv)


def _misspelled(name: str, i: int, ch: str) -> str:
    i %= len(name) + 1
    return name[:i] + ch + name[i:]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    base=st.sampled_from(KNOWN),
    at=st.integers(0, 30),
    ch=st.sampled_from(string.ascii_lowercase + "_"),
    with_tasks_file=st.booleans(),
)
@example(base="fly_to_the_moon", at=0, ch="", with_tasks_file=False)  # the issue's own
def test_an_unknown_task_is_exit_2_before_the_replay_with_a_junit_error(
    tmp_path_factory: pytest.TempPathFactory, base: str, at: int, ch: str, with_tasks_file: bool
) -> None:
    root = _folder(tmp_path_factory.mktemp("task"))
    task = _misspelled(base, at, ch)
    if task in KNOWN or (with_tasks_file and task == "pick_cup"):
        return
    junit = root / "junit.xml"
    argv = ["evaluate", str(root / "bags" / "one"), "-o", str(root / "out"), "--junit", str(junit)]
    argv += ["--task", f"{task}:do it", "--no-progress"]
    if with_tasks_file:
        argv += ["-p", f"tasks_file:={root / 'tasks.yaml'}"]
    assert _run(argv) == 2
    assert f"unknown task {task!r}" in _error_case(junit)


def test_a_task_the_tasks_file_adds_is_known(tmp_path: Path) -> None:
    """The control: with the run's tasks_file, its task goes on to the replay; without, it is refused."""
    root = _folder(tmp_path)
    argv = ["evaluate", str(root / "bags" / "one"), "-o", str(root / "out"), "--task", "pick_cup"]
    with pytest.raises(Replayed):
        _run([*argv, "-p", f"tasks_file:={root / 'tasks.yaml'}"])
    assert _run(argv) == 2
    with pytest.raises(Replayed):
        _run([*argv[:-2], "--task", "caption"])


def _scenario(root: Path, text: str) -> Path:
    path = root / "s.yaml"
    path.write_text(f"bags: [bags/one]\n{text}\n")
    return path


bad_sweeps = st.sampled_from(
    [
        ("sample_fps", "[2.0, fast]", "sample_fps must be a number"),
        ("max_pixels", "[1000, 1.5]", "max_pixels must be an integer"),
        ("sample_fsp", "[2.0, 4.0]", "sample_fsp is not a parameter"),
        ("clip_seconds", "[1.0, 1.0]", "must be distinct"),
        ("server_url", "['http://a:8000/v1', 'http://me:hunter2@b:8000/v1']", "sweep.values[1]"),
    ]
)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sweep=bad_sweeps, task=st.sampled_from(["next_action", "caption"]))
def test_an_invalid_sweep_value_is_exit_2_with_a_junit_error(
    tmp_path_factory: pytest.TempPathFactory, sweep: tuple[str, str, str], task: str
) -> None:
    root = _folder(tmp_path_factory.mktemp("sweep"))
    parameter, values, cause = sweep
    goals = f"goals: [{{task: {task}, at: 1}}]\nsweep: {{parameter: {parameter}, values: {values}}}"
    junit = root / "junit.xml"
    argv = ["scenario", str(_scenario(root, goals)), "-o", str(root / "out"), "--junit", str(junit)]
    assert _run(argv) == 2
    message = _error_case(junit)
    assert cause in message and "hunter2" not in message


def test_a_sweep_of_tasks_files_checks_each_variants_tasks(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    (root / "plain.yaml").write_text("tasks: {}\n")
    goals = (
        "goals: [{task: pick_cup, at: 1}]\nsweep: {parameter: tasks_file, values: [tasks.yaml, plain.yaml]}"
    )
    junit = root / "junit.xml"
    argv = ["scenario", str(_scenario(root, goals)), "-o", str(root / "out"), "--junit", str(junit)]
    assert _run(argv) == 2
    message = _error_case(junit)
    assert "tasks_file=" in message and "plain.yaml" in message and "unknown task 'pick_cup'" in message


labels_texts = st.sampled_from(
    [
        ("labels: 3\n", "labels"),
        ("labels:\n  - {task: caption, between: [5, 1], answer: x}\n", "between"),
        ("labels:\n  - {task: caption, at: one, answer: x}\n", "at"),
        ("bag: [unclosed\n", "YAML"),
        ("labels:\n  - {task: caption, at: 1, answer: x, colour: red}\n", "unknown key"),
    ]
)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(labels=labels_texts, verb=st.sampled_from(["evaluate", "scenario"]))
@example(
    labels=("labels:\n  - {task: caption, at: 1, answer: x, colour: red}\n", "unknown key"), verb="evaluate"
)
def test_a_bad_labels_file_is_exit_2_with_a_junit_error(
    tmp_path_factory: pytest.TempPathFactory, labels: tuple[str, str], verb: str
) -> None:
    root = _folder(tmp_path_factory.mktemp("labels"))
    text, cause = labels
    (root / "one.labels.yaml").write_text(text)
    junit = root / "junit.xml"
    if verb == "evaluate":
        argv = ["evaluate", str(root / "bags" / "one"), "--labels", str(root / "one.labels.yaml")]
    else:
        scenario = _scenario(root, "goals: [{task: caption, at: 1}]\nlabels: one.labels.yaml")
        argv = ["scenario", str(scenario)]
    assert _run([*argv, "-o", str(root / "out"), "--junit", str(junit)]) == 2
    message = _error_case(junit)
    assert "one.labels.yaml" in message and cause.lower() in message.lower()


@pytest.mark.parametrize("verb", ["evaluate", "scenario"])
def test_a_media_dir_that_cannot_be_written_is_exit_2_with_a_junit_error(tmp_path: Path, verb: str) -> None:
    """--media-dir (where the node writes clips) is checked with the other outputs, before any replay; for
    evaluate, a writable one goes on to the replay (the control)."""
    root = _folder(tmp_path)
    source = root / "bags" / "one"
    if verb == "scenario":
        source = _scenario(root, "goals: [{task: next_action, at: 1}]")
    taken = root / "a_file"
    taken.write_text("")
    junit = root / "junit.xml"
    argv = [verb, str(source), "-o", str(root / "out"), "--junit", str(junit), "--no-progress"]
    assert _run([*argv, "--media-dir", str(taken)]) == 2
    assert f"cannot write the media folder {taken}" in _error_case(junit)
    if verb == "evaluate":
        with pytest.raises(Replayed):
            _run([*argv, "--media-dir", str(root / "media")])
