"""What a trigger or goal may ask, checked before it is queued, without ROS: known cameras and tasks, a
clip length within the buffer, instructions within bounds, a finite deadline and age limit, at most
MAX_TASKS_PER_CLIP tasks about one clip. A refusal becomes an invalid_request result (one per task) whose
message says what to change and quotes at most a bounded prefix of what was asked.

`size_problem` comes first, before anything is built from a goal: the number of tasks, instructions and
cameras, and the length of each name and text, in time bounded by the limits, not by the goal (anyone on the
ROS graph can send a goal of 100,000 tasks). A goal too large is one refused request, not one per task.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from cosmos_reasoner_ros.errors import quoted
from cosmos_reasoner_ros.reasoner import TaskCatalog
from cosmos_reasoner_ros.requests.groups import MAX_TASKS_PER_CLIP, RequestGroup
from cosmos_reasoner_ros.requests.outcome import RequestSpec

__all__ = [
    "MAX_CAMERAS_PER_REQUEST",
    "MAX_NAME_CHARS",
    "group_problem",
    "instruction_problem",
    "request_problem",
    "size_problem",
]

_MAX_SECONDS = 86400.0  # a deadline or age limit beyond a day is a mistake (or an overflow waiting to happen)
MAX_NAME_CHARS = 128  # a task or camera name longer than this is no name (the shipped ones are below 30)
MAX_CAMERAS_PER_REQUEST = 64  # camera names one goal may list (each must also be a configured camera)


def size_problem(
    tasks: Sequence[str],
    instructions: Sequence[str],
    cameras: Sequence[str],
    texts: Sequence[str],
    max_instruction_chars: int,
) -> str:
    """Why a trigger or goal is too large to be looked at further, or ''. Counts first, then the length of
    each item, so that the work is bounded by the limits whatever was sent (len() of a str is O(1)).
    `texts`: the instruction and step."""
    for what, items, limit in (
        ("tasks", tasks, MAX_TASKS_PER_CLIP),
        ("instructions", instructions, MAX_TASKS_PER_CLIP),
        ("cameras", cameras, MAX_CAMERAS_PER_REQUEST),
    ):
        if len(items) > limit:
            about = " about one clip" if what == "tasks" else ""
            return f"at most {limit} {what}{about}, got {len(items)}"
    for what, names in (("task", tasks), ("camera", cameras)):
        for name in names:
            if len(name) > MAX_NAME_CHARS:
                return f"{what} name of {len(name)} characters, more than {MAX_NAME_CHARS}: {quoted(name)}"
    for text in (*texts, *instructions):
        if len(text) > max_instruction_chars:
            return (
                f"instruction: {len(text)} characters, more than max_instruction_chars "
                f"({max_instruction_chars})"
            )
    return ""


def instruction_problem(text: str, max_chars: int) -> str:
    """Why an instruction (or step) text is refused, or ''. Nothing is shortened or cut silently: a ROS string
    ends at a NUL, so one in the middle would send a different instruction than the caller wrote."""
    if len(text) > max_chars:
        return f"{len(text)} characters, more than max_instruction_chars ({max_chars})"
    if "\x00" in text:
        return "it contains a NUL character"
    return ""


def _seconds_problem(name: str, value: float) -> str:
    if not (math.isfinite(value) and 0 <= value <= _MAX_SECONDS):
        return f"{name} must be 0 (none) or a number of seconds up to {_MAX_SECONDS:g}, got {value}"
    return ""


def request_problem(
    spec: RequestSpec,
    cameras: Collection[str],
    catalog: TaskCatalog,
    buffer_seconds: float,
    max_instruction_chars: int,
    explicit_instruction: bool,
) -> str:
    """Why a request cannot run as asked, or ''. explicit_instruction: the caller gave the instruction itself
    (a goal), not the node's default, so a task without a place for it is an error, not a silent drop."""
    unknown = [c for c in spec.cameras if c not in cameras]
    if unknown:
        more = f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
        shown = ", ".join(quoted(c) for c in unknown[:4])
        return f"unknown cameras [{shown}]{more}; configured: {', '.join(cameras)}"
    if not (math.isfinite(spec.clip_seconds) and 0 <= spec.clip_seconds <= buffer_seconds):
        return (
            f"clip_seconds must be 0 (the default) or up to buffer_seconds ({buffer_seconds}), "
            f"got {spec.clip_seconds}"
        )
    for name, seconds in (("deadline_s", spec.deadline_s), ("max_result_age_s", spec.max_result_age_s)):
        problem = _seconds_problem(name, seconds)
        if problem:
            return problem
    if spec.task not in catalog:
        return f"unknown task {quoted(spec.task)}; known: {', '.join(catalog.names())}"
    for name, text in (("instruction", spec.instruction), ("step", spec.step)):
        problem = instruction_problem(text, max_instruction_chars)
        if problem:
            return f"{name}: {problem}"
    if explicit_instruction and spec.instruction and not catalog.spec(spec.task).placeholders:
        takes = [n for n in catalog.names() if catalog.spec(n).placeholders]
        return f"task {spec.task!r} takes no instruction (tasks that take one: {', '.join(takes)})"
    return ""


def group_problem(
    group: RequestGroup,
    cameras: Collection[str],
    catalog: TaskCatalog,
    buffer_seconds: float,
    max_instruction_chars: int,
) -> str:
    """Why the requests about one clip cannot run as asked, or '' (the first problem, naming its task)."""
    if group.problem:
        return group.problem
    if not group.specs:
        return "no task to ask"
    if len(group.specs) > MAX_TASKS_PER_CLIP:
        return f"at most {MAX_TASKS_PER_CLIP} tasks about one clip, got {len(group.specs)}"
    for i, (spec, explicit) in enumerate(zip(group.specs, group.explicit_instruction, strict=True)):
        problem = request_problem(spec, cameras, catalog, buffer_seconds, max_instruction_chars, explicit)
        if problem:
            return f"task {i + 1} ({spec.task}): {problem}" if len(group.specs) > 1 else problem
    return ""
