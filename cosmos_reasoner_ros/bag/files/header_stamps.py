"""The header stamps of a topic's messages, read from the CDR bytes without deserializing the rest (an image's
pixels are never copied): every message type that starts with a std_msgs/Header (Image, CompressedImage,
CameraInfo, ...) carries its stamp in the first eight bytes after the encapsulation header; and `check`'s
look at a camera's stamps: any that go back (not after the previous one's: the node drops a duplicate or an
out-of-order frame, and a jump back starts a new timeline) or sit more than STAMP_FAR_S from their log time.
No ROS import."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from cosmos_reasoner_ros.bag.files.reader import BagReader

__all__ = ["STAMP_FAR_S", "StampCheck", "check_stamps", "header_stamp_ns", "header_stamps"]


def header_stamp_ns(data: bytes) -> int | None:
    """A header-first message's stamp in ns (None when the bytes are too short to hold one)."""
    if len(data) < 12:
        return None
    big_endian = data[1] == 0  # the encapsulation kind: 0x0000 CDR_BE, 0x0001 CDR_LE
    sec, nanosec = struct.unpack_from(">iI" if big_endian else "<iI", data, 4)
    return int(sec) * 1_000_000_000 + int(nanosec)


def header_stamps(reader: BagReader, topic: str) -> list[tuple[int, int]]:
    """(receive time, header stamp) of every message of the topic in the recording's order; a message too
    short to hold a header is left out (the integrity check reports it)."""
    out = []
    for m in reader.messages([topic]):
        stamp = header_stamp_ns(m.data)
        if stamp is not None:
            out.append((m.log_ns, stamp))
    return out


STAMP_FAR_S = 1.0  # [s] a header stamp further than this from its log time: another clock, or a jump


@dataclass(frozen=True)
class StampCheck:
    """One camera topic's header stamps against each other and against their log times (`check`); times
    in seconds from the recording's start. A zero stamp (a driver that does not stamp) is left out."""

    topic: str
    frames: int
    back_s: tuple[float, ...] = ()  # log times of frames whose stamp is not after the previous frame's
    back_by_s: float = 0.0  # [s] the largest step back
    far: int = 0  # frames whose stamp sits more than STAMP_FAR_S from their log time
    far_span_s: tuple[float, float] = (0.0, 0.0)  # log times of the first and last of those
    worst_offset_s: float = 0.0  # [s] stamp minus log time, the furthest from 0

    def line(self) -> str:
        if not self.back_s and not self.far:
            return f"header stamps of {self.topic}: in order, within {STAMP_FAR_S:g} s of their log time"
        said = []
        if self.back_s:
            at = ", ".join(f"{t:.2f}" for t in self.back_s[:5]) + (" ..." if len(self.back_s) > 5 else "")
            said.append(f"{len(self.back_s)} go back (at {at} s; up to {self.back_by_s:.2f} s)")
        if self.far:
            a, b = self.far_span_s
            way = "behind" if self.worst_offset_s < 0 else "ahead of"
            said.append(
                f"{self.far} of {self.frames} sit more than {STAMP_FAR_S:g} s from their log time (up to "
                f"{abs(self.worst_offset_s):.2f} s {way} it, at {a:.2f}-{b:.2f} s)"
            )
        return f"header stamps of {self.topic}: " + "; ".join(said)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "frames": self.frames,
            "back_s": list(self.back_s),
            "back_by_s": self.back_by_s,
            "far": self.far,
            "far_span_s": list(self.far_span_s),
            "worst_offset_s": self.worst_offset_s,
            "far_limit_s": STAMP_FAR_S,
        }


def check_stamps(reader: BagReader, topic: str, origin_ns: int) -> StampCheck:
    """The topic's header stamps that go back, or sit more than STAMP_FAR_S from their log time."""
    frames = [(log, stamp) for log, stamp in header_stamps(reader, topic) if stamp]
    back, back_by, far = [], 0, []
    worst = 0
    for i, (log, stamp) in enumerate(frames):
        if i and stamp <= frames[i - 1][1]:
            back.append(round((log - origin_ns) / 1e9, 3))
            back_by = max(back_by, frames[i - 1][1] - stamp)
        offset = stamp - log
        if abs(offset) > STAMP_FAR_S * 1e9:
            far.append(log)
        worst = max(worst, offset, key=abs)
    span = ((far[0] - origin_ns) / 1e9, (far[-1] - origin_ns) / 1e9) if far else (0.0, 0.0)
    return StampCheck(
        topic,
        len(frames),
        tuple(back),
        round(back_by / 1e9, 3),
        len(far),
        (round(span[0], 3), round(span[1], 3)),
        round(worst / 1e9, 3),
    )
