"""From a trigger to admitted requests, without ROS: the node's defaults (task, instruction, trigger settings,
age limit) filled in, ids given, the group checked (requests/checks.py), then handed to the scheduler, which
never blocks. Also the standing instruction (`~/instruction`) and whether frames are worth pre-encoding now.

The node passes its clock and name; the ROS callbacks (service, timer, action, topic) call in here.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
import time
import uuid
from collections.abc import Callable

from cosmos_reasoner_ros.errors import TaskError
from cosmos_reasoner_ros.node.parameters import NodeConfig
from cosmos_reasoner_ros.reasoner import TaskCatalog
from cosmos_reasoner_ros.requests import (
    MAX_NAME_CHARS,
    GroupSettings,
    Job,
    Outcome,
    ProgressCallback,
    RequestGroup,
    RequestScheduler,
    build_group,
    group_problem,
    instruction_problem,
    size_problem,
)

__all__ = ["RequestIntake", "instruction_from_cdr"]

_CDR_LITTLE_ENDIAN = {0: False, 1: True, 6: False, 7: True}  # CDR and XCDR2, big and little endian


def instruction_from_cdr(raw: bytes) -> tuple[str, str]:
    """A serialized std_msgs/String (the raw bytes of ~/instruction) as (text, problem). rclpy hands a string
    over up to its first NUL, so an instruction with one ran cut at it: read from the bytes, the NUL is seen
    and the instruction refused. Text that is not UTF-8, or bytes that are not such a message, are refused."""
    if len(raw) < 8 or raw[0] != 0 or raw[1] not in _CDR_LITTLE_ENDIAN:
        return "", "not a serialized std_msgs/String"
    size = int.from_bytes(raw[4:8], "little" if _CDR_LITTLE_ENDIAN[raw[1]] else "big")
    data = raw[8 : 8 + size]
    if size == 0 or len(data) != size or data[-1] != 0:
        return "", "not a serialized std_msgs/String"
    try:
        text = data[:-1].decode("utf-8")
    except UnicodeDecodeError:
        return "", "it is not valid UTF-8"
    return text, ""


class RequestIntake:
    """Builds each trigger's requests and submits them; thread-safe (callbacks run on several threads)."""

    def __init__(
        self,
        config: NodeConfig,
        catalog: TaskCatalog,
        scheduler: Callable[[], RequestScheduler],
        now_ns: Callable[[], int],
        name: str,
    ) -> None:
        self.config = config
        self.catalog = catalog
        self._cameras = tuple(c.name for c in config.cameras)
        self._scheduler = scheduler  # the node makes a new one at each activation
        self._now_ns = now_ns
        self._name = name
        self._lock = threading.Lock()
        self._instruction = config.instruction
        self._ids = itertools.count(1)
        self._last_trigger = -math.inf

    @property
    def instruction(self) -> str:
        """The standing instruction: what requests without their own take."""
        with self._lock:
            return self._instruction

    def set_instruction(self, text: str, problem: str = "") -> str:
        """Take a new standing instruction; the reason it is refused (and the old one kept), or ''. `problem`:
        already found (instruction_from_cdr)."""
        problem = problem or instruction_problem(text, self.config.max_instruction_chars)
        if not problem:
            with self._lock:
                self._instruction = text
        return problem

    def new_group(self, tasks: tuple[str, ...] = (), settings: GroupSettings | None = None) -> RequestGroup:
        """The requests of one trigger or goal about one clip: one per task (empty: the default task), sharing
        the cameras, window, trigger time, deadline and a clip id. The node's defaults fill in what `settings`
        leave open: no instruction takes the standing one; max_result_age_s 0 takes the node's parameter,
        negative is no limit."""
        cfg = self.config
        base_id = f"{self._name}-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        trigger_time, trigger_ns = time.monotonic(), self._now_ns()  # one for the whole clip
        s = settings or GroupSettings()
        # Too large to look at (a goal of 100,000 tasks, a name of a megabyte): one refused request, built
        # from bounded prefixes, before anything else is made of it.
        too_large = size_problem(
            tasks, s.instructions, s.cameras, (s.instruction, s.step), cfg.max_instruction_chars
        )
        if too_large:
            first = build_group(
                self.catalog,
                base_id,
                ((tasks[0] if tasks else cfg.task)[:MAX_NAME_CHARS],),
                GroupSettings(instruction=s.instruction[: cfg.max_instruction_chars]),
                trigger_time=trigger_time,
                trigger_ns=trigger_ns,
            )
            return RequestGroup(first.specs, first.explicit_instruction, too_large)
        if s.max_result_age_s == 0:
            s = dataclasses.replace(s, max_result_age_s=cfg.max_result_age_s)
        elif s.max_result_age_s < 0:
            s = dataclasses.replace(s, max_result_age_s=0.0)  # this goal wants no limit
        if not s.instruction:
            s = dataclasses.replace(s, instruction=self.instruction)
        return build_group(
            self.catalog, base_id, tasks or (cfg.task,), s, trigger_time=trigger_time, trigger_ns=trigger_ns
        )

    def trigger_group(self) -> RequestGroup:
        """The requests of a ~/trigger call or a timer tick: trigger_tasks with the trigger_* settings."""
        cfg = self.config
        settings = GroupSettings(deadline_s=cfg.trigger_deadline_s, reasoning=cfg.trigger_reasoning)
        return self.new_group(cfg.trigger_task_names(), settings)

    def submit(
        self,
        group: RequestGroup,
        on_progress: ProgressCallback | None = None,
        on_done: Callable[[tuple[Outcome, ...]], None] | None = None,
    ) -> tuple[Job, str]:
        """Queue the requests of one trigger (never blocks); each outcome is published exactly once. Returns
        the job and, when it was not admitted, the reason."""
        self._last_trigger = time.monotonic()
        first = group.specs[0]
        cfg = self.config
        job = Job(
            spec=first,
            group=tuple(sorted(first.cameras or self._cameras)),
            on_progress=on_progress,
            on_done=on_done,
            more=group.specs[1:],
        )
        scheduler = self._scheduler()
        problem = group_problem(
            group, self._cameras, self.catalog, cfg.buffer_seconds, cfg.max_instruction_chars
        )
        if problem:
            scheduler.fail(job, TaskError(problem))
            return job, problem
        return job, scheduler.submit(job).reason

    def pre_encoding(self) -> bool:
        """Whether arriving frames are worth encoding ahead: always ("on"), with a timer, or while triggers
        come (within a buffer's length of the last one)."""
        cfg = self.config
        return (
            cfg.pre_encode == "on"
            or cfg.trigger_period_s > 0
            or time.monotonic() - self._last_trigger < cfg.buffer_seconds
        )
