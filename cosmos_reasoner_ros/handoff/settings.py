"""The handoff's parameters (`handoff.*` of reasoner_node): the schema (name, default, documentation, allowed
range), the frozen HandoffSettings read from it, and the validation of a whole setting, without ROS; in the
style of node/parameters.py, kept apart from the node's own schema. config/reasoner.yaml documents each one.

Off by default (`handoff.mode: none`): then nothing else of the handoff is checked, made or imported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, fields
from typing import Any

from cosmos_reasoner_ros.geometry import GroundPlane
from cosmos_reasoner_ros.handoff.ground_path import PathLimits
from cosmos_reasoner_ros.requests import CHECK_NAMES

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

PREFIX = "handoff."
MODES = ("none", "dry_run", "follow_path", "navigate_to_pose")
ACTIONS = ("follow_path", "navigate_to_pose")  # the modes that send goals to Nav2
DEFAULT_ACTION_NAMES = {"follow_path": "/follow_path", "navigate_to_pose": "/navigate_to_pose"}
ON_REFUSAL = ("keep", "cancel")
ON_STOP = ("cancel", "keep")
NO_CHECKS = "none"


@dataclass(frozen=True)
class HandoffSettings:
    mode: str = "none"
    tasks: str = "drive_path"
    camera: str = ""
    camera_info_topic: str = ""
    frame_id: str = ""
    camera_height_m: float = 0.0
    camera_pitch_deg: float = 0.0
    path_spacing_m: float = 0.1
    max_path_length_m: float = 3.0
    min_path_length_m: float = 0.2
    max_start_distance_m: float = 1.5
    max_range_m: float = 6.0
    max_age_s: float = 1.0
    checks: tuple[str, ...] = CHECK_NAMES
    agreement_answers: int = 1
    agreement_max_spread_m: float = 0.3
    validate_path: bool = False
    is_path_valid_service: str = "/is_path_valid"
    path_valid_frame: str = "map"
    path_valid_max_cost: int = 254
    path_valid_unknown_is_obstacle: bool = False
    confirm: bool = False
    on_refusal: str = "keep"
    on_stop: str = "cancel"
    action_name: str = ""
    controller_id: str = ""
    goal_checker_id: str = ""
    progress_checker_id: str = ""
    behavior_tree: str = ""
    server_timeout_s: float = 2.0
    discovery_timeout_s: float = 5.0

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


_DEFAULTS = HandoffSettings()
# name (without the `handoff.` prefix) -> (default, description); declared in this order.
HANDOFF_PARAMETERS: dict[str, tuple[Any, str]] = {
    "mode": (
        _DEFAULTS.mode,
        "none (off); dry_run (decide and publish every decision, send nothing); follow_path (nav2 "
        "FollowPath to the controller server); navigate_to_pose (NavigateToPose to the path's last pose)",
    ),
    "tasks": (_DEFAULTS.tasks, "tasks whose answers are handed off, comma-separated (points answers)"),
    "camera": (_DEFAULTS.camera, "the camera whose answers are handed off; empty: the first camera"),
    "camera_info_topic": (
        _DEFAULTS.camera_info_topic,
        "CameraInfo of that camera (K for the ground plane); empty: its camera_info_topic, else "
        "/<camera>/camera_info",
    ),
    "frame_id": (
        _DEFAULTS.frame_id,
        "name of the camera's optical frame the path's points are in (x right, y down, z forward; not a "
        "target frame: Nav2 transforms with TF); empty: the camera's frame_id, else the images'",
    ),
    "camera_height_m": (
        _DEFAULTS.camera_height_m,
        "[m] the camera's optical centre above the ground (the ground plane); must be set when on",
    ),
    "camera_pitch_deg": (
        _DEFAULTS.camera_pitch_deg,
        "[deg] the optical axis below the horizontal (positive: looking down)",
    ),
    "path_spacing_m": (_DEFAULTS.path_spacing_m, "[m] poses of a path sent are this far apart"),
    "max_path_length_m": (
        _DEFAULTS.max_path_length_m,
        "[m] a longer path is cropped to its first max_path_length_m",
    ),
    "min_path_length_m": (
        _DEFAULTS.min_path_length_m,
        "[m] ground_path gate: a shorter path (after near-repeated points, closer than a quarter of "
        "path_spacing_m, collapsed; cropped and resampled) is refused; at least 2 distinct poses always",
    ),
    "max_start_distance_m": (
        _DEFAULTS.max_start_distance_m,
        "[m] the path's first point at most this far from the camera's foot on the ground, else refused",
    ),
    "max_range_m": (
        _DEFAULTS.max_range_m,
        "[m] ground-plane points farther than this from the camera's foot are refused (near the horizon)",
    ),
    "max_age_s": (
        _DEFAULTS.max_age_s,
        "[s] age gate: an answer older than this (robot clock, from the clip's end) is never sent",
    ),
    "checks": (
        list(_DEFAULTS.checks),
        "geometric checks (ReasonerResult.checks) that must pass before a path is sent; [none]: none",
    ),
    "agreement_answers": (
        _DEFAULTS.agreement_answers,
        "answers about one clip that must agree (ask the task that many times: trigger_tasks); 1: off",
    ),
    "agreement_max_spread_m": (
        _DEFAULTS.agreement_max_spread_m,
        "[m] agreement gate: largest Frechet distance between two of those answers' paths",
    ),
    "validate_path": (_DEFAULTS.validate_path, "ask the planner server's IsPathValid before sending"),
    "is_path_valid_service": (_DEFAULTS.is_path_valid_service, "the IsPathValid service's name"),
    "path_valid_frame": (
        _DEFAULTS.path_valid_frame,
        "the planner's global costmap frame: IsPathValid reads a path's positions in it, so the path is "
        "transformed into it (tf2, at the clip's end) before it is asked",
    ),
    "path_valid_max_cost": (
        _DEFAULTS.path_valid_max_cost,
        "IsPathValid max_cost (Kilted and later; Jazzy's service has no such field)",
    ),
    "path_valid_unknown_is_obstacle": (
        _DEFAULTS.path_valid_unknown_is_obstacle,
        "IsPathValid consider_unknown_as_obstacle (Kilted and later)",
    ),
    "confirm": (
        _DEFAULTS.confirm,
        "propose each path on ~/handoff/decision and send it only when ~/handoff/confirm accepts it",
    ),
    "on_refusal": (
        _DEFAULTS.on_refusal,
        "a newer answer refused (stale, failed, any gate; not a busy or cancelled trigger): keep the goal in "
        "flight, or cancel it",
    ),
    "on_stop": (
        _DEFAULTS.on_stop,
        "the node stops (lifecycle deactivate, cleanup, shutdown; SIGINT, SIGTERM): cancel the goal it sent "
        "and wait up to server_timeout_s for Nav2's answer (on ~/handoff/decision), or keep it running",
    ),
    "action_name": (
        _DEFAULTS.action_name,
        "the Nav2 action's name; empty: /follow_path or /navigate_to_pose (by mode)",
    ),
    "controller_id": (_DEFAULTS.controller_id, "FollowPath controller_id; empty: the server's only one"),
    "goal_checker_id": (
        _DEFAULTS.goal_checker_id,
        "FollowPath goal_checker_id; empty: the server's only one",
    ),
    "progress_checker_id": (
        _DEFAULTS.progress_checker_id,
        "FollowPath progress_checker_id; empty: the server's only one",
    ),
    "behavior_tree": (
        _DEFAULTS.behavior_tree,
        "NavigateToPose behavior_tree; empty: the navigator's default",
    ),
    "server_timeout_s": (
        _DEFAULTS.server_timeout_s,
        "[s] longest wait for an answer of Nav2: IsPathValid's, and a goal's end after the cancel at stop",
    ),
    "discovery_timeout_s": (
        _DEFAULTS.discovery_timeout_s,
        "[s] after activate, a path waits this long for the Nav2 action server (and IsPathValid) to be "
        "discovered before it is refused at server (path_valid); still absent then: one warning",
    ),
}
assert set(HANDOFF_PARAMETERS) == {f.name for f in fields(HandoffSettings)}

RANGES: dict[str, tuple[float, float]] = {
    "camera_height_m": (0.0, 100.0),
    "camera_pitch_deg": (-89.0, 89.0),
    "path_spacing_m": (0.01, 10.0),
    "max_path_length_m": (0.05, 1000.0),
    "max_start_distance_m": (0.0, 1000.0),
    "max_range_m": (0.1, 1000.0),
    "max_age_s": (0.01, 3600.0),
    "agreement_answers": (1, 8),
    "agreement_max_spread_m": (0.0, 1000.0),
    "path_valid_max_cost": (1, 255),
    "server_timeout_s": (0.05, 600.0),
    "min_path_length_m": (0.0, 1000.0),
    "discovery_timeout_s": (0.0, 600.0),
}
CHOICES: dict[str, tuple[str, ...]] = {"mode": MODES, "on_refusal": ON_REFUSAL, "on_stop": ON_STOP}


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
    if settings.mode not in MODES:
        return [f"{PREFIX}mode: must be one of {', '.join(MODES)}, got {settings.mode!r}"]
    if not settings.enabled:
        return []
    problems: list[str] = []
    for name, (low, high) in RANGES.items():
        value = getattr(settings, name)
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{PREFIX}{name}: must be a finite number, got {value}")
        elif not low <= value <= high:
            problems.append(f"{PREFIX}{name}: must be in [{low:g}, {high:g}], got {value:g}")
    for name, choices in CHOICES.items():
        if getattr(settings, name) not in choices:
            problems.append(
                f"{PREFIX}{name}: must be one of {', '.join(choices)}, got {getattr(settings, name)!r}"
            )
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
    unknown = [c for c in settings.checks if c not in (*CHECK_NAMES, NO_CHECKS)]
    if unknown or (NO_CHECKS in settings.checks and len(settings.checks) > 1):
        problems.append(
            f"{PREFIX}checks: names from {', '.join(CHECK_NAMES)}, or [{NO_CHECKS}] alone; "
            f"got {list(settings.checks)}"
        )
    return problems
