"""How many frames a request's clip should hold: the node's own clip buffer (clips.ClipBuffer, with the
replayed node's sample_fps and buffer_seconds) fed every frame the recording holds up to the trigger, as a
node that lost nothing would have buffered them. A clip with fewer frames lost some: refused by the node
(undecodable, bad stamps), dropped, or evicted. No ROS import."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cosmos_reasoner_ros.clips import ClipBuffer, Frame
from cosmos_reasoner_ros.errors import NoFramesError

__all__ = ["ClipSettings", "expected_frames"]

_TINY = np.zeros((2, 2, 3), dtype=np.uint8)


@dataclass(frozen=True)
class ClipSettings:
    """The replayed node's clip parameters (read from the node once it runs)."""

    clip_seconds: float
    sample_fps: float
    buffer_seconds: float


def expected_frames(
    frames: Sequence[tuple[int, int]], settings: ClipSettings, requests: Sequence[tuple[int, int]]
) -> list[int]:
    """Per request (trigger bag time, clip end stamp), the frames a lossless node would have sent: every frame
    of `frames` ((receive time, header stamp) in the recording's order) received before the trigger,
    buffered as the node buffers them, then the clip_seconds up to the clip's end. One pass over the frames
    for all requests (they are answered in trigger order)."""
    buffer = ClipBuffer("expected", settings.sample_fps, settings.buffer_seconds, 1 << 40, 0)
    receive = [r for r, _ in frames]
    fed = 0
    out = [0] * len(requests)
    for i in sorted(range(len(requests)), key=lambda i: requests[i][0]):
        trigger_ns, clip_end_ns = requests[i]
        # Every frame recorded up to the trigger's time went out before it (the player's marks).
        upto = bisect.bisect_right(receive, trigger_ns)
        for receive_ns, stamp_ns in frames[fed:upto]:
            stamp = stamp_ns or receive_ns  # a zero stamp: the node stamps the frame when it arrives
            if buffer.wants(stamp):
                buffer.add(Frame("expected", stamp, _TINY))
        fed = max(fed, upto)
        try:
            out[i] = len(buffer.clip(settings.clip_seconds, clip_end_ns).frames)
        except (NoFramesError, ValueError):
            out[i] = 0
    return out
