"""The requests one trigger or goal makes about one clip, without ROS: one per task, sharing the cameras, the
window, the trigger time, the deadline, the age limit and a clip id; and whose instruction each one takes.

The node gives the ids and the clock; checks.py then says whether the group may run.
"""

from __future__ import annotations

from dataclasses import dataclass

from cosmos_reasoner_ros.reasoner import TaskCatalog
from cosmos_reasoner_ros.requests.outcome import RequestSpec

__all__ = ["MAX_TASKS_PER_CLIP", "GroupSettings", "RequestGroup", "build_group"]

MAX_TASKS_PER_CLIP = 8  # tasks asked of one clip at most (a goal's tasks, trigger_tasks): one thread each


@dataclass(frozen=True)
class GroupSettings:
    """What a trigger or goal asks of its clip beside the task names: the one place a new goal field is added
    (the node's intake fills in its defaults; build_group gives it to every request of the group)."""

    instruction: str = ""
    step: str = ""
    cameras: tuple[str, ...] = ()
    clip_seconds: float = 0.0  # 0: the node's default
    instructions: tuple[str, ...] = ()  # one per task, instead of instruction
    deadline_s: float = 0.0  # 0: none
    reasoning: bool = True
    max_result_age_s: float = 0.0
    explicit_instruction: bool = False  # the caller gave the instruction itself (not the standing one)


@dataclass(frozen=True)
class RequestGroup:
    """The requests one trigger or goal makes about one clip (one per task), and for each whether the caller
    gave its instruction itself (then a task without a place for it is an error, not a silent drop)."""

    specs: tuple[RequestSpec, ...]
    explicit_instruction: tuple[bool, ...]
    problem: str = ""  # found while building the group (e.g. instructions that fit no task)


def build_group(
    catalog: TaskCatalog,
    base_id: str,
    names: tuple[str, ...],
    settings: GroupSettings = GroupSettings(),
    *,
    trigger_time: float = 0.0,
    trigger_ns: int = 0,
) -> RequestGroup:
    """One task takes the instruction as before; several share it among those tasks that take one (or each
    gets its own from `instructions`). Request ids: `base_id` (one task) or `base_id-<n>`; clip id: base_id.
    """
    instruction, instructions = settings.instruction, settings.instructions
    explicit_instruction = settings.explicit_instruction
    problem = ""
    if instructions and len(instructions) != len(names):
        problem = f"{len(instructions)} instructions for {len(names)} tasks (one per task, or none)"

    def takes_one(name: str) -> bool:
        return name in catalog and bool(catalog.spec(name).placeholders)

    specs: list[RequestSpec] = []
    explicit: list[bool] = []
    for i, name in enumerate(names):
        own = instructions[i] if i < len(instructions) else ""
        if own:
            text, given = own, True
        elif len(names) == 1:
            text, given = instruction, explicit_instruction
        else:  # the shared instruction goes to the tasks that have a place for it
            text, given = (instruction, explicit_instruction) if takes_one(name) else ("", False)
        specs.append(
            RequestSpec(
                request_id=base_id if len(names) == 1 else f"{base_id}-{i + 1}",
                task=name,
                instruction=text,
                step=settings.step,
                cameras=settings.cameras,
                clip_seconds=settings.clip_seconds,
                trigger_time=trigger_time,
                trigger_ns=trigger_ns,
                clip_id=base_id,
                reasoning=settings.reasoning,
                deadline_s=settings.deadline_s,
                max_result_age_s=settings.max_result_age_s,
            )
        )
        explicit.append(given)
    left = [n for i, n in enumerate(names) if not (i < len(instructions) and instructions[i])]
    if len(names) > 1 and explicit_instruction and instruction and not any(map(takes_one, left)):
        problem = problem or f"none of the tasks {list(left)} takes an instruction"
    return RequestGroup(tuple(specs), tuple(explicit), problem)
