"""The header stamps of a topic's messages, read from the CDR bytes without deserializing the rest (an image's
pixels are never copied): every message type that starts with a std_msgs/Header (Image, CompressedImage,
CameraInfo, ...) carries its stamp in the first eight bytes after the encapsulation header. No ROS import."""

from __future__ import annotations

import struct

from cosmos_reasoner_ros.bag.files.reader import BagReader

__all__ = ["header_stamp_ns", "header_stamps"]


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
