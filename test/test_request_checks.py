"""request_checks: what a trigger or goal may ask, with a message that says what to change."""

from __future__ import annotations

import math

import pytest

from cosmos_reasoner_ros.pipeline import RequestSpec
from cosmos_reasoner_ros.request_checks import instruction_problem, request_problem
from cosmos_reasoner_ros.tasks import TaskCatalog

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
