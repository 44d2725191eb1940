"""What an evaluation asks and of which bags: tasks (with instruction and step), the bag times they are asked
at, and the bags named directly or as folders. Plain Python, no ROS."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["Goal", "TaskSpec", "bag_paths", "schedule", "trigger_times"]


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


def trigger_times(duration_s: float, period_s: float, at_s: Sequence[float] = ()) -> list[float]:
    """Given times inside the bag, else every period from one period in (the first clip needs frames)."""
    if at_s:
        bad = [t for t in at_s if not 0 <= t <= duration_s]
        if bad:
            raise BagError(f"trigger times {bad} lie outside the bag (0-{duration_s:.2f} s)")
        return sorted(at_s)
    if period_s <= 0:
        raise BagError("the trigger period must be > 0 (or give --at times)")
    n = int(duration_s / period_s + 1e-9)
    return [k * period_s for k in range(1, n + 1)]


def schedule(duration_s: float, goals: Sequence[Goal]) -> list[tuple[float, TaskSpec]]:
    """(bag time, task) of every goal, by time; goals at one time keep their order."""
    items = [
        (t, n, g.spec) for n, g in enumerate(goals) for t in trigger_times(duration_s, g.period_s, g.at_s)
    ]
    return [(t, spec) for t, _, spec in sorted(items, key=lambda i: (i[0], i[1]))]


def bag_paths(paths: Sequence[Path]) -> list[Path]:
    """Bags given directly or as folders of bags (every sub-folder with a metadata.yaml, sorted)."""
    found: list[Path] = []
    for path in paths:
        if (path / "metadata.yaml").is_file() or not path.is_dir():
            found.append(path)
            continue
        inside = sorted(p.parent for p in path.rglob("metadata.yaml"))
        if not inside:
            raise BagError(f"{path} is neither a bag nor a folder holding bags")
        found += inside
    labels = [p.name for p in found]
    if len(set(labels)) != len(labels):
        raise BagError(f"bags need distinct folder names to be told apart in the report: {labels}")
    return found
