"""`reasoner_node`: camera topics, triggers and the Reason action wired to the request pipeline; results out.

Image callbacks only decimate, convert and buffer; requests run on a worker pool off the executor, and every
trigger ends in exactly one ReasonerResult.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import math
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Path as PathMsg
from rcl_interfaces.msg import ParameterDescriptor, ParameterType
from rclpy.action.server import ActionServer, CancelResponse, GoalResponse, ServerGoalHandle
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.task import Future
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import String
from std_srvs.srv import Trigger
from visualization_msgs.msg import MarkerArray

from cosmos_reasoner_ros.action import Reason
from cosmos_reasoner_ros.annotation import annotate
from cosmos_reasoner_ros.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.clip_buffer import ClipBuffer, MultiCameraBuffer
from cosmos_reasoner_ros.clip_writer import ClipWriter, PreEncoder
from cosmos_reasoner_ros.errors import BusyError, FrameError, ReasonerError, RequestCancelled, TaskError
from cosmos_reasoner_ros.image_conversion import Frame, message_stamp_ns, message_to_array
from cosmos_reasoner_ros.media_store import MediaStore, RetentionPolicy
from cosmos_reasoner_ros.msg import ReasonerResult
from cosmos_reasoner_ros.pipeline import (
    STAGES,
    Outcome,
    Pipeline,
    PipelineSettings,
    RequestSpec,
    error_outcome,
)
from cosmos_reasoner_ros.projection import Intrinsics, back_project
from cosmos_reasoner_ros.request_builder import RequestSettings
from cosmos_reasoner_ros.ros_conversion import (
    diagnostic_array,
    diagnostic_status,
    image_msg,
    path_markers,
    path_msg,
    result_msg,
    ros_string,
    time_to_ns,
)
from cosmos_reasoner_ros.tasks import TaskCatalog

BUSY_POLICIES = ("reject", "replace")
IMAGE_QOS = ("sensor_data", "reliable")


class ConfigError(ValueError):
    """The node's parameters are inconsistent; the message names the parameter and what is wrong."""


# --------------------------------------------------------------------------------------------------- config


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
    media_dir: str
    media_max_files: int
    media_max_mb: float
    media_max_age_s: float
    inline_media: bool
    codec: str
    image_format: str
    tiled: bool
    pre_encode: str
    server_url: str
    model: str
    api_key_env: str
    connect_timeout_s: float
    request_timeout_s: float
    max_retries: int
    stream: bool
    structured_output: bool
    max_tokens: int
    video_kwargs_mode: str
    tasks_file: str
    task: str
    instruction: str
    trigger_period_s: float
    max_in_flight: int
    busy_policy: str
    use_receive_time: bool
    image_qos: str
    wait_for_server_s: float
    health_period_s: float
    diagnostics_period_s: float
    feedback_rate_hz: float
    depth_window_px: int
    workers: int

    def camera(self, name: str) -> CameraConfig:
        return next(c for c in self.cameras if c.name == name)


# name -> (default, description). Declared once, in this order, at the top of ReasonerNode.__init__.
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
    "media_dir": (
        "/tmp/cosmos_reasoner/media",  # noqa: S108 (created 0700 by MediaStore; server.yaml's default too)
        "directory for clip files (the server must be allowed to read it)",
    ),
    "media_max_files": (200, "retention: most clip files of this node kept in media_dir; 0: no limit"),
    "media_max_mb": (2048.0, "[MiB] retention: most bytes of this node's clip files; 0: no limit"),
    "media_max_age_s": (3600.0, "[s] retention: this node's clip files older than this are deleted; 0: keep"),
    "inline_media": (
        False,
        "send clips as data: URLs instead of file:// URLs (for a server on another host)",
    ),
    "codec": ("auto", "clip codec: auto (H.264 when PyAV is present, else mp4v), h264 or mp4v"),
    "image_format": ("jpeg", "still image format for image tasks: jpeg or png"),
    "tiled": (False, "several cameras: one tiled video instead of one video per camera"),
    "pre_encode": (
        "auto",
        "encode kept frames as they arrive: auto (while the timer runs or after a trigger), on or off",
    ),
    "server_url": ("http://127.0.0.1:8000/v1", "OpenAI-compatible base URL of the vLLM server"),
    "model": ("", "served model name; empty: the first model the server lists"),
    "api_key_env": ("COSMOS_REASONER_API_KEY", "name of the environment variable holding the API key"),
    "connect_timeout_s": (5.0, "[s] TCP connect timeout"),
    "request_timeout_s": (120.0, "[s] read timeout of one request"),
    "max_retries": (2, "retries on connection errors and 5xx"),
    "stream": (True, "stream answers (time to first token, partial text in action feedback)"),
    "structured_output": (False, "send the task's JSON schema as structured output"),
    "max_tokens": (0, "[tokens] longest answer; 0: each task's own max_tokens (config/tasks.yaml)"),
    "video_kwargs_mode": (
        "media_io_kwargs",
        "per-request video sampling: media_io_kwargs, mm_processor_kwargs, none",
    ),
    "tasks_file": ("", "YAML merged over the shipped task catalog; empty: shipped catalog only"),
    "task": ("next_action", "default task for the timer, the service and goals without a task"),
    "instruction": ("", "default instruction (task text / object / question) filled into the prompt"),
    "trigger_period_s": (0.0, "[s] period of the timer trigger; 0: off"),
    "max_in_flight": (1, "requests in flight per camera group"),
    "busy_policy": (
        "reject",
        "when busy: reject (a busy result) or replace (the newest trigger waits, older fail)",
    ),
    "use_receive_time": (True, "use the receive time for images whose header.stamp is zero"),
    "image_qos": ("sensor_data", "image subscription QoS: sensor_data (best effort) or reliable"),
    "wait_for_server_s": (0.0, "[s] before each request, wait up to this long for the server to be healthy"),
    "health_period_s": (2.0, "[s] period of the server health check (off the executor)"),
    "diagnostics_period_s": (1.0, "[s] period of /diagnostics"),
    "feedback_rate_hz": (10.0, "[Hz] most action feedback messages per second while streaming"),
    "depth_window_px": (3, "[px] search radius for the nearest valid depth around a trajectory point"),
    "workers": (0, "request worker threads; 0: cameras x max_in_flight + 1"),
}
CAMERA_PARAMETERS: dict[str, tuple[Any, str]] = {
    "topic": ("", "image topic; empty: /<name>/image_raw (or /<name>/image_raw/compressed)"),
    "compressed": (False, "the topic carries sensor_msgs/CompressedImage"),
    "frame_id": ("", "frame id for results and paths; empty: the images' header.frame_id"),
    "depth_topic": ("", "registered depth image (16UC1 mm or 32FC1 m); empty: no 3D trajectories"),
    "camera_info_topic": ("", "CameraInfo of the colour camera; needed with depth_topic"),
}

_TYPES = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
    list: ParameterType.PARAMETER_STRING_ARRAY,
}


def validate(cfg: NodeConfig) -> list[str]:
    """Every problem of a configuration, one clear sentence each (empty: valid)."""
    problems: list[str] = []
    names = [c.name for c in cfg.cameras]
    if not names:
        problems.append("cameras: at least one camera name is needed")
    if len(set(names)) != len(names):
        problems.append(f"cameras: names must be unique, got {names}")
    for c in cfg.cameras:
        if not c.name or not c.name.replace("_", "").isalnum():
            problems.append(f"cameras: {c.name!r} is not a valid name (letters, digits, underscores)")
        if bool(c.depth_topic) != bool(c.camera_info_topic):
            problems.append(
                f"camera.{c.name}: depth_topic and camera_info_topic go together (set both or none)"
            )
    positive = {
        "clip_seconds": cfg.clip_seconds,
        "sample_fps": cfg.sample_fps,
        "buffer_seconds": cfg.buffer_seconds,
        "buffer_max_mb": cfg.buffer_max_mb,
        "connect_timeout_s": cfg.connect_timeout_s,
        "request_timeout_s": cfg.request_timeout_s,
        "health_period_s": cfg.health_period_s,
        "diagnostics_period_s": cfg.diagnostics_period_s,
        "feedback_rate_hz": cfg.feedback_rate_hz,
    }
    problems += [f"{k}: must be > 0, got {v}" for k, v in positive.items() if not v > 0]
    if cfg.clip_seconds > cfg.buffer_seconds:
        problems.append(
            f"clip_seconds ({cfg.clip_seconds}) must not exceed buffer_seconds ({cfg.buffer_seconds})"
        )
    non_negative = {
        "max_long_side": cfg.max_long_side,
        "max_retries": cfg.max_retries,
        "trigger_period_s": cfg.trigger_period_s,
        "wait_for_server_s": cfg.wait_for_server_s,
        "depth_window_px": cfg.depth_window_px,
        "workers": cfg.workers,
        "max_tokens": cfg.max_tokens,
        "media_max_files": cfg.media_max_files,
        "media_max_mb": cfg.media_max_mb,
        "media_max_age_s": cfg.media_max_age_s,
    }
    problems += [f"{k}: must be >= 0, got {v}" for k, v in non_negative.items() if v < 0]
    if cfg.pre_encode not in ("auto", "on", "off"):
        problems.append(f"pre_encode: must be auto, on or off, got {cfg.pre_encode!r}")
    if cfg.max_in_flight < 1:
        problems.append(f"max_in_flight: must be >= 1, got {cfg.max_in_flight}")
    if cfg.busy_policy not in BUSY_POLICIES:
        problems.append(f"busy_policy: must be one of {', '.join(BUSY_POLICIES)}, got {cfg.busy_policy!r}")
    if cfg.image_qos not in IMAGE_QOS:
        problems.append(f"image_qos: must be one of {', '.join(IMAGE_QOS)}, got {cfg.image_qos!r}")
    if cfg.codec not in ("auto", "h264", "mp4v"):
        problems.append(f"codec: must be auto, h264 or mp4v, got {cfg.codec!r}")
    if cfg.image_format not in ("jpeg", "png"):
        problems.append(f"image_format: must be jpeg or png, got {cfg.image_format!r}")
    if not cfg.server_url.startswith(("http://", "https://")):
        problems.append(f"server_url: must start with http:// or https://, got {cfg.server_url!r}")
    if not cfg.media_dir and not cfg.inline_media:
        problems.append("media_dir: needed unless inline_media is true")
    return problems


# ------------------------------------------------------------------------------------------- bookkeeping


class ProblemLog:
    """Logs each distinct problem at most once per period, with how many repeats were suppressed."""

    def __init__(self, log: Callable[[str], object], period_s: float = 10.0) -> None:
        self._log = log
        self._period = period_s
        self._last: dict[str, float] = {}
        self._suppressed: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def report(self, key: str, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._period:
                self._suppressed[key] += 1
                return
            self._last[key] = now
            repeats = self._suppressed.pop(key, 0)
        self._log(message + (f" ({repeats} more since last report)" if repeats else ""))


@dataclass
class CameraStats:
    received: int = 0
    skipped: int = 0  # decimated before decoding: not wanted at the sample rate
    added: int = 0
    dropped: int = 0  # refused by the buffer (out of order, too large, ...)
    invalid: int = 0  # FrameError while converting
    last_receive: float = 0.0
    last_error: str = ""


@dataclass
class _Job:
    spec: RequestSpec
    group: tuple[str, ...]
    cancel: threading.Event = field(default_factory=threading.Event)
    on_progress: Callable[[str, str], None] | None = None
    on_done: Callable[[Outcome], None] | None = None
    finished: bool = False
    outcome_kind: str = ""


@dataclass
class _Group:
    in_flight: int = 0
    pending: _Job | None = None
    running: list[_Job] = field(default_factory=list)


@dataclass
class _DepthState:
    depth: collections.deque[tuple[int, Image]] = field(default_factory=lambda: collections.deque(maxlen=30))
    info: CameraInfo | None = None


# ------------------------------------------------------------------------------------------------- node


class ReasonerNode(Node):
    def __init__(self, node_name: str = "reasoner_node", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        try:
            self.config = cfg = self._declare_and_read()
            problems = validate(cfg)
            catalog = None
            try:
                catalog = TaskCatalog.load(cfg.tasks_file or None)
                if cfg.task not in catalog:
                    problems.append(f"task: unknown task {cfg.task!r}; known: {', '.join(catalog.names())}")
            except (ReasonerError, OSError) as exc:
                problems.append(f"tasks_file: {exc}")
            if problems:
                raise ConfigError("invalid parameters:\n  " + "\n  ".join(problems))
            assert catalog is not None
            writer, client_settings, request_settings = self._core_settings(cfg)
        except Exception:
            super().destroy_node()  # the half-built node must not outlive the failed start
            raise
        self._problems = ProblemLog(self.get_logger().warning)
        self._lock = threading.Lock()
        self._instruction = cfg.instruction
        self._ids = itertools.count(1)
        self._groups: dict[tuple[str, ...], _Group] = collections.defaultdict(_Group)
        self._goal_cancels: dict[bytes, threading.Event] = {}
        self._shutting_down = False
        self._stats = {c.name: CameraStats() for c in cfg.cameras}
        self._depth = {c.name: _DepthState() for c in cfg.cameras if c.depth_topic}
        self._frame_ids = {c.name: c.frame_id for c in cfg.cameras}
        self._counts: collections.Counter[str] = collections.Counter()
        self._last: dict[str, Any] = {"latency_s": 0.0, "ttft_s": 0.0, "error": "", "error_kind": ""}
        self._points_dropped = 0
        # (outcome, time.monotonic() when all its messages were published): request-path timings for
        # benchmarks and tests, bounded.
        self.recent: collections.deque[tuple[Outcome, float]] = collections.deque(maxlen=100)
        self._server_healthy: bool | None = None
        self._server_model = cfg.model
        self._health_error = ""

        # The core: buffers, media, tasks, client, pipeline.
        max_bytes = int(cfg.buffer_max_mb * 1024 * 1024)
        self.buffers = {
            c.name: ClipBuffer(c.name, cfg.sample_fps, cfg.buffer_seconds, max_bytes, cfg.max_long_side)
            for c in cfg.cameras
        }
        self.buffer = MultiCameraBuffer(list(self.buffers.values()))
        self.client = ReasonerClient(client_settings)
        self.pipeline = Pipeline(
            self.buffer,
            writer,
            catalog,
            self.client,
            request_settings,
            PipelineSettings(
                clip_seconds=cfg.clip_seconds,
                tiled=cfg.tiled,
                stream=cfg.stream,
                wait_for_server_s=cfg.wait_for_server_s,
            ),
        )
        # Frames encoded on arrival make a clip at trigger time a matter of muxing; "auto" spends that CPU
        # only while triggers come (the timer, or a trigger within the last buffer_seconds). A tiled video
        # is composed at trigger time, so its cameras' frames are never reused: nothing to encode ahead.
        tiled = cfg.tiled and len(cfg.cameras) > 1
        useful = cfg.pre_encode != "off" and writer.backend == "pyav" and not tiled
        self._pre_encoder = PreEncoder(writer) if useful else None
        self._last_trigger = -math.inf
        workers = cfg.workers or len(cfg.cameras) * cfg.max_in_flight + 1
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="reasoner-worker")

        # Callback groups: one per camera (its callbacks stay ordered), triggers, timers.
        self._trigger_group = ReentrantCallbackGroup()
        self._timer_group = MutuallyExclusiveCallbackGroup()

        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        self.result_pub = self.create_publisher(ReasonerResult, "~/result", reliable)
        self.next_action_pub = self.create_publisher(String, "~/next_action", reliable)
        self.annotated_pub = self.create_publisher(Image, "~/annotated_image", latched)
        self.markers_pub = self.create_publisher(MarkerArray, "~/markers", reliable)
        self.path_pub = self.create_publisher(PathMsg, "~/trajectory", reliable)
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)

        image_qos = qos_profile_sensor_data if cfg.image_qos == "sensor_data" else reliable
        for cam in cfg.cameras:
            group = MutuallyExclusiveCallbackGroup()
            msg_type = CompressedImage if cam.compressed else Image
            self.create_subscription(
                msg_type, cam.topic, self._image_callback(cam.name), image_qos, callback_group=group
            )
            if cam.depth_topic:
                self.create_subscription(
                    Image, cam.depth_topic, self._depth_callback(cam.name), image_qos, callback_group=group
                )
                self.create_subscription(
                    CameraInfo,
                    cam.camera_info_topic,
                    self._info_callback(cam.name),
                    reliable,
                    callback_group=group,
                )

        self.create_subscription(
            String, "~/instruction", self._on_instruction, reliable, callback_group=self._trigger_group
        )
        self.create_service(Trigger, "~/trigger", self._on_trigger, callback_group=self._trigger_group)
        self._action = ActionServer(
            self,
            Reason,
            "~/reason",
            execute_callback=self._execute_goal,
            goal_callback=lambda _goal: GoalResponse.ACCEPT,
            cancel_callback=self._cancel_goal,
            callback_group=self._trigger_group,
        )
        if cfg.trigger_period_s > 0:
            self.create_timer(cfg.trigger_period_s, self._on_timer, callback_group=self._timer_group)
        self.create_timer(
            cfg.diagnostics_period_s, self._publish_diagnostics, callback_group=self._timer_group
        )

        self._health_stop = threading.Event()
        self._health_thread = threading.Thread(target=self._health_loop, name="reasoner-health", daemon=True)
        self._health_thread.start()
        self.get_logger().info(
            f"ready: cameras {', '.join(c.name + '<-' + c.topic for c in cfg.cameras)}; "
            f"server {cfg.server_url}; "
            f"task {cfg.task}; timer {cfg.trigger_period_s or 'off'}; media {cfg.media_dir}"
        )

    # ------------------------------------------------------------------------------------- parameters

    @staticmethod
    def _core_settings(cfg: NodeConfig) -> tuple[ClipWriter, ClientSettings, RequestSettings]:
        """The core's own checks of the values (directory, codec, URL, ...) as one ConfigError."""
        try:
            writer = ClipWriter(
                MediaStore(
                    Path(cfg.media_dir),
                    RetentionPolicy(
                        max_files=cfg.media_max_files,
                        max_bytes=round(cfg.media_max_mb * 1024**2),
                        max_age_s=cfg.media_max_age_s,
                    ),
                ),
                codec=cfg.codec,
                inline=cfg.inline_media,
                image_format=cfg.image_format,
            )
            client_settings = ClientSettings(
                base_url=cfg.server_url,
                model=cfg.model,
                api_key_env=cfg.api_key_env,
                connect_timeout_s=cfg.connect_timeout_s,
                read_timeout_s=cfg.request_timeout_s,
                max_retries=cfg.max_retries,
            )
            request_settings = RequestSettings(
                fps=cfg.sample_fps,
                structured_output=cfg.structured_output,
                max_tokens=cfg.max_tokens or None,
                video_kwargs_mode=cfg.video_kwargs_mode,
            )
        except (ReasonerError, ValueError) as exc:
            raise ConfigError(f"invalid parameters:\n  {exc}") from exc
        return writer, client_settings, request_settings

    def _declare_and_read(self) -> NodeConfig:
        values: dict[str, Any] = {}
        for name, (default, doc) in PARAMETERS.items():
            values[name] = self._declare(name, default, doc)
        cameras = []
        for cam in values.pop("cameras"):
            c = {k: self._declare(f"camera.{cam}.{k}", d, doc) for k, (d, doc) in CAMERA_PARAMETERS.items()}
            if not c["topic"]:
                c["topic"] = f"/{cam}/image_raw" + ("/compressed" if c["compressed"] else "")
            cameras.append(CameraConfig(name=cam, **c))
        return NodeConfig(cameras=tuple(cameras), **values)

    def _declare(self, name: str, default: Any, doc: str) -> Any:
        # Floats accept integers too (`clip_seconds: 4` in YAML); every other type is checked by rclpy.
        is_float = isinstance(default, float)
        descriptor = ParameterDescriptor(
            description=doc, type=_TYPES[type(default)], read_only=True, dynamic_typing=is_float
        )
        value = self.declare_parameter(name, default, descriptor).value
        if is_float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"invalid parameters:\n  {name}: must be a number, got {value!r}")
            value = float(value)
        return list(value) if isinstance(default, list) else value

    # ------------------------------------------------------------------------------------------ inputs

    def _image_callback(self, camera: str) -> Callable[[Any], None]:
        buffer, stats = self.buffers[camera], self._stats[camera]
        use_receive_time = self.config.use_receive_time
        frame_id_override = self._frame_ids[camera]

        def on_image(msg: Any) -> None:
            stats.received += 1
            stats.last_receive = time.monotonic()
            try:
                stamp = message_stamp_ns(msg, self.get_clock().now().nanoseconds, use_receive_time)
                if not buffer.wants(stamp):  # decimate before paying for decoding
                    stats.skipped += 1
                    return
                image = message_to_array(msg, copy=False)  # add() resizes or copies: no second copy
                frame_id = frame_id_override or msg.header.frame_id
                kept = buffer.add(Frame(camera=camera, stamp_ns=stamp, image=image, frame_id=frame_id))
                if kept is not None:
                    stats.added += 1
                    if self._pre_encoder is not None and self._pre_encoding():
                        self._pre_encoder.submit(kept)
                    if not self._frame_ids[camera]:
                        self._frame_ids[camera] = frame_id
                else:
                    stats.dropped += 1
            except FrameError as exc:
                stats.invalid += 1
                stats.last_error = str(exc)
                # Numbers vary between frames of one problem (sizes, stamps): one key per kind of message.
                key = re.sub(r"\d+", "#", str(exc))
                self._problems.report(f"frame:{camera}:{key}", f"camera {camera}: dropped a frame: {exc}")
            except Exception as exc:  # a bug must not stop the camera stream
                stats.invalid += 1
                stats.last_error = f"{type(exc).__name__}: {exc}"
                self._problems.report(f"frame-bug:{camera}:{type(exc).__name__}", f"camera {camera}: {exc!r}")

        return on_image

    def _depth_callback(self, camera: str) -> Callable[[Image], None]:
        state = self._depth[camera]

        def on_depth(msg: Image) -> None:
            stamp = time_to_ns(msg.header.stamp) or self.get_clock().now().nanoseconds
            state.depth.append((stamp, msg))  # decoded only when a trajectory needs it

        return on_depth

    def _info_callback(self, camera: str) -> Callable[[CameraInfo], None]:
        state = self._depth[camera]

        def on_info(msg: CameraInfo) -> None:
            state.info = msg

        return on_info

    def _on_instruction(self, msg: String) -> None:
        with self._lock:
            self._instruction = msg.data
        self.get_logger().info(f"instruction set: {msg.data!r}")

    # ---------------------------------------------------------------------------------------- triggers

    def new_spec(
        self,
        task: str = "",
        instruction: str = "",
        step: str = "",
        cameras: tuple[str, ...] = (),
        clip_seconds: float = 0.0,
    ) -> RequestSpec:
        with self._lock:
            default_instruction = self._instruction
        request_id = f"{self.get_name()}-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        return RequestSpec(
            request_id=request_id,
            task=task or self.config.task,
            instruction=instruction or default_instruction,
            step=step,
            cameras=cameras,
            clip_seconds=clip_seconds,
            trigger_time=time.monotonic(),
        )

    def _pre_encoding(self) -> bool:
        cfg = self.config
        return (
            cfg.pre_encode == "on"
            or cfg.trigger_period_s > 0
            or time.monotonic() - self._last_trigger < cfg.buffer_seconds
        )

    def submit(
        self,
        spec: RequestSpec,
        on_progress: Callable[[str, str], None] | None = None,
        on_done: Callable[[Outcome], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> _Job:
        """Queue one request; its outcome is published exactly once (busy and replaced ones included)."""
        self._last_trigger = time.monotonic()
        group = tuple(sorted(spec.cameras or (c.name for c in self.config.cameras)))
        job = _Job(spec=spec, group=group, on_progress=on_progress, on_done=on_done)
        if cancel is not None:
            job.cancel = cancel
        unknown = [c for c in spec.cameras if c not in self.buffers]
        if unknown:
            self._finish(job, error_outcome(spec, TaskError(f"unknown cameras {unknown}")))
            return job
        rejected: tuple[_Job, str] | None = None
        with self._lock:
            g = self._groups[group]
            if self._shutting_down:
                rejected = (job, "the node is shutting down")
            elif g.in_flight < self.config.max_in_flight:
                g.in_flight += 1
                g.running.append(job)
                self._pool.submit(self._run_job, job)
            elif self.config.busy_policy == "replace":
                if g.pending is not None:
                    rejected = (g.pending, f"replaced by the newer request {spec.request_id}")
                g.pending = job
            else:
                rejected = (job, f"{g.in_flight} request(s) in flight for cameras {list(group)}")
        if rejected is not None:
            self._finish(rejected[0], error_outcome(rejected[0].spec, BusyError(rejected[1])))
        return job

    def _run_job(self, job: _Job) -> None:
        try:
            outcome = self.pipeline.run(job.spec, on_progress=job.on_progress, cancel=job.cancel)
        except Exception as exc:  # Pipeline.run does not raise; this keeps the one-result promise if it did
            self.get_logger().error(f"request {job.spec.request_id}: {exc!r}")
            outcome = error_outcome(job.spec, ReasonerError(f"{type(exc).__name__}: {exc}"))
        # Free the slot before publishing, so that a trigger sent on receipt of this result is not busy.
        with self._lock:
            g = self._groups[job.group]
            g.running.remove(job)
            next_job, g.pending = g.pending, None
            if next_job is not None and not self._shutting_down:
                g.running.append(next_job)
                self._pool.submit(self._run_job, next_job)
            else:
                g.in_flight -= 1
        self._finish(job, outcome)
        if next_job is not None and self._shutting_down:
            self._finish(
                next_job, error_outcome(next_job.spec, RequestCancelled("the node is shutting down"))
            )

    def _on_trigger(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        job = self.submit(self.new_spec())
        response.message = job.spec.request_id
        response.success = not (job.finished and job.outcome_kind == "busy")
        return response

    def _on_timer(self) -> None:
        self.submit(self.new_spec())

    async def _execute_goal(self, goal_handle: ServerGoalHandle[Any, Any, Any]) -> Any:
        goal = goal_handle.request
        accepted = time.monotonic()
        done: Future[Outcome] = Future(executor=self.executor)
        # A done callback makes set_result (called in a worker thread) wake the executor, which then resumes
        # this coroutine; without one nothing would wake it.
        done.add_done_callback(lambda _f: None)
        min_gap = 1.0 / self.config.feedback_rate_hz
        last_time, last_stage = 0.0, ""

        def on_progress(stage: str, text: str) -> None:
            nonlocal last_time, last_stage
            now = time.monotonic()
            if stage == last_stage == "streaming" and now - last_time < min_gap:
                return  # throttle streamed text, never stage changes
            last_time, last_stage = now, stage
            feedback = Reason.Feedback(
                stage=STAGES.index(stage), stage_name=stage, partial_text=text, elapsed_s=now - accepted
            )
            goal_handle.publish_feedback(feedback)

        spec = self.new_spec(
            goal.task, goal.instruction, goal.step, tuple(goal.cameras), float(goal.clip_seconds)
        )
        # The cancel event is registered before the job exists, so an early cancel request is not lost.
        cancel = threading.Event()
        key = bytes(goal_handle.goal_id.uuid)
        with self._lock:
            self._goal_cancels[key] = cancel
        try:
            self.submit(spec, on_progress=on_progress, on_done=done.set_result, cancel=cancel)
            outcome = await done
        finally:
            with self._lock:
                self._goal_cancels.pop(key, None)
        assert outcome is not None
        result = Reason.Result(result=result_msg(outcome, self._frame_id(outcome)))
        if outcome.error_kind == "cancelled" and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif outcome.success:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result

    def _cancel_goal(self, goal_handle: ServerGoalHandle[Any, Any, Any]) -> CancelResponse:
        with self._lock:
            cancel = self._goal_cancels.get(bytes(goal_handle.goal_id.uuid))
        if cancel is not None:
            cancel.set()
        return CancelResponse.ACCEPT

    # ----------------------------------------------------------------------------------------- outputs

    def _frame_id(self, outcome: Outcome) -> str:
        return self._frame_ids.get(outcome.answer_camera, "") if outcome.answer_camera else ""

    def _finish(self, job: _Job, outcome: Outcome) -> None:
        """Publish one outcome (exactly once per job) and hand it to the trigger's callback."""
        with self._lock:
            if job.finished:
                return
            job.finished = True
            job.outcome_kind = outcome.error_kind
            self._counts["success" if outcome.success else outcome.error_kind] += 1
            if outcome.success:
                self._last.update(latency_s=outcome.latency_s, ttft_s=outcome.ttft_s)
            else:
                self._last.update(error=outcome.error, error_kind=outcome.error_kind)
        frame_id = self._frame_id(outcome)
        try:
            self.result_pub.publish(result_msg(outcome, frame_id))
        except Exception as exc:
            self.get_logger().error(f"request {outcome.request_id}: could not publish the result: {exc!r}")
        if outcome.success:
            self._publish_extras(outcome, frame_id)
        self.recent.append((outcome, time.monotonic()))
        if not outcome.success:
            self._problems.report(
                f"request:{outcome.error_kind}",
                f"request {outcome.request_id} failed ({outcome.error_kind}): {outcome.error}",
            )
        if job.on_done is not None:
            try:
                job.on_done(outcome)
            except Exception as exc:
                self.get_logger().error(f"request {outcome.request_id}: completion callback failed: {exc!r}")

    def _publish_extras(self, outcome: Outcome, frame_id: str) -> None:
        parsed = outcome.parsed
        steps: list[tuple[str, Callable[[], None]]] = [
            ("next_action", lambda: self.next_action_pub.publish(String(data=ros_string(outcome.answer)))),
            ("annotated_image", lambda: self._publish_annotated(outcome, frame_id)),
        ]
        if parsed is not None and parsed.trajectories and outcome.answer_camera in self._depth:
            steps.append(("trajectory", lambda: self._publish_3d(outcome)))
        for what, publish in steps:
            try:
                publish()
            except Exception as exc:
                self._problems.report(
                    f"publish:{what}:{type(exc).__name__}", f"could not publish {what}: {exc!r}"
                )

    def _publish_annotated(self, outcome: Outcome, frame_id: str) -> None:
        clip = next((c for c in outcome.clips if c.camera == outcome.answer_camera), None)
        if clip is None or not clip.frames:
            return
        last = clip.frames[-1]
        parsed = outcome.parsed
        caption = outcome.answer.strip().splitlines()[0] if outcome.answer.strip() else ""
        drawn = annotate(
            last.image,
            parsed.trajectories if parsed else (),
            parsed.boxes if parsed else (),
            caption=caption if parsed is not None and not parsed.trajectories and not parsed.boxes else "",
        )
        self.annotated_pub.publish(image_msg(drawn, last.stamp_ns, frame_id))

    def _publish_3d(self, outcome: Outcome) -> None:
        camera = outcome.answer_camera
        state = self._depth[camera]
        info, depths = state.info, list(state.depth)
        if info is None or not depths:
            self._problems.report(f"depth:{camera}:missing", f"camera {camera}: no depth or camera info yet")
            return
        # The depth image closest in time to the clip's last frame.
        _, depth_msg = min(depths, key=lambda d: abs(d[0] - outcome.clip_end_ns))
        depth = message_to_array(depth_msg)
        intrinsics = Intrinsics.from_k(list(info.k), info.width, info.height)
        frame_id = self.config.camera(camera).frame_id or info.header.frame_id or depth_msg.header.frame_id
        paths = []
        assert outcome.parsed is not None
        for trajectory in outcome.parsed.trajectories:
            points = [
                (
                    p.x if p.x is not None else p.x_norm / 1000 * outcome.image_width,
                    p.y if p.y is not None else p.y_norm / 1000 * outcome.image_height,
                )
                for p in trajectory.points
            ]
            projected = back_project(
                points,
                (outcome.image_width, outcome.image_height),
                depth,
                intrinsics,
                self.config.depth_window_px,
            )
            if projected.dropped:
                with self._lock:
                    self._points_dropped += projected.dropped
                self._problems.report(
                    f"depth:{camera}:dropped",
                    f"camera {camera}: dropped {projected.dropped} trajectory point(s) without valid depth",
                )
            paths.append((trajectory.label, projected.points))
        for _label, points3d in paths:
            self.path_pub.publish(path_msg(points3d, frame_id, outcome.clip_end_ns))
        self.markers_pub.publish(path_markers(paths, frame_id, outcome.clip_end_ns))

    # ------------------------------------------------------------------------------------- diagnostics

    def _health_loop(self) -> None:
        while not self._health_stop.is_set():
            try:
                healthy = self.client.health()
                error = "" if healthy else "health check failed"
                if healthy and not self._server_model:
                    self._server_model = self.client.model_id()
            except Exception as exc:
                healthy, error = False, f"{type(exc).__name__}: {exc}"
            changed = healthy != self._server_healthy
            self._server_healthy, self._health_error = healthy, error
            if changed:
                if healthy:
                    self.get_logger().info(
                        f"server {self.config.server_url} is healthy (model {self._server_model})"
                    )
                else:
                    self.get_logger().warning(f"server {self.config.server_url} is not reachable: {error}")
            self._health_stop.wait(self.config.health_period_s)

    def diagnostics(self) -> DiagnosticArray:
        cfg = self.config
        with self._lock:
            counts = dict(self._counts)
            last = dict(self._last)
            in_flight = sum(g.in_flight for g in self._groups.values())
            dropped_points = self._points_dropped
        healthy = self._server_healthy
        server_level = "ok" if healthy else ("warn" if healthy is None else "error")
        server_msg = {True: "healthy", False: f"unreachable: {self._health_error}", None: "not checked yet"}[
            healthy
        ]
        statuses = [
            diagnostic_status(
                "reasoner_node: server",
                server_level,
                server_msg,
                {
                    "url": cfg.server_url,
                    "model": self._server_model or "(not discovered)",
                    "healthy": healthy,
                },
            )
        ]
        failures = {k: v for k, v in counts.items() if k != "success"}
        level = "warn" if last["error_kind"] and failures else "ok"
        message = f"last error ({last['error_kind']}): {last['error']}" if last["error_kind"] else "ok"
        values: dict[str, object] = {
            "succeeded": counts.get("success", 0),
            "failed": sum(failures.values()),
            "in_flight": in_flight,
            "last_latency_s": last["latency_s"],
            "last_ttft_s": last["ttft_s"],
            "last_error_kind": last["error_kind"],
            "depth_points_dropped": dropped_points,
            "frames_pre_encoded": self._pre_encoder.encoded if self._pre_encoder else 0,
            "frames_pre_encode_skipped": self._pre_encoder.skipped if self._pre_encoder else 0,
            "frames_encoded_kept": self.pipeline.writer.cached_frames,
        }
        values.update({f"failed_{k}": v for k, v in sorted(failures.items())})
        statuses.append(diagnostic_status("reasoner_node: requests", level, message, values))
        now = time.monotonic()
        for cam in cfg.cameras:
            s = self._stats[cam.name]
            fill = self._buffer_fill(cam.name)
            stale = s.last_receive == 0.0 or now - s.last_receive > max(2.0, 5.0 / cfg.sample_fps)
            statuses.append(
                diagnostic_status(
                    f"reasoner_node: camera {cam.name}",
                    "warn" if stale else "ok",
                    "no frames" if stale else "receiving",
                    {
                        "topic": cam.topic,
                        "frames_received": s.received,
                        "frames_buffered": s.added,
                        "frames_skipped_by_sampling": s.skipped,
                        "frames_dropped": s.dropped + s.invalid,
                        "frames_invalid": s.invalid,
                        "last_frame_error": s.last_error,
                        **fill,
                    },
                    hardware_id=cam.name,
                )
            )
        return diagnostic_array(statuses, self.get_clock().now().nanoseconds)

    def _buffer_fill(self, camera: str) -> dict[str, object]:
        s = self.buffers[camera].stats()
        return {
            "buffer_frames": s.frames,
            "buffer_seconds": s.fill_seconds,
            "buffer_bytes": s.fill_bytes,
            "buffer_fill_bytes_percent": 100.0 * s.fill_bytes / s.max_bytes,
            "buffer_resets": s.resets,
        }

    def _publish_diagnostics(self) -> None:
        try:
            self.diagnostics_pub.publish(self.diagnostics())
        except Exception as exc:
            self._problems.report(
                f"diagnostics:{type(exc).__name__}", f"could not publish diagnostics: {exc!r}"
            )

    # ---------------------------------------------------------------------------------------- shutdown

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Cancel in-flight requests, wait for their cancelled results, stop the health thread. Idempotent."""
        with self._lock:
            if self._shutting_down:
                return
            self._shutting_down = True
            jobs = [
                j for g in self._groups.values() for j in [*g.running, *([g.pending] if g.pending else [])]
            ]
        for job in jobs:
            job.cancel.set()
        self._health_stop.set()
        self._pool.shutdown(wait=True, cancel_futures=False)
        self._health_thread.join(timeout_s)
        if self._pre_encoder is not None:
            self._pre_encoder.close()
        self.pipeline.writer.close()  # its encoding threads; no request is left to use them
        close = getattr(self.client, "close", None)
        if callable(close):
            close()

    @property
    def executor_threads(self) -> int:
        """Executor threads this node can keep busy: one per camera (each camera's callbacks are mutually
        exclusive) plus one for triggers, goals and timers. rclpy's default is one per CPU, and on a robot's
        many cores each extra thread only runs its own Python wait loop and competes for the GIL with the
        request workers."""
        return len(self.config.cameras) + 1

    def destroy_node(self) -> None:
        first = not self._shutting_down
        self.shutdown()
        if first:
            self._action.destroy()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    with rclpy.init(args=args):
        try:
            node = ReasonerNode()
        except ConfigError as exc:
            rclpy.logging.get_logger("reasoner_node").fatal(str(exc))
            return 2
        executor = MultiThreadedExecutor(num_threads=node.executor_threads)
        executor.add_node(node)
        try:
            executor.spin()
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        finally:
            node.destroy_node()
            executor.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
