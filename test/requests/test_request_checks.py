"""request_checks: what a trigger or goal may ask, with a message that says what to change."""

from __future__ import annotations

import math

import pytest

from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog
from cosmos_reasoner_ros.requests.checks import group_problem, instruction_problem, request_problem
from cosmos_reasoner_ros.requests.groups import MAX_TASKS_PER_CLIP, GroupSettings, RequestGroup, build_group
from cosmos_reasoner_ros.requests.outcome import RequestSpec

CATALOG = TaskCatalog.load()


def problem(explicit: bool = True, **fields: object) -> str:
    spec = RequestSpec(request_id="r", task=str(fields.pop("task", "custom")), **fields)  # type: ignore[arg-type]
    return request_problem(spec, ["front", "wrist"], CATALOG, 30.0, 2000, explicit)


def test_a_good_request_passes() -> None:
    assert problem(instruction="describe the scene", cameras=("front",), clip_seconds=4.0) == ""


@pytest.mark.parametrize("seconds", [math.inf, math.nan, -1.0, 31.0])
def test_clip_seconds_must_be_finite_and_within_the_buffer(seconds: float) -> None:
    said = problem(clip_seconds=seconds)
    assert "clip_seconds must be 0 (the default) or up to buffer_seconds (30.0)" in said


def test_cameras_task_and_instruction() -> None:
    assert "unknown cameras ['rear']" in problem(cameras=("rear",))
    assert "unknown task 'fly'" in problem(task="fly")
    long = problem(instruction="y" * 5000)
    assert "instruction: 5000 characters, more than max_instruction_chars (2000)" in long
    assert "step: it contains a NUL" in problem(task="assisted_next_action", instruction="t", step="a\x00b")
    said = problem(task="next_action", instruction="open the drawer")
    assert "task 'next_action' takes no instruction" in said and "assisted_next_action" in said
    assert problem(explicit=False, task="next_action", instruction="the node's default") == ""


def test_instruction_problem() -> None:
    assert instruction_problem("ok", 2) == ""
    assert "3 characters" in instruction_problem("abc", 2)


@pytest.mark.parametrize("name", ["deadline_s", "max_result_age_s"])
@pytest.mark.parametrize("seconds", [math.inf, math.nan, -1.0, 1e9])
def test_deadline_and_age_limit_must_be_finite_and_bounded(name: str, seconds: float) -> None:
    assert f"{name} must be 0 (none) or a number of seconds up to 86400" in problem(**{name: seconds})
    assert problem(**{name: 2.5}) == ""


def group(*specs: RequestSpec, explicit: tuple[bool, ...] = (), note: str = "") -> str:
    flags = explicit or tuple(False for _ in specs)
    return group_problem(RequestGroup(specs, flags, note), ["front"], CATALOG, 30.0, 2000)


def test_a_group_of_tasks_is_checked_task_by_task_and_bounded() -> None:
    ok = (RequestSpec("a", "next_action"), RequestSpec("b", "grounding_2d", "the cup"))
    assert group(*ok, explicit=(False, True)) == ""
    assert group(RequestSpec("a", "next_action"), RequestSpec("b", "fly")) == (
        "task 2 (fly): unknown task 'fly'; known: " + ", ".join(CATALOG.names())
    )
    too_many = [RequestSpec(f"r{i}", "caption") for i in range(MAX_TASKS_PER_CLIP + 1)]
    assert (
        group(*too_many) == f"at most {MAX_TASKS_PER_CLIP} tasks about one clip, got {MAX_TASKS_PER_CLIP + 1}"
    )
    assert group() == "no task to ask"
    assert group(*ok, note="2 instructions for 3 tasks") == "2 instructions for 3 tasks"
    single = group(RequestSpec("a", "next_action", "open it"), explicit=(True,))
    assert single.startswith("task 'next_action' takes no instruction")  # one task: no "task 1" prefix


def test_several_tasks_share_the_instruction_among_those_that_take_one() -> None:
    shared = GroupSettings(instruction="open the drawer", explicit_instruction=True)
    group = build_group(CATALOG, "n-1-ab", ("next_action", "custom"), shared)
    assert [s.request_id for s in group.specs] == ["n-1-ab-1", "n-1-ab-2"]
    assert {s.clip_id for s in group.specs} == {"n-1-ab"}
    assert [s.instruction for s in group.specs] == ["", "open the drawer"]
    assert group.explicit_instruction == (False, True) and group.problem == ""
    alone = build_group(CATALOG, "n-2-cd", ("next_action",), shared)
    assert alone.specs[0].request_id == "n-2-cd" and alone.specs[0].instruction == "open the drawer"
    nowhere = build_group(
        CATALOG, "n-3", ("next_action", "caption"), GroupSettings(instruction="x", explicit_instruction=True)
    )
    assert "takes an instruction" in nowhere.problem
    assert (
        "2 instructions for 1 tasks"
        in build_group(CATALOG, "n-4", ("custom",), GroupSettings(instructions=("a", "b"))).problem
    )
