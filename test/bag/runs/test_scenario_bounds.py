"""A scenario's `start` and `until` (issue 38), as evaluate's --start / --until: generated bounds and goals
against a hand oracle of which triggers get asked (in quarter seconds, exact in binary floats), and bad
bounds refused before anything runs (exit 2 with the JUnit error case)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.bag import cli
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, schedule
from cosmos_reasoner_ros.bag.runs import suite
from cosmos_reasoner_ros.bag.runs.scenario import load_scenario

Q = 0.25  # every generated time is a whole number of quarter seconds


def _suite(root: Path, text: str) -> Path:
    (root / "bags" / "one").mkdir(parents=True, exist_ok=True)
    (root / "bags" / "one" / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
    path = root / "s.yaml"
    path.write_text(f"bags: [bags/one]\n{text}")
    return path


def _asked(start: int, end: int, at: list[int], every: int) -> list[float] | None:
    """The oracle, in quarters: the `at` times (None when one lies outside start-end: refused), else every
    multiple of the period from one period after the start up to the end."""
    if at:
        return None if any(not start <= t <= end for t in at) else sorted(t * Q for t in at)
    return [k * every * Q for k in range(1, end // every + 1) if start + every <= k * every <= end]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start=st.integers(-4, 40),
    until=st.none() | st.integers(-4, 60),
    at=st.lists(st.integers(0, 60), max_size=4),
    every=st.integers(1, 12),
    span=st.integers(1, 60),
)
@example(start=8, until=8, at=[], every=4, span=40)  # until == start: refused
@example(start=4, until=20, at=[2], every=4, span=40)  # a goal before the start: refused
@example(start=4, until=None, at=[], every=4, span=40)  # from 2 s: 3 s, 4 s, ...
def test_start_and_until_bound_the_triggers_asked(
    tmp_path_factory: pytest.TempPathFactory,
    start: int,
    until: int | None,
    at: list[int],
    every: int,
    span: int,
) -> None:
    root = tmp_path_factory.mktemp("bounds")
    goal = f"at: {[t * Q for t in at]}" if at else f"every: {every * Q}"
    text = f"goals: [{{task: next_action, {goal}}}]\nstart: {start * Q}\n"
    text += f"until: {'null' if until is None else until * Q}\n"
    path = _suite(root, text)
    valid = start >= 0 and (until is None or until > start) and (until is None or until >= 0)
    valid = valid and all(start <= t and (until is None or t <= until) for t in at)
    if not valid:
        with pytest.raises(BagError):
            load_scenario(path)
        return
    scenario = load_scenario(path)
    options = scenario.options(scenario.variants()[0], EvalOptions())
    assert (options.start_s, options.until_s) == (start * Q, None if until is None else until * Q)
    end = span if until is None else min(span, until)  # the bag's span, or until (EvalOptions.end_s)
    assert options.end_s(span * Q) == end * Q
    expected = _asked(start, end, at, every) if end >= start else None
    if expected is None:  # a time outside what the bag holds from start: refused before a node starts
        with pytest.raises(BagError):
            schedule(options.end_s(span * Q), options.goal_list(), options.start_s)
        return
    asked = schedule(options.end_s(span * Q), options.goal_list(), options.start_s)
    assert [t for t, _ in asked] == expected


@pytest.mark.parametrize(
    ("bounds", "cause"),
    [
        ("start: 5.0\nuntil: 5.0\n", "until (5 s) must come after start (5 s)"),
        ("start: -1\n", "start must be a number >= 0"),
        ("until: -2\n", "until must be a number >= 0"),
        ("start: soon\n", "start must be a number"),
        ("start: 3.0\n", "lie outside the replay"),
    ],
)
def test_bad_bounds_are_exit_2_with_a_junit_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bounds: str, cause: str
) -> None:
    def replay(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("replayed")

    monkeypatch.setattr(suite, "run_scenario", replay)
    junit = tmp_path / "junit.xml"
    path = _suite(tmp_path, "goals: [{task: next_action, at: 1}]\n" + bounds)
    assert cli.main(["scenario", str(path), "-o", str(tmp_path / "out"), "--junit", str(junit)]) == 2
    errors = list(ET.parse(junit).getroot().iter("error"))
    assert len(errors) == 1 and cause in errors[0].get("message", "")


def test_a_file_where_a_run_writes_its_folder_is_exit_2_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def replay(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("replayed")

    monkeypatch.setattr(suite, "run_scenario", replay)
    sweep = "sweep: {parameter: sample_fps, values: [2.0]}\n"
    path = _suite(tmp_path, "goals: [{task: next_action, at: 1}]\n" + sweep)
    (tmp_path / "out" / "s").mkdir(parents=True)
    (tmp_path / "out" / "s" / "sample_fps=2.0").write_text("not a folder")
    junit = tmp_path / "junit.xml"
    assert cli.main(["scenario", str(path), "-o", str(tmp_path / "out"), "--junit", str(junit)]) == 2
    errors = list(ET.parse(junit).getroot().iter("error"))
    assert len(errors) == 1 and "is a file where the run writes its folder" in errors[0].get("message", "")
