"""Camera topics recorded as video (foxglove_msgs/msg/CompressedVideo: H.264 / H.265 / AV1 access units, one
frame per message, as robots record them to save space) decoded back to frames with PyAV. The message is read
with the definition stored in the bag, never a hard-coded one: releases of foxglove_msgs added fields. Frames
before the first keyframe cannot be decoded and are skipped. No ROS import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["VideoDecoder", "VideoFrame"]

_CODECS = {"h264": "h264", "h265": "hevc", "hevc": "hevc", "av1": "libdav1d", "vp9": "vp9"}


@dataclass(frozen=True)
class VideoFrame:
    stamp_ns: int  # the message's timestamp
    frame_id: str
    rgb: np.ndarray  # HxWx3 uint8
    key: bool


class VideoDecoder:
    """One camera topic's decoder; `decode(msg)` gives the frames a CompressedVideo message completes."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._codec: Any = None
        self._format = ""
        self.undecodable = 0  # messages that gave an error (before the first keyframe, damaged data)

    def _open(self, fmt: str) -> None:
        import av

        name = _CODECS.get(fmt.strip().lower())
        if name is None:
            raise BagError(
                f"topic {self.topic}: video format {fmt[:40]!r} is not one of {', '.join(_CODECS)}"
            )
        try:
            self._codec = av.CodecContext.create(name, "r")
        except (av.error.FFmpegError, ValueError) as exc:  # no such decoder in this PyAV build
            if name == "libdav1d":
                self._codec = av.CodecContext.create("av1", "r")
            else:
                raise BagError(f"topic {self.topic}: PyAV cannot decode {fmt}: {exc}") from None
        self._format = fmt

    def decode(self, msg: Any) -> list[VideoFrame]:
        """The frames of one message (usually one; none before the first keyframe)."""
        import av

        fmt = str(msg.format)
        if self._codec is None or fmt != self._format:
            self._open(fmt)
        stamp = int(msg.timestamp.sec) * 1_000_000_000 + int(msg.timestamp.nanosec)
        frames = []
        try:
            # One access unit per message (the format's rule): a packet each, so that a frame keeps the stamp
            # of its own message (a parser would hold each unit back until the next one starts).
            for frame in self._codec.decode(av.Packet(bytes(msg.data))):
                rgb = frame.to_ndarray(format="rgb24")
                frames.append(VideoFrame(stamp, str(msg.frame_id), rgb, bool(frame.key_frame)))
        except av.error.FFmpegError:
            self.undecodable += 1
            return []
        return frames
