"""reasoner_node's own parameters, one record each, in the order the node declares them (a camera's in
cameras.py, the handoff's in handoff.py). config/reasoner.yaml shows each with its default and unit; a test
checks the file against these records.

Choices and defaults that another module also names (MEDIA_FORMS, the model families, the result checks,
the media folder) are written here as values, for this floor imports nothing of the package but the URL rule;
test/parameters/test_records.py checks that they agree.
"""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.record import Parameter, by_name
from cosmos_reasoner_ros.parameters.server_url import DEFAULT_SERVER_URL, server_url_problem

__all__ = ["DEFAULT_MEDIA_DIR", "MIN_TRIGGER_PERIOD_S", "NODE_PARAMETERS", "NODE_RECORDS"]

DEFAULT_MEDIA_DIR = "/tmp/cosmos_reasoner/media"  # noqa: S108  (package_files.DEFAULT_MEDIA_DIR)
MIN_TRIGGER_PERIOD_S = 0.05  # a timer faster than this only produces busy results

NODE_RECORDS: tuple[Parameter, ...] = (
    Parameter(
        "cameras",
        list,
        ["camera"],
        description="camera names; each has camera.<name>.* parameters",
    ),
    Parameter(
        "clip_seconds",
        float,
        4.0,
        unit="s",
        range=(0.05, 600.0),
        description="default length of the clip ending at the trigger",
    ),
    Parameter(
        "sample_fps",
        float,
        4.0,
        unit="Hz",
        range=(0.05, 120.0),
        description="frames kept per second per camera (decimation before decoding)",
    ),
    Parameter(
        "max_long_side",
        int,
        640,
        unit="px",
        range=(0, 16_384),
        description="frames are downscaled so that their long side is at most this; 0 keeps size",
    ),
    Parameter(
        "buffer_seconds",
        float,
        30.0,
        unit="s",
        range=(0.05, 3600.0),
        description="history kept per camera",
    ),
    Parameter(
        "buffer_max_mb",
        float,
        512.0,
        unit="MiB",
        range=(1.0, 262144.0),
        description="memory bound of each camera's buffer",
    ),
    Parameter(
        "max_pixels",
        int,
        33177600,
        unit="px",
        range=(1, 1 << 31),
        description=(
            "largest image accepted (width x height, from the header before decoding); default 8K UHD"
        ),
    ),
    Parameter(
        "max_stamp_ahead_s",
        float,
        5.0,
        unit="s",
        range=(0.0, 86400.0),
        description="frames stamped further ahead of their receive time are refused (clock skew allowance)",
    ),
    Parameter(
        "stale_after_s",
        float,
        1.0,
        unit="s",
        range=(0.01, 3600.0),
        description=(
            "a camera whose newest frame lags the newest camera's by more (at least two sampling periods) "
            "is left out of a request and named in its result"
        ),
    ),
    Parameter(
        "media_dir",
        str,
        DEFAULT_MEDIA_DIR,
        description="directory for clip files (the server must be allowed to read it)",
    ),
    Parameter(
        "media_max_files",
        int,
        200,
        range=(0, 1_000_000),
        description=(
            "retention: most clip files of this node in media_dir at any instant (besides the one being "
            "written, a hidden temporary); 0: no limit"
        ),
    ),
    Parameter(
        "media_max_mb",
        float,
        2048.0,
        unit="MiB",
        range=(0.0, 1 << 24),
        description="retention: most bytes of this node's clip files; 0: no limit",
    ),
    Parameter(
        "media_max_age_s",
        float,
        3600.0,
        unit="s",
        range=(0.0, 315360000.0),
        description="retention: this node's clip files older than this are deleted; 0: keep",
    ),
    Parameter(
        "inline_media",
        bool,
        False,
        description="send clips as data: URLs instead of file:// URLs (for a server on another host)",
    ),
    Parameter(
        "codec",
        str,
        "auto",
        choices=("auto", "h264", "mp4v"),
        description="clip codec: auto (H.264 when PyAV is present, else mp4v), h264 or mp4v",
    ),
    Parameter(
        "model_video_fps",
        float,
        0.0,
        unit="Hz",
        range=(0.0, 120.0),
        description=(
            "the served model's video processor samples clips at this rate (its video_preprocessor_config: "
            "fps): clips carry only the frames it keeps; 0: unknown, every frame is sent"
        ),
    ),
    Parameter(
        "model_video_max_pixels",
        int,
        0,
        unit="px",
        range=(0, 1 << 40),
        description=(
            "its pixel budget for a whole video (size.longest_edge): clips are written at the size it "
            "resizes them to, so that the server does not; 0: unknown (sides only rounded to multiples of "
            "32)"
        ),
    ),
    Parameter(
        "model_video_min_pixels",
        int,
        0,
        unit="px",
        range=(0, 1 << 40),
        description="its size.shortest_edge; 0: unknown",
    ),
    Parameter(
        "image_format",
        str,
        "jpeg",
        choices=("jpeg", "png"),
        description="still image format for image tasks: jpeg or png",
    ),
    Parameter(
        "media_form",
        str,
        "auto",
        choices=("auto", "video", "frames"),
        description=(
            "how a clip goes to the server: auto (a video until the server refuses one, then its sampled "
            "frames as images), video (always; a refusal is the result's error) or frames (always images)"
        ),
    ),
    Parameter(
        "max_image_frames",
        int,
        8,
        unit="images",
        range=(1, 256),
        description="most frames of a clip sent as images in one request (fewer where the server says so)",
    ),
    Parameter(
        "tiled",
        bool,
        False,
        description="several cameras: one tiled video instead of one video per camera",
    ),
    Parameter(
        "pre_encode",
        str,
        "auto",
        choices=("auto", "on", "off"),
        description=(
            "encode kept frames as they arrive: auto (while the timer runs or after a trigger), on or off"
        ),
    ),
    Parameter(
        "server_url",
        str,
        DEFAULT_SERVER_URL,
        rule=server_url_problem,
        description="OpenAI-compatible base URL of the vLLM server",
    ),
    Parameter(
        "model",
        str,
        "",
        description="served model name; empty: the first model the server lists",
    ),
    Parameter(
        "model_family",
        str,
        "auto",
        choices=("auto", "nano", "super", "edge", "qwen3_vl"),
        description=(
            "how reasoning is asked for: auto (from model when it is a local checkpoint directory, else "
            "nano), nano, super, edge (the chat template's enable_thinking on or off, no suffix) or "
            "qwen3_vl"
        ),
    ),
    Parameter(
        "api_key_env",
        str,
        "COSMOS_REASONER_API_KEY",
        description="name of the environment variable holding the API key",
    ),
    Parameter(
        "connect_timeout_s",
        float,
        5.0,
        unit="s",
        range=(0.01, 3600.0),
        description="TCP connect timeout",
    ),
    Parameter(
        "request_timeout_s",
        float,
        120.0,
        unit="s",
        range=(0.01, 86400.0),
        description="read timeout of one request: longest silence (no byte)",
    ),
    Parameter(
        "first_token_timeout_s",
        float,
        30.0,
        unit="s",
        range=(0.0, 86400.0),
        description=(
            "longest wait for an answer's first token (reasoning or content; keep-alives and headers are no"
            " token), then too_slow; never longer than request_timeout_s (then timeout); an unstreamed body"
            " within this of its headers; 0: request_timeout_s"
        ),
    ),
    Parameter(
        "min_tokens_per_s",
        float,
        1.0,
        unit="tokens/s",
        range=(0.0, 100000.0),
        description=(
            "progress floor after the first token, over progress_window_s, then too_slow; also bounds a "
            "whole answer by first_token_timeout_s + max_tokens / this; 0: off"
        ),
    ),
    Parameter(
        "progress_window_s",
        float,
        10.0,
        unit="s",
        range=(0.1, 3600.0),
        description="the window over which min_tokens_per_s is averaged",
    ),
    Parameter(
        "request_total_timeout_s",
        float,
        0.0,
        unit="s",
        range=(0.0, 86400.0),
        description="longest whole request (retries included) from sending, then timeout; 0: no limit",
    ),
    Parameter(
        "max_retries",
        int,
        2,
        range=(0, 100),
        description="retries on connection errors and 5xx",
    ),
    Parameter(
        "stream",
        bool,
        True,
        description="stream answers (time to first token, partial text in action feedback)",
    ),
    Parameter(
        "structured_output",
        bool,
        True,
        description=(
            "send the task's JSON schema as structured output; the answer must then be one JSON value it "
            "accepts"
        ),
    ),
    Parameter(
        "max_tokens",
        int,
        0,
        unit="tokens",
        range=(0, 1_000_000),
        description="longest answer; 0: each task's own max_tokens (config/tasks.yaml)",
    ),
    Parameter(
        "video_kwargs_mode",
        str,
        "auto",
        choices=("auto", "media_io_kwargs", "mm_processor_kwargs", "none"),
        description=(
            "per-request video sampling: auto (from the server's vLLM version), media_io_kwargs, "
            "mm_processor_kwargs, none"
        ),
    ),
    Parameter(
        "tasks_file",
        str,
        "",
        description="YAML merged over the shipped task catalog; empty: shipped catalog only",
    ),
    Parameter(
        "task",
        str,
        "next_action",
        description="default task for the timer, the service and goals without a task",
    ),
    Parameter(
        "instruction",
        str,
        "",
        description="default instruction (task text / object / question) filled into the prompt",
    ),
    Parameter(
        "max_instruction_chars",
        int,
        2000,
        unit="characters",
        range=(1, 1_000_000),
        description="longest instruction accepted (topic, goal or parameter)",
    ),
    Parameter(
        "trigger_period_s",
        float,
        0.0,
        unit="s",
        range=(0.0, 86400.0),
        description="period of the timer trigger; 0: off",
    ),
    Parameter(
        "max_in_flight",
        int,
        1,
        range=(1, 256),
        description="requests in flight per camera group",
    ),
    Parameter(
        "busy_policy",
        str,
        "reject",
        choices=("reject", "replace"),
        description="when busy: reject (a busy result) or replace (the newest trigger waits, older fail)",
    ),
    Parameter(
        "request_queue_depth",
        int,
        256,
        unit="requests",
        range=(1, 100_000),
        description="depth of the ~/trigger, ~/reason and ~/instruction queues (holds a burst of calls)",
    ),
    Parameter(
        "use_receive_time",
        bool,
        True,
        description="use the receive time for images whose header.stamp is zero",
    ),
    Parameter(
        "image_qos",
        str,
        "sensor_data",
        choices=("sensor_data", "reliable"),
        description="image subscription QoS: sensor_data (best effort) or reliable",
    ),
    Parameter(
        "wait_for_server_s",
        float,
        0.0,
        unit="s",
        range=(0.0, 86400.0),
        description="before each request, wait up to this long for the server to be healthy",
    ),
    Parameter(
        "health_period_s",
        float,
        2.0,
        unit="s",
        range=(0.05, 3600.0),
        description="period of the server health check (off the executor)",
    ),
    Parameter(
        "diagnostics_period_s",
        float,
        1.0,
        unit="s",
        range=(0.05, 3600.0),
        description="period of /diagnostics",
    ),
    Parameter(
        "feedback_rate_hz",
        float,
        10.0,
        unit="Hz",
        range=(0.01, 1000.0),
        description="most action feedback messages per second while streaming",
    ),
    Parameter(
        "depth_window_px",
        int,
        3,
        unit="px",
        range=(0, 256),
        description="search radius for the nearest valid depth around a trajectory point",
    ),
    Parameter(
        "workers",
        int,
        0,
        range=(0, 1024),
        description="request worker threads; 0: cameras x max_in_flight + 1",
    ),
    Parameter(
        "shutdown_timeout_s",
        float,
        3.0,
        unit="s",
        range=(0.0, 60.0),
        description="at shutdown, longest wait for cancelled requests to publish their results",
    ),
    Parameter(
        "lifecycle",
        bool,
        False,
        description=(
            "true: a managed node (ros2 lifecycle configure/activate/deactivate/cleanup/shutdown), started "
            "unconfigured; false: configures and activates itself at start"
        ),
    ),
    Parameter(
        "activate_wait_for_server_s",
        float,
        0.0,
        unit="s",
        range=(0.0, 3600.0),
        description=(
            "managed node: activate waits this long for the server to be healthy, else fails; 0: no wait"
        ),
    ),
    Parameter(
        "max_result_age_s",
        float,
        0.0,
        unit="s",
        range=(0.0, 86400.0),
        description=(
            "a successful answer older than this when published (clip end to publication) is published as "
            "stale and not forwarded to ~/next_action, ~/trajectory, ~/markers; 0: no limit; goals may "
            "override"
        ),
    ),
    Parameter(
        "trigger_tasks",
        str,
        "",
        description=(
            "tasks the timer and ~/trigger ask of each clip, comma-separated (one result each); empty: task"
        ),
    ),
    Parameter(
        "trigger_deadline_s",
        float,
        0.0,
        unit="s",
        range=(0.0, 86400.0),
        description=(
            "deadline of the timer's and ~/trigger's requests from the trigger (then cancelled: timeout); "
            "0: none"
        ),
    ),
    Parameter(
        "trigger_reasoning",
        bool,
        True,
        description=(
            "false: the timer's and ~/trigger's requests turn reasoning off (the task's plain prompt and "
            "profile)"
        ),
    ),
    Parameter(
        "publish_checks",
        list,
        ["points_in_image", "boxes_in_image", "depth_coverage", "max_step"],
        description=(
            "geometric checks that must pass before ~/trajectory and ~/markers are published; [none]: "
            "publish regardless"
        ),
    ),
    Parameter(
        "min_depth_fraction",
        float,
        0.75,
        unit="0-1",
        range=(0.0, 1.0),
        description="depth_coverage check: least fraction of trajectory points with a valid depth",
    ),
    Parameter(
        "max_step_m",
        float,
        0.5,
        unit="m",
        range=(1e-06, 1000.0),
        description="max_step check: largest 3D distance between consecutive trajectory points",
    ),
)
NODE_PARAMETERS = by_name(NODE_RECORDS)
