"""Scenario files: a YAML file names the bag(s), the node parameters, the goals (task, instruction, bag
times), the timing mode and the tolerances of one regression case, so that a suite is a folder of scenarios.
A `sweep` (one parameter, a list of values) runs the scenario once per value. See
config/scenario_example.yaml.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels import LabelSet
from cosmos_reasoner_ros.bag.replay.node_process import check_params_file, parameter_problem
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, Goal, TaskSpec, bag_paths, server_url_problem
from cosmos_reasoner_ros.bag.runs.scenario_scoring import scenario_labels, scenario_min_scores
from cosmos_reasoner_ros.bag.runs.scoring import RunScoring
from cosmos_reasoner_ros.bag.safe_paths import printable, safe_name
from cosmos_reasoner_ros.bag.scores import MinScore
from cosmos_reasoner_ros.bag.yaml_files import load_yaml

__all__ = ["Scenario", "Variant", "inside_suite", "is_labels_file", "load_scenario", "scenario_files"]

_KEYS = {
    "name",
    "bags",
    "image_topic",
    "camera_topics",
    "info_topics",
    "depth_topics",
    "params_file",
    "params",
    "goals",
    "lock_step",
    "in_flight",
    "rate",
    "timeout_s",
    "depth",
    "tolerances",
    "baseline",
    "sweep",
    "labels",
    "min_scores",
    "start",
    "until",
}
_GOAL_KEYS = {"task", "instruction", "step", "at", "every"}


@dataclass(frozen=True)
class Variant:
    """One run of a scenario: its name, its folder under the scenario's output, and its node parameters."""

    name: str  # "" without a sweep, else "<parameter>=<value>"
    value: str  # the swept value as written; "" without a sweep
    params: tuple[str, ...]

    @property
    def folder(self) -> str:
        """The name made safe as one folder name (a value such as `a/../../x` stays inside the output)."""
        return safe_name(self.name) if self.name else ""


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    bags: tuple[Path, ...]
    goals: tuple[Goal, ...]
    params: tuple[str, ...] = ()  # name:=value (YAML values)
    params_file: Path | None = None
    cameras: tuple[str, ...] = ()
    infos: tuple[str, ...] = ()
    depths: tuple[str, ...] = ()
    lock_step: bool = True
    in_flight: int = 0
    rate: float = 1.0
    timeout_s: float = 120.0
    depth: bool = True
    tolerances: Mapping[str, Any] = field(default_factory=dict)
    baseline: Path | None = None
    sweep_parameter: str = ""
    sweep_values: tuple[Any, ...] = ()
    labels: tuple[LabelSet, ...] = ()  # one labels file per bag (labels:)
    min_scores: tuple[MinScore, ...] = ()
    start_s: float = 0.0  # [s from the recording's start] the replay begins here (evaluate --start)
    until_s: float | None = None  # [s from the recording's start] and ends here (evaluate --until)

    def scoring(self, base: RunScoring | None) -> RunScoring | None:
        """This scenario's scoring: its labels and thresholds with the command line's (base) options."""
        if not self.labels and not self.min_scores:
            return base if base is not None and base.min_scores else None
        from dataclasses import replace

        base = base if base is not None else RunScoring(())
        sources = tuple(s.source for s in self.labels)
        return replace(
            base, labels=self.labels, min_scores=(*self.min_scores, *base.min_scores), sources=sources
        )

    @property
    def folder(self) -> str:
        """The scenario's output folder name: its name made safe as one folder name."""
        return safe_name(self.name)

    def variants(self) -> list[Variant]:
        if not self.sweep_parameter:
            return [Variant("", "", self.params)]
        out = []
        for value in self.sweep_values:
            text = _value_text(value)
            out.append(
                Variant(
                    f"{self.sweep_parameter}={text}",
                    text,
                    (*self.params, _param(self.sweep_parameter, value)),
                )
            )
        return out

    def options(self, variant: Variant, base: EvalOptions) -> EvalOptions:
        """The evaluation options of one variant; `base` carries what the command line sets (server, progress,
        recording); the scenario's own values win over it."""
        from dataclasses import replace

        return replace(
            base,
            goals=self.goals,
            params=variant.params,
            params_file=self.params_file or base.params_file,
            cameras=self.cameras,
            infos=self.infos,
            depths=self.depths,
            lock_step=self.lock_step,
            in_flight=self.in_flight,
            rate=self.rate,
            timeout_s=self.timeout_s,
            depth=self.depth,
            start_s=self.start_s,
            until_s=self.until_s,
        )


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _param(name: str, value: Any) -> str:
    return f"{name}:={json.dumps(value)}"  # JSON scalars and lists are YAML, as `-p name:=value` reads them


def _number(value: Any, where: str, minimum: float = 0.0) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < minimum
    ):
        raise BagError(f"{where} must be a number >= {minimum:g}, got {value!r}")
    return float(value)


def _goal(item: Any, where: str) -> Goal:
    if isinstance(item, str):
        raise BagError(f"{where}: a goal is a mapping with task and at (or every), got {item!r}")
    if not isinstance(item, Mapping):
        raise BagError(f"{where} must be a mapping")
    unknown = set(item) - _GOAL_KEYS
    if unknown:
        raise BagError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_GOAL_KEYS))}"
        )
    task = item.get("task")
    if not isinstance(task, str) or not task.strip():
        raise BagError(f"{where}: task must be a task name")
    at = item.get("at", [])
    at = [at] if isinstance(at, (int, float)) and not isinstance(at, bool) else at
    if not isinstance(at, list):
        raise BagError(f"{where}: at must be a bag time [s] or a list of them")
    times = tuple(_number(t, f"{where}.at") for t in at)
    every = _number(item.get("every", 0.0), f"{where}.every")
    if not times and every <= 0:
        raise BagError(f"{where}: give the bag times (at) or a period (every)")
    spec = TaskSpec(task.strip(), str(item.get("instruction", "") or ""), str(item.get("step", "") or ""))
    return Goal(spec, times, every)


def _bounds(data: Mapping[str, Any], goals: Sequence[Goal], where: str) -> tuple[float, float | None]:
    """`start` and `until` [s from the recording's start], as evaluate's --start / --until: 0 <= start <
    until, and every goal's `at` time inside them (the bag's own span is checked when it is opened)."""
    start = _number(data.get("start", 0.0), f"{where}: start")
    until = None if data.get("until") is None else _number(data["until"], f"{where}: until")
    if until is not None and not start < until:
        raise BagError(f"{where}: until ({until:g} s) must come after start ({start:g} s)")
    for i, goal in enumerate(goals):
        if outside := [t for t in goal.at_s if t < start or (until is not None and t > until)]:
            span = f"{start:g}-{until:g} s" if until is not None else f"from {start:g} s"
            raise BagError(f"{where}: goals[{i}].at {outside} lie outside the replay ({span}: start, until)")
    return start, until


def _topics(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key) or []
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(t, str) and t.startswith("/") for t in value):
        raise BagError(f"{where}: {key} must be an absolute topic name or a list of them")
    return tuple(value)


_PARAMETER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


# Node parameters that name a file the node reads (a scenario's value is confined to the suite's folder),
# and those the run sets itself (a scenario cannot move where the node writes).
_PATH_PARAMETERS = ("tasks_file",)
_RUN_PARAMETERS = ("media_dir", "use_sim_time")


def inside_suite(value: Any, key: str, suite: Path, where: str) -> Path:
    """A path a scenario names, inside the suite's folder (the scenario file's folder): relative, without
    `..`; a symbolic link the suite's folder holds is followed (that is how a suite reaches a bag store)."""
    if not isinstance(value, str) or not value:
        raise BagError(f"{where}: {key} must be a path")
    path = PurePath(value)
    if path.is_absolute() or value.startswith("~") or ".." in path.parts:
        raise BagError(
            f"{where}: {key} must name a path inside the suite's folder {printable(str(suite))} (relative, "
            "without '..'); a symbolic link in that folder may lead to bags kept elsewhere"
        )
    return suite / path


# A node parameter's value checked as the node gets it: (name, value, where it was written) -> value.
_NodeValue = Callable[[str, Any, str], Any]


def _params(value: Any, node_value: _NodeValue, where: str) -> tuple[str, ...]:
    """`params:` as `name:=value` items, each name and value checked."""
    value = value or {}
    if not isinstance(value, Mapping):
        raise BagError(f"{where}: params must be a mapping of node parameter to value")
    for key in value:
        if not _PARAMETER.match(str(key)):
            raise BagError(f"{where}: params: {str(key)[:80]!r} is not a ROS parameter name")
    params = tuple(_param(str(k), node_value(str(k), v, f"params.{k}")) for k, v in value.items())
    if problem := server_url_problem(value.get("server_url"), f"{where}: params: server_url"):
        raise BagError(problem)
    return params


def _sweep(sweep: Any, node_value: _NodeValue, where: str) -> tuple[str, tuple[Any, ...]]:
    """`sweep:` as (parameter, values); ("", ()) without one. Every value checked as the node gets it."""
    if sweep is None:
        return "", ()
    if not isinstance(sweep, Mapping) or set(sweep) != {"parameter", "values"}:
        raise BagError(f"{where}: sweep needs exactly `parameter` and `values`")
    parameter = str(sweep["parameter"])
    if not _PARAMETER.match(parameter):
        raise BagError(f"{where}: sweep.parameter {parameter[:80]!r} is not a ROS parameter name")
    if not isinstance(sweep["values"], list) or not sweep["values"]:
        raise BagError(f"{where}: sweep.values must be a non-empty list")
    values = tuple(node_value(parameter, v, f"sweep.values[{i}]") for i, v in enumerate(sweep["values"]))
    if len({_value_text(v) for v in values}) != len(values):
        raise BagError(f"{where}: sweep.values must be distinct")
    if parameter == "server_url":
        for i, value in enumerate(values):
            if problem := server_url_problem(value, f"{where}: sweep.values[{i}]"):
                raise BagError(problem)
    return parameter, values


def _run_settings(data: Mapping[str, Any], where: str) -> tuple[bool, bool, int, float]:
    """lock_step, depth, in_flight and rate, checked."""
    lock_step = data.get("lock_step", True)
    if not isinstance(lock_step, bool):
        raise BagError(f"{where}: lock_step must be true or false")
    depth = data.get("depth", True)
    if not isinstance(depth, bool):
        raise BagError(f"{where}: depth must be true or false")
    in_flight = data.get("in_flight", 0)
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 0:
        raise BagError(f"{where}: in_flight must be an integer >= 0")
    rate = _number(data.get("rate", 1.0), f"{where}: rate")
    if rate <= 0:
        raise BagError(f"{where}: rate must be > 0")
    return lock_step, depth, in_flight, rate


def load_scenario(path: Path) -> Scenario:
    """A scenario file; the paths it names lie inside its folder (the suite's). Raises BagError naming the
    problem, never quoting a file's content."""
    data = load_yaml(path, "scenario")
    where = printable(str(path))
    if not isinstance(data, Mapping):
        raise BagError(f"scenario {where} must be a mapping")
    unknown = {str(k) for k in data} - _KEYS
    if unknown:
        listed = ", ".join(sorted(printable(k)[:40] for k in unknown)[:10])
        raise BagError(f"{where}: unknown key(s) {listed}; known: {', '.join(sorted(_KEYS))}")
    here = path.parent

    def rel(value: Any, key: str) -> Path:
        return inside_suite(value, key, here, where)

    def node_value(name: str, value: Any, what: str) -> Any:
        """A node parameter's value as the node gets it: checked, a file it names inside the suite."""
        if name in _RUN_PARAMETERS:
            raise BagError(f"{where}: {what}: {name} is set by the run (--media-dir, the bag's clock)")
        if problem := parameter_problem(name, value):
            raise BagError(f"{where}: {what}: {problem}")
        if name in _PATH_PARAMETERS and value:
            return str(rel(value, f"{what} ({name})").absolute())
        return value

    bags_value = data.get("bags")
    bags_list = [bags_value] if isinstance(bags_value, str) else bags_value
    if not isinstance(bags_list, list) or not bags_list:
        raise BagError(f"{where}: bags must name at least one bag (or a folder of bags)")
    bags = tuple(bag_paths([rel(b, "bags") for b in bags_list]))
    goals_value = data.get("goals")
    if not isinstance(goals_value, list) or not goals_value:
        raise BagError(f"{where}: goals must list at least one goal")
    goals = tuple(_goal(g, f"{where}: goals[{i}]") for i, g in enumerate(goals_value))
    params = _params(data.get("params"), node_value, where)
    tolerances = data.get("tolerances") or {}
    if not isinstance(tolerances, Mapping):
        raise BagError(f"{where}: tolerances must be a mapping (the layout of config/tolerances.yaml)")
    parameter, values = _sweep(data.get("sweep"), node_value, where)
    lock_step, depth, in_flight, rate = _run_settings(data, where)
    name = printable(str(data.get("name") or path.stem))
    if not name.strip():
        raise BagError(f"{where}: name must not be empty")
    cameras = _topics(data, "camera_topics", where) or _topics(data, "image_topic", where)
    params_file = rel(data["params_file"], "params_file") if data.get("params_file") else None
    if params_file is not None:
        check_params_file(params_file)  # every scenario's, before the first one runs
    start_s, until_s = _bounds(data, goals, where)
    labels = scenario_labels(data.get("labels"), bags, rel, where)
    min_scores = scenario_min_scores(data.get("min_scores"), where)
    return Scenario(
        name=name,
        path=path,
        bags=bags,
        goals=goals,
        params=params,
        params_file=params_file,
        cameras=cameras,
        infos=_topics(data, "info_topics", where),
        depths=_topics(data, "depth_topics", where),
        lock_step=lock_step,
        in_flight=in_flight,
        rate=rate,
        timeout_s=_number(data.get("timeout_s", 120.0), f"{where}: timeout_s"),
        depth=depth,
        tolerances=tolerances,
        baseline=rel(data["baseline"], "baseline") if data.get("baseline") else None,
        sweep_parameter=parameter,
        sweep_values=values,
        labels=labels,
        min_scores=min_scores,
        start_s=start_s,
        until_s=until_s,
    )


def is_labels_file(path: Path) -> bool:
    """The naming rule that tells a labels file from a scenario beside it: `*.labels.yaml` (as `labels draft`
    names them) or `labels.yaml` (.yml too; any case)."""
    name = path.name.lower()
    return name in ("labels.yaml", "labels.yml") or name.endswith((".labels.yaml", ".labels.yml"))


def scenario_files(paths: Sequence[Path]) -> list[Path]:
    """Scenario files given directly or as folders of them (*.yaml / *.yml, sorted, not recursive), labels
    files beside them left out (is_labels_file)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(
                p
                for p in path.iterdir()
                if p.suffix in (".yaml", ".yml") and p.is_file() and not is_labels_file(p)
            )
            if not inside:
                raise BagError(f"{path} holds no scenario (*.yaml, labels files *.labels.yaml left out)")
            found += inside
        elif path.is_file() and is_labels_file(path):
            raise BagError(f"{path} is a labels file (*.labels.yaml), not a scenario: a scenario names it")
        elif path.is_file():
            found.append(path)
        else:
            raise BagError(f"scenario {path} does not exist")
    return found
