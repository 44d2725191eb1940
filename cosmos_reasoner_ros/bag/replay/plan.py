"""What an evaluation asks and of which bags: tasks (with instruction and step), the bag times they are asked
at, the bags named directly or as folders, and the options of a run (EvalOptions, which the replay, the node
process, scenarios and suites share). Plain Python, no ROS."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.reader import storage_files
from cosmos_reasoner_ros.bag.safe_paths import printable
from cosmos_reasoner_ros.parameters.server_url import DEFAULT_SERVER_URL
from cosmos_reasoner_ros.parameters.server_url import server_url_problem as url_rule_problem

__all__ = [
    "EvalOptions",
    "Goal",
    "TaskSpec",
    "bag_label",
    "bag_paths",
    "schedule",
    "server_url_problem",
    "trigger_times",
]


@dataclass(frozen=True)
class TaskSpec:
    task: str
    instruction: str = ""
    step: str = ""  # the current step, for tasks that take one (assisted_next_action)

    @classmethod
    def parse(cls, text: str) -> TaskSpec:
        """`name`, `name:instruction` or `name:instruction|step`."""
        name, _, rest = text.partition(":")
        instruction, _, step = rest.partition("|")
        if not name.strip():
            raise BagError(f"task {text!r} has no name")
        return cls(name.strip(), instruction.strip(), step.strip())


@dataclass(frozen=True)
class Goal:
    """A task asked at given bag times, or every period (from one period in)."""

    spec: TaskSpec
    at_s: tuple[float, ...] = ()
    period_s: float = 0.0


def trigger_times(
    duration_s: float, period_s: float, at_s: Sequence[float] = (), start_s: float = 0.0
) -> list[float]:
    """Given times inside the replay, else every period from one period after its start (the first clip
    needs frames). Times are seconds from the recording's start: its first message, on any topic; the replay
    runs from start_s (--start) to duration_s (its last message, or --until)."""
    if start_s > duration_s:
        raise BagError(
            f"the replay would start at {start_s:g} s (--start, a scenario's start), after the recording's "
            f"last message replayed at {duration_s:.2f} s from its start (or --until)"
        )
    if at_s:
        bad = [t for t in at_s if not start_s <= t <= duration_s]
        if bad:
            raise BagError(
                f"trigger times {bad} lie outside the recording: {start_s:g}-{duration_s:.2f} s from its "
                "start (its first message, on any topic; or --start) to the last message replayed "
                "(or --until)"
            )
        return sorted(at_s)
    if period_s <= 0:
        raise BagError("the trigger period must be > 0 (or give --at times)")
    n = int(duration_s / period_s + 1e-9)
    return [k * period_s for k in range(1, n + 1) if k * period_s >= start_s + period_s - 1e-9]


def schedule(duration_s: float, goals: Sequence[Goal], start_s: float = 0.0) -> list[tuple[float, TaskSpec]]:
    """(bag time, task) of every goal, by time; goals at one time keep their order."""
    items = [
        (t, n, g.spec)
        for n, g in enumerate(goals)
        for t in trigger_times(duration_s, g.period_s, g.at_s, start_s)
    ]
    return [(t, spec) for t, _, spec in sorted(items, key=lambda i: (i[0], i[1]))]


def _is_bag(path: Path) -> bool:
    return (path / "metadata.yaml").is_file() or bool(storage_files(path))


def _bags_under(folder: Path) -> list[Path]:
    """Every bag folder under `folder`, following symbolic links (a folder of links to recordings) but never
    around a loop; sorted by path."""
    found: list[Path] = []
    seen: set[Path] = set()
    for root, dirs, _ in os.walk(folder, followlinks=True):
        here = Path(root)
        real = here.resolve()
        if real in seen:  # a link back up the tree
            dirs[:] = []
            continue
        seen.add(real)
        if here != folder and _is_bag(here):
            found.append(here)
            dirs[:] = []  # a bag's own sub-folders are not bags of the folder
        dirs.sort()
    return sorted(found)


def bag_paths(paths: Sequence[Path]) -> list[Path]:
    """Bags given directly (a bag folder, a folder of .mcap/.db3 files, or one such file) or as folders of
    bags (every sub-folder that is a bag, symbolic links followed, sorted)."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir() or _is_bag(path):  # (a missing path is reported when the bag is opened)
            found.append(path)
            continue
        inside = _bags_under(path)
        if not inside:
            raise BagError(f"{path} is neither a bag nor a folder holding bags")
        found += inside
    labels = [bag_label(p) for p in found]
    if len(set(labels)) != len(labels):
        raise BagError(f"bags need distinct folder names to be told apart in the report: {labels}")
    return found


def bag_label(path: Path) -> str:
    """A bag's name in records and reports: its folder's (or file's) name as given, links not resolved, as
    text any report can carry (safe_paths.printable)."""
    path = path.absolute()
    return printable(path.stem if path.is_file() else path.name)


@dataclass(frozen=True)
class EvalOptions:
    server_url: str = DEFAULT_SERVER_URL
    tasks: tuple[TaskSpec, ...] = (TaskSpec("next_action"),)
    period_s: float = 2.0  # [s of bag time] trigger period; ignored when `at_s` is given
    at_s: tuple[float, ...] = ()  # [s from the recording's start: its first message, any topic] trigger times
    start_s: float = 0.0  # [s from the recording's start] the replay begins here
    until_s: float | None = None  # [s from the recording's start] the replay ends here (None: the bag's end)
    goals: tuple[
        Goal, ...
    ] = ()  # each task at its own times (scenarios); when given, tasks/period/at are not used
    cameras: tuple[str, ...] = ()  # camera topics; empty: the bag's only camera topic
    infos: tuple[str, ...] = ()  # their CameraInfo topics; empty: found in the camera's namespace
    depths: tuple[str, ...] = ()  # their depth topics; empty: found when unambiguous
    params_file: Path | None = None  # node parameters; None: the shipped config/reasoner.yaml
    params: tuple[str, ...] = ()  # extra node parameters, name:=value
    rate: float = 1.0
    lock_step: bool = (
        False  # playback waits for the node's ingest before a trigger and for the answers after it
    )
    in_flight: int = 0  # at most this many requests in flight over the run (0: no bound; bags one at a time)
    timeout_s: float = 120.0  # [s] per request after playback ends / per trigger in lock-step
    startup_timeout_s: float = 60.0  # [s] for the node's action server to appear
    node_name: str = "reasoner_node"
    image_format: str = "jpg"  # annotated frames: jpg or png
    progress: bool = True
    record: bool = False  # also record the camera and the node's outputs into <out>/outputs (mcap)
    depth: bool = True  # give the node the bag's depth + CameraInfo topics (3D trajectories)
    verbose: bool = True  # say on stderr which topics were chosen (and what could not be checked)
    media_dir: Path | None = None  # where the node writes clips (the server must read it); a folder per bag

    def __post_init__(self) -> None:
        # Refused before any node starts: the URL would be on the node's command line (ps) and on
        # /parameter_events, and the node would only then exit.
        problem = server_url_problem(self.server_url, "--server-url")
        for item in self.params:
            name, _, value = item.partition(":=")
            if name.strip() == "server_url":
                problem = problem or server_url_problem(value, "-p server_url", parse=True)
        if problem:
            raise BagError(problem)
        if self.start_s < 0 or (self.until_s is not None and not self.start_s < self.until_s):
            raise BagError(f"--start ({self.start_s:g} s) must be >= 0 and before --until ({self.until_s} s)")

    def end_s(self, span_s: float) -> float:
        """Where the replay ends [s from the recording's start]: --until, or the recording's span."""
        return span_s if self.until_s is None else min(span_s, self.until_s)

    def goal_list(self) -> tuple[Goal, ...]:
        """The goals, or each task at the given times (every period)."""
        return self.goals or tuple(Goal(spec, self.at_s, self.period_s) for spec in self.tasks)


def server_url_problem(value: object, where: str, parse: bool = False) -> str:
    """The problem of a server URL given to the replayed node (parameters.server_url: not http(s), or with
    credentials), named by where it was set and never quoted with its secret; "" when there is none or the
    value is no text (the node names that). parse: `value` is YAML text (a `-p` value)."""
    if parse and isinstance(value, str):
        import contextlib

        import yaml

        with contextlib.suppress(yaml.YAMLError):  # (the node names a value it cannot read)
            value = yaml.safe_load(value)
    if not isinstance(value, str):
        return ""
    problem = url_rule_problem(value)
    return f"{where}: {problem}" if problem else ""
