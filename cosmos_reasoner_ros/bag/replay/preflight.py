"""What a replay checks before it starts a node: every goal's task is in the catalog the node will load (the
shipped one, with the run's `tasks_file` over it, from `-p` or the parameter file). A misspelled task is bad
input (exit 2 in a second), not a run that replays the whole bag to fail each request."""

from __future__ import annotations

from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.replay.node_process import node_parameter
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions
from cosmos_reasoner_ros.bag.safe_paths import printable
from cosmos_reasoner_ros.errors import ReasonerError
from cosmos_reasoner_ros.reasoner import TaskCatalog

__all__ = ["answer_kinds", "check_tasks"]


def _catalog(options: EvalOptions) -> TaskCatalog:
    value = node_parameter(options, "tasks_file")
    if value in (None, ""):
        return TaskCatalog.load(None)
    if not isinstance(value, str):
        raise BagError(f"node parameter tasks_file must be a path, got {type(value).__name__}")
    path = Path(value).expanduser()
    if not path.is_file():
        raise BagError(f"node parameter tasks_file: {printable(str(path))} is not a file")
    try:
        return TaskCatalog.load(path)
    except (ReasonerError, ValueError, OSError) as exc:
        raise BagError(f"node parameter tasks_file: {exc}") from None


def check_tasks(options: EvalOptions, where: str = "") -> None:
    """BagError naming the first unknown task and the known ones; `where` begins the message (a scenario)."""
    catalog = _catalog(options)
    for goal in options.goal_list():
        if goal.spec.task not in catalog:
            known = ", ".join(sorted(catalog.names()))
            raise BagError(f"{where}unknown task {printable(goal.spec.task)[:80]!r} (known: {known})")


def answer_kinds(options: EvalOptions) -> dict[str, str]:
    """Each task of the catalog the node loads, with its answer kind: the judge compares a task's answers by
    its own kind (a regions answer by IoU and caption similarity, not by the IoU of its boxes alone)."""
    catalog = _catalog(options)
    return {name: catalog.spec(name).answer_kind for name in catalog}
