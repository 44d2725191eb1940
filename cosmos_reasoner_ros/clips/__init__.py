"""From camera messages to media the Reasoner reads, without ROS: messages to stamped numpy frames with the
hostile-input limits (image_conversion), what a camera sent against what arrived (arrivals), per-camera
bounded clip buffers (clip_buffer), one time window across cameras (multi_camera), encoding (video_encoder),
clips to MP4 / JPEG / data: URLs (clip_writer) as the served model's video processor takes them
(model_frames), a clip as a few stills for a server that takes no video (frame_images), and the private
media directory (media_store). Above geometry; below the reasoner."""

from cosmos_reasoner_ros.clips.arrivals import ArrivalReport, Arrivals, clip_shortfall
from cosmos_reasoner_ros.clips.clip_buffer import BufferStats, Clip, ClipBuffer, fit_long_side
from cosmos_reasoner_ros.clips.clip_writer import (
    CODECS,
    ClipWriter,
    clip_frame_rate,
    encoder_available,
    h264_available,
    tile_clips,
)
from cosmos_reasoner_ros.clips.frame_images import FrameImages, sample_frame_indices, write_frame_images
from cosmos_reasoner_ros.clips.image_conversion import (
    COLOUR_ENCODINGS,
    COLOUR_TOPIC_ENCODINGS,
    DEFAULT_MAX_PIXELS,
    DEPTH_ENCODINGS,
    Frame,
    check_stamp,
    message_stamp_ns,
    message_to_array,
    serialized_stamp_ns,
)
from cosmos_reasoner_ros.clips.media_store import (
    MediaRef,
    MediaStore,
    RetentionPolicy,
    secure_media_directory,
)
from cosmos_reasoner_ros.clips.model_frames import VisionProfile
from cosmos_reasoner_ros.clips.multi_camera import DEFAULT_STALE_AFTER_S, MultiCameraBuffer, Window
from cosmos_reasoner_ros.clips.pre_encoder import PreEncoder

__all__ = [
    "CODECS",
    "COLOUR_ENCODINGS",
    "COLOUR_TOPIC_ENCODINGS",
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_STALE_AFTER_S",
    "DEPTH_ENCODINGS",
    "ArrivalReport",
    "Arrivals",
    "BufferStats",
    "Clip",
    "ClipBuffer",
    "ClipWriter",
    "Frame",
    "FrameImages",
    "MediaRef",
    "MediaStore",
    "MultiCameraBuffer",
    "PreEncoder",
    "RetentionPolicy",
    "VisionProfile",
    "Window",
    "check_stamp",
    "clip_frame_rate",
    "clip_shortfall",
    "encoder_available",
    "fit_long_side",
    "h264_available",
    "message_stamp_ns",
    "message_to_array",
    "sample_frame_indices",
    "secure_media_directory",
    "serialized_stamp_ns",
    "tile_clips",
    "write_frame_images",
]
