"""reasoner_node's parameters: the views the node declares (PARAMETERS, CAMERA_PARAMETERS: name -> (default,
documentation)) and the validation of a whole configuration, without ROS. Every fact of a parameter is its
record's (cosmos_reasoner_ros/parameters/node.py, cameras.py), checked by the record's own `problem`;
config/reasoner.yaml documents each one, with its unit, and a test holds it to the records.

The node declares every parameter of PARAMETERS (and CAMERA_PARAMETERS per camera), reads them into a frozen
NodeConfig and refuses to start when `validate` returns problems; each problem names its parameter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from cosmos_reasoner_ros.parameters.cameras import CAMERA_RECORDS
from cosmos_reasoner_ros.parameters.check_names import check_names_problem
from cosmos_reasoner_ros.parameters.node import MIN_TRIGGER_PERIOD_S, NODE_PARAMETERS, NODE_RECORDS
from cosmos_reasoner_ros.parameters.record import Parameter
from cosmos_reasoner_ros.parameters.server_url import server_url_problem, url_has_credentials
from cosmos_reasoner_ros.requests import MAX_TASKS_PER_CLIP

__all__ = [
    "BUSY_POLICIES",
    "CAMERA_PARAMETERS",
    "IMAGE_QOS",
    "PARAMETERS",
    "RANGES",
    "CameraConfig",
    "ConfigError",
    "NodeConfig",
    "read_config",
    "secret_problems",
    "split_tasks",
    "validate",
]


class ConfigError(ValueError):
    """The node's parameters are inconsistent; the message names the parameter and what is wrong."""


@dataclass(frozen=True)
class CameraConfig:
    name: str
    topic: str
    compressed: bool = False
    frame_id: str = ""  # overrides the images' header.frame_id
    depth_topic: str = ""
    camera_info_topic: str = ""


@dataclass(frozen=True)
class NodeConfig:
    cameras: tuple[CameraConfig, ...]
    clip_seconds: float
    sample_fps: float
    max_long_side: int
    buffer_seconds: float
    buffer_max_mb: float
    max_pixels: int
    max_stamp_ahead_s: float
    stale_after_s: float
    media_dir: str
    media_max_files: int
    media_max_mb: float
    media_max_age_s: float
    inline_media: bool
    codec: str
    model_video_fps: float
    model_video_max_pixels: int
    model_video_min_pixels: int
    image_format: str
    tiled: bool
    pre_encode: str
    server_url: str
    model: str
    api_key_env: str
    connect_timeout_s: float
    request_timeout_s: float
    first_token_timeout_s: float
    min_tokens_per_s: float
    progress_window_s: float
    request_total_timeout_s: float
    max_retries: int
    stream: bool
    structured_output: bool
    max_tokens: int
    video_kwargs_mode: str
    tasks_file: str
    task: str
    instruction: str
    max_instruction_chars: int
    trigger_period_s: float
    max_in_flight: int
    busy_policy: str
    request_queue_depth: int
    use_receive_time: bool
    image_qos: str
    wait_for_server_s: float
    health_period_s: float
    diagnostics_period_s: float
    feedback_rate_hz: float
    depth_window_px: int
    workers: int
    shutdown_timeout_s: float
    lifecycle: bool
    activate_wait_for_server_s: float
    max_result_age_s: float
    trigger_tasks: str
    trigger_deadline_s: float
    trigger_reasoning: bool
    publish_checks: list[str]
    min_depth_fraction: float
    max_step_m: float
    media_form: str = NODE_PARAMETERS["media_form"].default
    max_image_frames: int = NODE_PARAMETERS["max_image_frames"].default
    model_family: str = NODE_PARAMETERS["model_family"].default

    def camera(self, name: str) -> CameraConfig:
        return next(c for c in self.cameras if c.name == name)

    def trigger_task_names(self) -> tuple[str, ...]:
        """The tasks the timer and ~/trigger ask of each clip: trigger_tasks, else `task` alone."""
        return split_tasks(self.trigger_tasks) or (self.task,)


def split_tasks(text: str) -> tuple[str, ...]:
    """A comma-separated task list ("next_action, trajectory") as names, blanks dropped."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _table(records: Iterable[Parameter]) -> dict[str, tuple[Any, str]]:
    """name -> (default, description with its unit), as the node declares them, in the records' order."""
    return {r.name: (list(r.default) if r.type is list else r.default, r.documentation) for r in records}


# The records (cosmos_reasoner_ros/parameters/node.py, cameras.py) hold every fact; these views are theirs.
PARAMETERS: dict[str, tuple[Any, str]] = _table(NODE_RECORDS)
CAMERA_PARAMETERS: dict[str, tuple[Any, str]] = _table(CAMERA_RECORDS)
# Allowed ranges [low, high] of the numeric parameters. Upper bounds keep a typo from allocating gigabytes or
# scheduling a timer every microsecond; every value must also be finite.
RANGES: dict[str, tuple[float, float]] = {r.name: r.range for r in NODE_RECORDS if r.range is not None}
_CHOICES: dict[str, tuple[str, ...]] = {r.name: r.choices for r in NODE_RECORDS if r.choices is not None}
BUSY_POLICIES = _CHOICES["busy_policy"]
IMAGE_QOS = _CHOICES["image_qos"]
assert set(RANGES) | set(_CHOICES) <= {f.name for f in fields(NodeConfig)}


def secret_problems(overrides: dict[str, Any]) -> list[str]:
    """What must be refused before any parameter is declared, from the overrides (parameter name -> value):
    declaring publishes the value on /parameter_events (to anyone on the graph, and into any
    `ros2 bag record -a`), and a managed node left unconfigured keeps it readable by `ros2 param get`."""
    url = overrides.get("server_url")
    if isinstance(url, str) and url_has_credentials(url):
        return [f"server_url: {server_url_problem(url)}"]
    return []


def read_config(declare: Callable[[str, Any, str], Any]) -> NodeConfig:
    """The configuration from `declare(name, default, description) -> value` (the node declares each ROS
    parameter and returns its value): every parameter of PARAMETERS, then each camera's block."""
    values: dict[str, Any] = {name: declare(name, d, doc) for name, (d, doc) in PARAMETERS.items()}
    cameras = []
    for cam in values.pop("cameras"):
        c = {k: declare(f"camera.{cam}.{k}", d, doc) for k, (d, doc) in CAMERA_PARAMETERS.items()}
        if not c["topic"]:
            c["topic"] = f"/{cam}/image_raw" + ("/compressed" if c["compressed"] else "")
        cameras.append(CameraConfig(name=cam, **c))
    return NodeConfig(cameras=tuple(cameras), **values)


def validate(cfg: NodeConfig) -> list[str]:
    """Every problem of a configuration, one clear sentence each naming its parameter (empty: valid)."""
    problems: list[str] = []
    names = [c.name for c in cfg.cameras]
    if not names:
        problems.append("cameras: at least one camera name is needed")
    if len(set(names)) != len(names):
        problems.append(f"cameras: names must be unique, got {names}")
    for c in cfg.cameras:
        if not c.name or not c.name.replace("_", "").isalnum() or not c.name.isascii():
            problems.append(f"cameras: {c.name!r} is not a valid name (ASCII letters, digits, underscores)")
        for record in CAMERA_RECORDS:
            if (problem := record.problem(getattr(c, record.name))) is not None:
                problems.append(f"camera.{c.name}.{record.name}: {problem}")
        if bool(c.depth_topic) != bool(c.camera_info_topic):
            problems.append(
                f"camera.{c.name}: depth_topic and camera_info_topic go together (set both or none)"
            )
    records = [r for r in NODE_RECORDS if r.name != "cameras"]
    mistyped = [r.name for r in records if r.type_problem(getattr(cfg, r.name)) is not None]
    for record in records:
        if (problem := record.problem(getattr(cfg, record.name))) is not None:
            problems.append(f"{record.name}: {problem}")
    if mistyped:  # the rules below read each value as its type (rclpy's declared types make this rare)
        return problems
    if 0 < cfg.trigger_period_s < MIN_TRIGGER_PERIOD_S:
        problems.append(
            f"trigger_period_s: must be 0 (off) or at least {MIN_TRIGGER_PERIOD_S} s, "
            f"got {cfg.trigger_period_s}"
        )
    if math.isfinite(cfg.clip_seconds) and cfg.clip_seconds > cfg.buffer_seconds:
        problems.append(
            f"clip_seconds ({cfg.clip_seconds}) must not exceed buffer_seconds ({cfg.buffer_seconds})"
        )
    if not cfg.media_dir and not cfg.inline_media:
        problems.append("media_dir: needed unless inline_media is true")
    if len(cfg.instruction) > cfg.max_instruction_chars:
        problems.append(
            f"instruction: {len(cfg.instruction)} characters, more than max_instruction_chars "
            f"({cfg.max_instruction_chars})"
        )
    if "\x00" in cfg.instruction:
        problems.append("instruction: contains a NUL character")
    tasks = split_tasks(cfg.trigger_tasks)
    if len(tasks) > MAX_TASKS_PER_CLIP:
        problems.append(f"trigger_tasks: at most {MAX_TASKS_PER_CLIP} tasks, got {len(tasks)}")
    if (problem := check_names_problem(cfg.publish_checks)) is not None:
        problems.append(f"publish_checks: {problem}")
    return problems
