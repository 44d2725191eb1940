"""reasoner_node's parameters: the schema (name, default, documentation, allowed range) and the validation
of a whole configuration, without ROS. config/reasoner.yaml documents each parameter once, with its unit.

The node declares every parameter of PARAMETERS (and CAMERA_PARAMETERS per camera), reads them into a frozen
NodeConfig and refuses to start when `validate` returns problems; each problem names its parameter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from cosmos_reasoner_ros.errors import credentials_problem, shown_url
from cosmos_reasoner_ros.model_family import AUTO, FAMILY_NAMES
from cosmos_reasoner_ros.package_files import DEFAULT_MEDIA_DIR
from cosmos_reasoner_ros.reasoner import MEDIA_FORMS
from cosmos_reasoner_ros.requests import CHECK_NAMES, MAX_TASKS_PER_CLIP

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

BUSY_POLICIES = ("reject", "replace")
IMAGE_QOS = ("sensor_data", "reliable")
NO_CHECKS = "none"  # publish_checks: [none] publishes 3D paths whatever the checks say


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
    media_form: str = "auto"
    max_image_frames: int = 8
    model_family: str = AUTO

    def camera(self, name: str) -> CameraConfig:
        return next(c for c in self.cameras if c.name == name)

    def trigger_task_names(self) -> tuple[str, ...]:
        """The tasks the timer and ~/trigger ask of each clip: trigger_tasks, else `task` alone."""
        return split_tasks(self.trigger_tasks) or (self.task,)


def split_tasks(text: str) -> tuple[str, ...]:
    """A comma-separated task list ("next_action, trajectory") as names, blanks dropped."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


# name -> (default, description). Declared once, in this order, at the top of the node's configuration.
PARAMETERS: dict[str, tuple[Any, str]] = {
    "cameras": (["camera"], "camera names; each has camera.<name>.* parameters"),
    "clip_seconds": (4.0, "[s] default length of the clip ending at the trigger"),
    "sample_fps": (4.0, "[Hz] frames kept per second per camera (decimation before decoding)"),
    "max_long_side": (
        640,
        "[px] frames are downscaled so that their long side is at most this; 0 keeps size",
    ),
    "buffer_seconds": (30.0, "[s] history kept per camera"),
    "buffer_max_mb": (512.0, "[MiB] memory bound of each camera's buffer"),
    "max_pixels": (
        33_177_600,
        "[px] largest image accepted (width x height, from the header before decoding); default 8K UHD",
    ),
    "max_stamp_ahead_s": (
        5.0,
        "[s] frames stamped further ahead of their receive time are refused (clock skew allowance)",
    ),
    "stale_after_s": (
        1.0,
        "[s] a camera whose newest frame lags the newest camera's by more (at least two sampling periods) is "
        "left out of a request and named in its result",
    ),
    "media_dir": (DEFAULT_MEDIA_DIR, "directory for clip files (the server must be allowed to read it)"),
    "media_max_files": (
        200,
        "retention: most clip files of this node in media_dir at any instant (besides the one being "
        "written, a hidden temporary); 0: no limit",
    ),
    "media_max_mb": (2048.0, "[MiB] retention: most bytes of this node's clip files; 0: no limit"),
    "media_max_age_s": (3600.0, "[s] retention: this node's clip files older than this are deleted; 0: keep"),
    "inline_media": (
        False,
        "send clips as data: URLs instead of file:// URLs (for a server on another host)",
    ),
    "codec": ("auto", "clip codec: auto (H.264 when PyAV is present, else mp4v), h264 or mp4v"),
    "model_video_fps": (
        0.0,
        "[Hz] the served model's video processor samples clips at this rate (its video_preprocessor_config: "
        "fps): clips carry only the frames it keeps; 0: unknown, every frame is sent",
    ),
    "model_video_max_pixels": (
        0,
        "[px] its pixel budget for a whole video (size.longest_edge): clips are written at the size it "
        "resizes them to, so that the server does not; 0: unknown (sides only rounded to multiples of 32)",
    ),
    "model_video_min_pixels": (0, "[px] its size.shortest_edge; 0: unknown"),
    "image_format": ("jpeg", "still image format for image tasks: jpeg or png"),
    "media_form": (
        "auto",
        "how a clip goes to the server: auto (a video until the server refuses one, then its sampled frames "
        "as images), video (always; a refusal is the result's error) or frames (always images)",
    ),
    "max_image_frames": (
        8,
        "[images] most frames of a clip sent as images in one request (fewer where the server says so)",
    ),
    "tiled": (False, "several cameras: one tiled video instead of one video per camera"),
    "pre_encode": (
        "auto",
        "encode kept frames as they arrive: auto (while the timer runs or after a trigger), on or off",
    ),
    "server_url": ("http://127.0.0.1:8000/v1", "OpenAI-compatible base URL of the vLLM server"),
    "model": ("", "served model name; empty: the first model the server lists"),
    "model_family": (
        AUTO,
        "how reasoning is asked for: auto (from model when it is a local checkpoint directory, else nano), "
        "nano, super, edge (the chat template's enable_thinking on or off, no suffix) or qwen3_vl",
    ),
    "api_key_env": ("COSMOS_REASONER_API_KEY", "name of the environment variable holding the API key"),
    "connect_timeout_s": (5.0, "[s] TCP connect timeout"),
    "request_timeout_s": (120.0, "[s] read timeout of one request: longest silence (no byte)"),
    "first_token_timeout_s": (
        30.0,
        "[s] longest wait for an answer's first token (reasoning or content; keep-alives and headers are "
        "no token), then too_slow; never longer than request_timeout_s (then timeout); an unstreamed body "
        "within this of its headers; 0: request_timeout_s",
    ),
    "min_tokens_per_s": (
        1.0,
        "[tokens/s] progress floor after the first token, over progress_window_s, then too_slow; also "
        "bounds a whole answer by first_token_timeout_s + max_tokens / this; 0: off",
    ),
    "progress_window_s": (10.0, "[s] the window over which min_tokens_per_s is averaged"),
    "request_total_timeout_s": (
        0.0,
        "[s] longest whole request (retries included) from sending, then timeout; 0: no limit",
    ),
    "max_retries": (2, "retries on connection errors and 5xx"),
    "stream": (True, "stream answers (time to first token, partial text in action feedback)"),
    "structured_output": (
        True,
        "send the task's JSON schema as structured output; the answer must then be one JSON value it accepts",
    ),
    "max_tokens": (0, "[tokens] longest answer; 0: each task's own max_tokens (config/tasks.yaml)"),
    "video_kwargs_mode": (
        "auto",
        "per-request video sampling: auto (from the server's vLLM version), media_io_kwargs, "
        "mm_processor_kwargs, none",
    ),
    "tasks_file": ("", "YAML merged over the shipped task catalog; empty: shipped catalog only"),
    "task": ("next_action", "default task for the timer, the service and goals without a task"),
    "instruction": ("", "default instruction (task text / object / question) filled into the prompt"),
    "max_instruction_chars": (2000, "[characters] longest instruction accepted (topic, goal or parameter)"),
    "trigger_period_s": (0.0, "[s] period of the timer trigger; 0: off"),
    "max_in_flight": (1, "requests in flight per camera group"),
    "busy_policy": (
        "reject",
        "when busy: reject (a busy result) or replace (the newest trigger waits, older fail)",
    ),
    "request_queue_depth": (
        256,
        "[requests] depth of the ~/trigger, ~/reason and ~/instruction queues (holds a burst of calls)",
    ),
    "use_receive_time": (True, "use the receive time for images whose header.stamp is zero"),
    "image_qos": ("sensor_data", "image subscription QoS: sensor_data (best effort) or reliable"),
    "wait_for_server_s": (0.0, "[s] before each request, wait up to this long for the server to be healthy"),
    "health_period_s": (2.0, "[s] period of the server health check (off the executor)"),
    "diagnostics_period_s": (1.0, "[s] period of /diagnostics"),
    "feedback_rate_hz": (10.0, "[Hz] most action feedback messages per second while streaming"),
    "depth_window_px": (3, "[px] search radius for the nearest valid depth around a trajectory point"),
    "workers": (0, "request worker threads; 0: cameras x max_in_flight + 1"),
    "shutdown_timeout_s": (
        3.0,
        "[s] at shutdown, longest wait for cancelled requests to publish their results",
    ),
    "lifecycle": (
        False,
        "true: a managed node (ros2 lifecycle configure/activate/deactivate/cleanup/shutdown), started "
        "unconfigured; false: configures and activates itself at start",
    ),
    "activate_wait_for_server_s": (
        0.0,
        "[s] managed node: activate waits this long for the server to be healthy, else fails; 0: no wait",
    ),
    "max_result_age_s": (
        0.0,
        "[s] a successful answer older than this when published (clip end to publication) is published as "
        "stale and not forwarded to ~/next_action, ~/trajectory, ~/markers; 0: no limit; goals may override",
    ),
    "trigger_tasks": (
        "",
        "tasks the timer and ~/trigger ask of each clip, comma-separated (one result each); empty: task",
    ),
    "trigger_deadline_s": (
        0.0,
        "[s] deadline of the timer's and ~/trigger's requests from the trigger (then cancelled: timeout); "
        "0: none",
    ),
    "trigger_reasoning": (
        True,
        "false: the timer's and ~/trigger's requests turn reasoning off (the task's plain prompt and "
        "profile)",
    ),
    "publish_checks": (
        list(CHECK_NAMES),
        "geometric checks that must pass before ~/trajectory and ~/markers are published; [none]: "
        "publish regardless",
    ),
    "min_depth_fraction": (
        0.75,
        "[0-1] depth_coverage check: least fraction of trajectory points with a valid depth",
    ),
    "max_step_m": (0.5, "[m] max_step check: largest 3D distance between consecutive trajectory points"),
}
CAMERA_PARAMETERS: dict[str, tuple[Any, str]] = {
    "topic": ("", "image topic; empty: /<name>/image_raw (or /<name>/image_raw/compressed)"),
    "compressed": (False, "the topic carries sensor_msgs/CompressedImage"),
    "frame_id": ("", "frame id for results and paths; empty: the images' header.frame_id"),
    "depth_topic": ("", "registered depth image (16UC1 mm or 32FC1 m); empty: no 3D trajectories"),
    "camera_info_topic": ("", "CameraInfo of the colour camera; needed with depth_topic"),
}

# Allowed ranges [low, high] of the numeric parameters. Upper bounds keep a typo from allocating gigabytes or
# scheduling a timer every microsecond; every value must also be finite.
RANGES: dict[str, tuple[float, float]] = {
    "clip_seconds": (0.05, 600.0),
    "sample_fps": (0.05, 120.0),
    "max_long_side": (0, 16384),
    "buffer_seconds": (0.05, 3600.0),
    "buffer_max_mb": (1.0, 262144.0),
    "max_pixels": (1, 1 << 31),
    "max_stamp_ahead_s": (0.0, 86400.0),
    "stale_after_s": (0.01, 3600.0),
    "media_max_files": (0, 1_000_000),
    "media_max_mb": (0.0, 1 << 24),
    "media_max_age_s": (0.0, 10 * 365 * 86400.0),
    "model_video_fps": (0.0, 120.0),
    "model_video_max_pixels": (0, 1 << 40),
    "model_video_min_pixels": (0, 1 << 40),
    "max_image_frames": (1, 256),
    "connect_timeout_s": (0.01, 3600.0),
    "request_timeout_s": (0.01, 86400.0),
    "first_token_timeout_s": (0.0, 86400.0),
    "min_tokens_per_s": (0.0, 100_000.0),
    "progress_window_s": (0.1, 3600.0),
    "request_total_timeout_s": (0.0, 86400.0),
    "max_retries": (0, 100),
    "max_tokens": (0, 1_000_000),
    "max_instruction_chars": (1, 1_000_000),
    "trigger_period_s": (0.0, 86400.0),
    "max_in_flight": (1, 256),
    "request_queue_depth": (1, 100_000),
    "wait_for_server_s": (0.0, 86400.0),
    "health_period_s": (0.05, 3600.0),
    "diagnostics_period_s": (0.05, 3600.0),
    "feedback_rate_hz": (0.01, 1000.0),
    "depth_window_px": (0, 256),
    "workers": (0, 1024),
    "shutdown_timeout_s": (0.0, 60.0),
    "activate_wait_for_server_s": (0.0, 3600.0),
    "max_result_age_s": (0.0, 86400.0),
    "trigger_deadline_s": (0.0, 86400.0),
    "min_depth_fraction": (0.0, 1.0),
    "max_step_m": (1e-6, 1000.0),
}
MIN_TRIGGER_PERIOD_S = 0.05  # a timer faster than this only produces busy results
_CHOICES: dict[str, tuple[str, ...]] = {
    "pre_encode": ("auto", "on", "off"),
    "busy_policy": BUSY_POLICIES,
    "image_qos": IMAGE_QOS,
    "codec": ("auto", "h264", "mp4v"),
    "image_format": ("jpeg", "png"),
    "media_form": MEDIA_FORMS,
    "model_family": (AUTO, *FAMILY_NAMES),
    "video_kwargs_mode": ("auto", "media_io_kwargs", "mm_processor_kwargs", "none"),
}

assert set(RANGES) | set(_CHOICES) <= {f.name for f in fields(NodeConfig)}


def secret_problems(overrides: dict[str, Any]) -> list[str]:
    """What must be refused before any parameter is declared, from the overrides (parameter name -> value):
    declaring publishes the value on /parameter_events (to anyone on the graph, and into any
    `ros2 bag record -a`), and a managed node left unconfigured keeps it readable by `ros2 param get`."""
    url = overrides.get("server_url")
    problem = credentials_problem("server_url", url) if isinstance(url, str) else ""
    return [problem] if problem else []


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


def _range_problem(name: str, value: float) -> str | None:
    low, high = RANGES[name]
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name}: must be a finite number, got {value}"
    if not low <= value <= high:
        return f"{name}: must be in [{low:g}, {high:g}], got {value:g}"
    return None


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
        if bool(c.depth_topic) != bool(c.camera_info_topic):
            problems.append(
                f"camera.{c.name}: depth_topic and camera_info_topic go together (set both or none)"
            )
    for name in RANGES:
        problem = _range_problem(name, getattr(cfg, name))
        if problem:
            problems.append(problem)
    if 0 < cfg.trigger_period_s < MIN_TRIGGER_PERIOD_S:
        problems.append(
            f"trigger_period_s: must be 0 (off) or at least {MIN_TRIGGER_PERIOD_S} s, "
            f"got {cfg.trigger_period_s}"
        )
    if math.isfinite(cfg.clip_seconds) and cfg.clip_seconds > cfg.buffer_seconds:
        problems.append(
            f"clip_seconds ({cfg.clip_seconds}) must not exceed buffer_seconds ({cfg.buffer_seconds})"
        )
    for name, choices in _CHOICES.items():
        value = getattr(cfg, name)
        if value not in choices:
            problems.append(f"{name}: must be one of {', '.join(choices)}, got {value!r}")
    if not cfg.server_url.startswith(("http://", "https://")):
        problems.append(f"server_url: must start with http:// or https://, got {shown_url(cfg.server_url)}")
    credentials = credentials_problem("server_url", cfg.server_url)
    if credentials:
        problems.append(credentials)
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
    unknown_checks = [c for c in cfg.publish_checks if c not in (*CHECK_NAMES, NO_CHECKS)]
    if unknown_checks or (NO_CHECKS in cfg.publish_checks and len(cfg.publish_checks) > 1):
        problems.append(
            f"publish_checks: names from {', '.join(CHECK_NAMES)}, or [{NO_CHECKS}] alone; "
            f"got {cfg.publish_checks}"
        )
    return problems
