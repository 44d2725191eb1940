"""reasoner_node's parameters on its cameras' clips, in the order the node declares them: which cameras,
what each keeps (rate, size, history, memory), the clip files and their retention, and how a clip goes to the
server (codec, the served model's video sampling, video or frames, pre-encoding)."""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.record import Parameter, seconds

__all__ = ["CLIP_RECORDS", "DEFAULT_MEDIA_DIR", "MEDIA_FORMS"]

MEDIA_FORMS = ("auto", "video", "frames")  # how a clip goes to the server (reasoner/media_form.py)
# The clip directory the node writes and the server reads (vllm --allowed-local-media-path; server/settings.py
# takes it from here). Created 0700 by the node's MediaStore. config/reasoner.yaml and config/server.yaml
# carry the same value (test/test_package_files.py).
DEFAULT_MEDIA_DIR = "/tmp/cosmos_reasoner/media"  # noqa: S108

CLIP_RECORDS: tuple[Parameter, ...] = (
    Parameter(
        "cameras",
        list,
        ["camera"],
        description="camera names; each has camera.<name>.* parameters",
    ),
    seconds("clip_seconds", 4.0, (0.05, 600.0), "default length of the clip ending at the trigger"),
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
    seconds("buffer_seconds", 30.0, (0.05, 3600.0), "history kept per camera"),
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
    seconds(
        "max_stamp_ahead_s",
        5.0,
        (0.0, 86400.0),
        "frames stamped further ahead of their receive time are refused (clock skew allowance)",
    ),
    seconds(
        "stale_after_s",
        1.0,
        (0.01, 3600.0),
        (
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
    seconds(
        "media_max_age_s",
        3600.0,
        (0.0, 315360000.0),
        "retention: this node's clip files older than this are deleted; 0: keep",
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
        choices=MEDIA_FORMS,
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
)
