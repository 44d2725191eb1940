"""A clip as a few still images for a server that takes no video (vLLM's `--limit-mm-per-prompt` with
`"video": 0`, NVIDIA's recipe for Nano on Jetson Thor): which frames, at which size, and their times from the
clip's start, so that a prompt can say when each frame was taken.

The frames are spread evenly over the clip's frames (their indices: the buffer keeps them at its sampling
rate, so that is even in time too, gaps aside), oldest first, the newest always among them. Each is written
through the ClipWriter's image path (JPEG or PNG, file:// in the media directory or a data: URL) at the size
the clip's video frames would have had for the served model (model_frames.VisionProfile), else its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import cv2

from cosmos_reasoner_ros.clips.clip_buffer import Clip
from cosmos_reasoner_ros.clips.clip_writer import ClipWriter, clip_frame_rate, tile_clips
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.media_store import MediaRef
from cosmos_reasoner_ros.errors import ClipError

__all__ = ["FrameImages", "sample_frame_indices", "write_frame_images"]

_NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class FrameImages:
    """The images of one clip (or of several cameras' clips, camera after camera), in time order per camera,
    with the time of each from the clip's start [s] (with several cameras, the earliest camera's first
    frame: one time line for all)."""

    media: tuple[MediaRef, ...]
    offsets_s: tuple[float, ...]  # one per image: its frame's stamp minus the clip's first stamp

    def __post_init__(self) -> None:
        if len(self.media) != len(self.offsets_s):
            raise ValueError(f"{len(self.offsets_s)} times for {len(self.media)} images")


def sample_frame_indices(count: int, limit: int) -> list[int]:
    """At most `limit` of `count` frames' indices, ascending and evenly spread (neighbouring gaps differ by
    at most one), the first and the newest (count - 1) among them; all of them when they fit."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if count <= limit:
        return list(range(count))
    if limit == 1:
        return [count - 1]
    # Integer arithmetic: floor(i * (count - 1) / (limit - 1)) is strictly increasing (the step is > 1)
    # and ends exactly at count - 1.
    return [i * (count - 1) // (limit - 1) for i in range(limit)]


def write_frame_images(
    writer: ClipWriter, clips: Sequence[Clip], limit: int, tiled: bool = False
) -> FrameImages:
    """The clips' sampled frames as images, at most `limit` in all: each camera gets an equal share (at
    least one); with more cameras than `limit`, or `tiled`, one grid of all cameras (tile_clips) is sampled
    instead, as its video would be."""
    if not clips:
        raise ClipError("no clips to write as frames")
    if any(not clip.frames for clip in clips):
        raise ClipError("a clip to write as frames has no frames")
    if len(clips) > 1 and (tiled or len(clips) > limit):
        clips = [tile_clips(clips)]
    share = max(1, limit // len(clips))
    first = min(clip.frames[0].stamp_ns for clip in clips)
    media: list[MediaRef] = []
    offsets: list[float] = []
    for clip in clips:
        size = model_size(writer, clip)
        for index in sample_frame_indices(len(clip.frames), share):
            frame = clip.frames[index]
            media.append(writer.write_image(_resized(frame, size)))
            offsets.append((frame.stamp_ns - first) / _NS_PER_S)
    return FrameImages(tuple(media), tuple(offsets))


def model_size(writer: ClipWriter, clip: Clip) -> tuple[int, int]:
    """(width, height) the clip's video frames would be written at: the served model's size for the frames
    its processor keeps (ClipWriter.write_clip's), else the newest frame's own size."""
    height, width = clip.frames[-1].image.shape[:2]
    vision = writer.vision
    if vision is None:
        return width, height
    rate = float(Fraction(clip_frame_rate(clip)).limit_denominator(1000))
    kept = len(vision.frame_indices(len(clip.frames), rate))
    return vision.frame_size(kept, width, height)


def _resized(frame: Frame, size: tuple[int, int]) -> Frame:
    """The frame at `size` (stretched, as the model's own resize would), its camera and stamp kept."""
    height, width = frame.image.shape[:2]
    if (width, height) == size:
        return frame
    shrink = size[0] * size[1] < width * height
    image = cv2.resize(frame.image, size, interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
    return dataclasses.replace(frame, image=image)
