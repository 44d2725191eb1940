"""The handoff's parameters (`handoff.*` of reasoner_node): the frozen HandoffSettings read through the node's
declare callback, and the validation of a whole setting, without ROS. Every fact of a parameter (default,
unit, range, choices, description) is its record's (cosmos_reasoner_ros/parameters/handoff.py);
config/reasoner.yaml documents each one, and a test holds it to the records.

Off by default (`handoff.mode: none`): then nothing else of the handoff is checked, made or imported.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, fields
from typing import Any

from cosmos_reasoner_ros.geometry import GroundPlane
from cosmos_reasoner_ros.handoff.ground_path import PathLimits
from cosmos_reasoner_ros.parameters.check_names import NO_CHECKS, check_names_problem
from cosmos_reasoner_ros.parameters.handoff import HANDOFF_PARAMETERS as HANDOFF_PARAMETER_RECORDS
from cosmos_reasoner_ros.parameters.handoff import HANDOFF_PREFIX, HANDOFF_RECORDS

_MODE = HANDOFF_PARAMETER_RECORDS["mode"]
_DEFAULTS = {r.name: r.default for r in HANDOFF_RECORDS}

__all__ = [
    "ACTIONS",
    "DEFAULT_ACTION_NAMES",
    "HANDOFF_PARAMETERS",
    "MODES",
    "ON_REFUSAL",
    "ON_STOP",
    "HandoffSettings",
    "read_settings",
    "settings_problems",
]

PREFIX = HANDOFF_PREFIX
MODES = _MODE.choices or ()
ACTIONS = ("follow_path", "navigate_to_pose")  # the modes that send goals to Nav2
DEFAULT_ACTION_NAMES = {"follow_path": "/follow_path", "navigate_to_pose": "/navigate_to_pose"}
ON_REFUSAL = HANDOFF_PARAMETER_RECORDS["on_refusal"].choices or ()
ON_STOP = HANDOFF_PARAMETER_RECORDS["on_stop"].choices or ()


@dataclass(frozen=True)
class HandoffSettings:
    mode: str = _DEFAULTS["mode"]
    tasks: str = _DEFAULTS["tasks"]
    camera: str = _DEFAULTS["camera"]
    camera_info_topic: str = _DEFAULTS["camera_info_topic"]
    frame_id: str = _DEFAULTS["frame_id"]
    camera_height_m: float = _DEFAULTS["camera_height_m"]
    camera_pitch_deg: float = _DEFAULTS["camera_pitch_deg"]
    path_spacing_m: float = _DEFAULTS["path_spacing_m"]
    max_path_length_m: float = _DEFAULTS["max_path_length_m"]
    min_path_length_m: float = _DEFAULTS["min_path_length_m"]
    max_start_distance_m: float = _DEFAULTS["max_start_distance_m"]
    max_range_m: float = _DEFAULTS["max_range_m"]
    max_age_s: float = _DEFAULTS["max_age_s"]
    checks: tuple[str, ...] = tuple(_DEFAULTS["checks"])
    agreement_answers: int = _DEFAULTS["agreement_answers"]
    agreement_max_spread_m: float = _DEFAULTS["agreement_max_spread_m"]
    validate_path: bool = _DEFAULTS["validate_path"]
    is_path_valid_service: str = _DEFAULTS["is_path_valid_service"]
    path_valid_frame: str = _DEFAULTS["path_valid_frame"]
    path_valid_max_cost: int = _DEFAULTS["path_valid_max_cost"]
    path_valid_unknown_is_obstacle: bool = _DEFAULTS["path_valid_unknown_is_obstacle"]
    confirm: bool = _DEFAULTS["confirm"]
    on_refusal: str = _DEFAULTS["on_refusal"]
    on_stop: str = _DEFAULTS["on_stop"]
    action_name: str = _DEFAULTS["action_name"]
    controller_id: str = _DEFAULTS["controller_id"]
    goal_checker_id: str = _DEFAULTS["goal_checker_id"]
    progress_checker_id: str = _DEFAULTS["progress_checker_id"]
    behavior_tree: str = _DEFAULTS["behavior_tree"]
    server_timeout_s: float = _DEFAULTS["server_timeout_s"]
    goal_response_timeout_s: float = _DEFAULTS["goal_response_timeout_s"]
    result_timeout_s: float = _DEFAULTS["result_timeout_s"]
    discovery_timeout_s: float = _DEFAULTS["discovery_timeout_s"]

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    @property
    def dry_run(self) -> bool:
        return self.mode == "dry_run"

    @property
    def sends(self) -> bool:
        """Goals go to Nav2 (follow_path or navigate_to_pose): nav2_msgs is needed."""
        return self.mode in ACTIONS

    @property
    def action(self) -> str:
        """The action's name: action_name, else the mode's Nav2 default ('' when nothing is sent)."""
        return self.action_name or DEFAULT_ACTION_NAMES.get(self.mode, "")

    def ground_plane(self) -> GroundPlane:
        """The ground under the camera (camera_height_m, camera_pitch_deg); ValueError when unusable."""
        return GroundPlane.from_degrees(self.camera_height_m, self.camera_pitch_deg)

    def path_limits(self) -> PathLimits:
        return PathLimits(
            self.path_spacing_m,
            self.max_path_length_m,
            self.max_start_distance_m,
            self.max_range_m,
            self.min_path_length_m,
        )

    def task_names(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in self.tasks.split(",") if name.strip())

    def required_checks(self) -> tuple[str, ...]:
        return () if NO_CHECKS in self.checks else self.checks


# name (without the `handoff.` prefix) -> (default, description with its unit), in the records' order
# (cosmos_reasoner_ros/parameters/handoff.py holds every fact; these views are theirs).
HANDOFF_PARAMETERS: dict[str, tuple[Any, str]] = {
    r.name: (list(r.default) if r.type is list else r.default, r.documentation) for r in HANDOFF_RECORDS
}
assert list(HANDOFF_PARAMETERS) == [f.name for f in fields(HandoffSettings)]
RANGES: dict[str, tuple[float, float]] = {r.name: r.range for r in HANDOFF_RECORDS if r.range is not None}
CHOICES: dict[str, tuple[str, ...]] = {r.name: r.choices for r in HANDOFF_RECORDS if r.choices is not None}


def read_settings(declare: Callable[[str, Any, str], Any]) -> HandoffSettings:
    """The settings from `declare(name, default, description) -> value` (the node declares each ROS parameter
    `handoff.<name>` and returns its value)."""
    values = {name: declare(PREFIX + name, d, doc) for name, (d, doc) in HANDOFF_PARAMETERS.items()}
    values["checks"] = tuple(values["checks"])
    return HandoffSettings(**values)


def settings_problems(
    settings: HandoffSettings, cameras: Collection[str], points_tasks: Collection[str]
) -> list[str]:
    """Every problem of the settings, one sentence each naming its parameter (empty: usable). `cameras`: the
    node's cameras; `points_tasks`: the catalog's tasks whose answers are points. Off: none at all."""
    if (mode_problem := _MODE.problem(settings.mode)) is not None:
        return [f"{PREFIX}mode: {mode_problem}"]
    if not settings.enabled:
        return []
    problems: list[str] = []
    for record in HANDOFF_RECORDS:
        if record is not _MODE and (problem := record.problem(getattr(settings, record.name))):
            problems.append(f"{PREFIX}{record.name}: {problem}")
    if any(r.type_problem(getattr(settings, r.name)) is not None for r in HANDOFF_RECORDS):
        return problems  # the rules below read each value as its type
    if not settings.camera_height_m > 0:
        problems.append(
            f"{PREFIX}camera_height_m: set it to the camera's optical centre above the ground (> 0 m): the "
            "ground plane needs it"
        )
    if settings.min_path_length_m > settings.max_path_length_m:
        problems.append(
            f"{PREFIX}min_path_length_m: must be at most max_path_length_m "
            f"({settings.max_path_length_m:g} m), got {settings.min_path_length_m:g}"
        )
    if settings.validate_path and not settings.path_valid_frame:
        problems.append(
            f"{PREFIX}path_valid_frame: name the planner's global costmap frame (IsPathValid reads positions "
            "in it)"
        )
    if settings.camera and settings.camera not in cameras:
        problems.append(
            f"{PREFIX}camera: {settings.camera!r} is not one of the cameras ({', '.join(cameras)})"
        )
    tasks = settings.task_names()
    if not tasks:
        problems.append(f"{PREFIX}tasks: name at least one task whose answers are points")
    for task in tasks:
        if task not in points_tasks:
            known = ", ".join(sorted(points_tasks)) or "none"
            problems.append(f"{PREFIX}tasks: {task!r} is not a task answering points (those: {known})")
    if (problem := check_names_problem(list(settings.checks))) is not None:
        problems.append(f"{PREFIX}checks: {problem}")
    return problems
