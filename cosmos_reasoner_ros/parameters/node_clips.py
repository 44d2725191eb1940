"""reasoner_node's parameters on its cameras' clips, in the order the node declares them: which cameras,
what each keeps (rate, size, history, memory), the clip files and their retention, and how a clip goes to the
server (codec, the served model's video sampling, video or frames, pre-encoding)."""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.record import Parameter, flag, integer, names, number, seconds, text

__all__ = ["CLIP_RECORDS", "DEFAULT_MEDIA_DIR", "MEDIA_FORMS"]

MEDIA_FORMS = ("auto", "video", "frames")  # how a clip goes to the server (reasoner/media_form.py)
# The clip directory the node writes and the server reads (vllm --allowed-local-media-path; server/settings.py
# takes it from here). Created 0700 by the node's MediaStore. config/reasoner.yaml and config/server.yaml
# carry the same value (test/test_package_files.py).
DEFAULT_MEDIA_DIR = "/tmp/cosmos_reasoner/media"  # noqa: S108

CLIP_RECORDS: tuple[Parameter, ...] = (
    names("cameras", ["camera"], "camera names; each has camera.<name>.* parameters"),
    seconds("clip_seconds", 4.0, (0.05, 600.0), "default length of the clip ending at the trigger"),
    number(
        "sample_fps",
        4.0,
        "Hz",
        (0.05, 120.0),
        "frames kept per second per camera (decimation before decoding)",
    ),
    integer(
        "max_long_side",
        640,
        (0, 16_384),
        "frames are downscaled so that their long side is at most this; 0 keeps size",
        unit="px",
    ),
    seconds("buffer_seconds", 30.0, (0.05, 3600.0), "history kept per camera"),
    number("buffer_max_mb", 512.0, "MiB", (1.0, 262144.0), "memory bound of each camera's buffer"),
    integer(
        "max_pixels",
        33177600,
        (1, 1 << 31),
        "largest image accepted (width x height, from the header before decoding); default 8K UHD",
        unit="px",
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
    text("media_dir", DEFAULT_MEDIA_DIR, "directory for clip files (the server must be allowed to read it)"),
    integer(
        "media_max_files",
        200,
        (0, 1_000_000),
        (
            "retention: most clip files of this node in media_dir at any instant (besides the one being "
            "written, a hidden temporary); 0: no limit"
        ),
    ),
    number(
        "media_max_mb",
        2048.0,
        "MiB",
        (0.0, 1 << 24),
        "retention: most bytes of this node's clip files; 0: no limit",
    ),
    seconds(
        "media_max_age_s",
        3600.0,
        (0.0, 315360000.0),
        "retention: this node's clip files older than this are deleted; 0: keep",
    ),
    flag(
        "inline_media",
        False,
        "send clips as data: URLs instead of file:// URLs (for a server on another host)",
    ),
    text(
        "codec",
        "auto",
        "clip codec: auto (H.264 when PyAV is present, else mp4v), h264 or mp4v",
        choices=("auto", "h264", "mp4v"),
    ),
    number(
        "model_video_fps",
        0.0,
        "Hz",
        (0.0, 120.0),
        (
            "the served model's video processor samples clips at this rate (its video_preprocessor_config: "
            "fps): clips carry only the frames it keeps; 0: unknown, every frame is sent"
        ),
    ),
    integer(
        "model_video_max_pixels",
        0,
        (0, 1 << 40),
        (
            "its pixel budget for a whole video (size.longest_edge): clips are written at the size it "
            "resizes them to, so that the server does not; 0: unknown (sides only rounded to multiples of "
            "32)"
        ),
        unit="px",
    ),
    integer("model_video_min_pixels", 0, (0, 1 << 40), "its size.shortest_edge; 0: unknown", unit="px"),
    text("image_format", "jpeg", "still image format for image tasks: jpeg or png", choices=("jpeg", "png")),
    text(
        "media_form",
        "auto",
        (
            "how a clip goes to the server: auto (a video until the server refuses one, then its sampled "
            "frames as images), video (always; a refusal is the result's error) or frames (always images)"
        ),
        choices=MEDIA_FORMS,
    ),
    integer(
        "max_image_frames",
        8,
        (1, 256),
        "most frames of a clip sent as images in one request (fewer where the server says so)",
        unit="images",
    ),
    flag("tiled", False, "several cameras: one tiled video instead of one video per camera"),
    text(
        "pre_encode",
        "auto",
        "encode kept frames as they arrive: auto (while the timer runs or after a trigger), on or off",
        choices=("auto", "on", "off"),
    ),
)
