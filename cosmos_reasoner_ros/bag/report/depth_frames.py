"""The depth of a scored run: a camera's depth topic and CameraInfo in its bag, the depth image closest to a
stamp decoded on demand, and pixel points back-projected into metres as the node does (geometry.back_project,
the depth closest to the clip's end), so that a label's trajectory and an answer's meet in 3D."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import numpy as np

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.files.topics import choose_topics
from cosmos_reasoner_ros.errors import FrameError
from cosmos_reasoner_ros.geometry import Intrinsics, back_project, ns_from_sec_nanosec

__all__ = ["DepthIndex"]


class DepthIndex:
    """Depth images of one camera by header stamp; None from `of` when the bag has no depth for it."""

    def __init__(self, reader: BagReader, depth_topic: str, info: Intrinsics, window_px: int = 3) -> None:
        self.reader = reader
        self.topic = depth_topic
        self.intrinsics = info
        self.window_px = window_px
        self.store, _ = reader.typestore([depth_topic])
        stamps: list[tuple[int, int]] = []
        for m in reader.messages([depth_topic]):
            msg: Any = self.store.deserialize_cdr(m.data, m.msgtype)
            stamps.append((ns_from_sec_nanosec(msg.header.stamp.sec, msg.header.stamp.nanosec), m.log_ns))
        stamps.sort()
        self._stamps = [s for s, _ in stamps]
        self._log_ns = [n for _, n in stamps]
        self._cached: tuple[int, np.ndarray | None] | None = None

    @classmethod
    def of(cls, reader: BagReader, camera_topic: str) -> DepthIndex | None:
        """The depth of `camera_topic` (its depth and CameraInfo topics, as the replay chooses them)."""
        try:
            topics = choose_topics(reader, (camera_topic,), depth=True)
        except BagError:
            return None
        depth, info_topic = topics.depths[0], topics.infos[0]
        if not depth or not info_topic:
            return None
        store, _ = reader.typestore([info_topic])
        for m in reader.messages([info_topic]):
            info: Any = store.deserialize_cdr(m.data, m.msgtype)
            try:
                intrinsics = Intrinsics.from_k(list(info.k), int(info.width), int(info.height))
            except ValueError:
                return None
            index = cls(reader, depth, intrinsics)
            return index if index._stamps else None
        return None

    def _depth(self, stamp_ns: int) -> np.ndarray | None:
        from cosmos_reasoner_ros.clips import message_to_array

        i = bisect.bisect_left(self._stamps, stamp_ns)
        near = [j for j in (i - 1, i) if 0 <= j < len(self._stamps)]
        k = min(near, key=lambda j: abs(self._stamps[j] - stamp_ns))
        if self._cached is not None and self._cached[0] == k:
            return self._cached[1]
        image = None
        for m in self.reader.messages([self.topic], self._log_ns[k]):
            try:
                image = message_to_array(self.store.deserialize_cdr(m.data, m.msgtype), backend="numpy")
            except FrameError:
                image = None
            break
        self._cached = (k, image)
        return image

    def project(
        self, stamp_ns: int, pixels: Sequence[tuple[float, float]], size: tuple[int, int]
    ) -> list[tuple[float, ...] | None]:
        """Each pixel point (of an image of `size`) in metres in the camera's optical frame; None where the
        depth has no valid value near it."""
        depth = self._depth(stamp_ns)
        if depth is None or depth.ndim != 2:
            return [None] * len(pixels)
        path = back_project(pixels, size, depth, self.intrinsics, self.window_px)
        out: list[tuple[float, ...] | None] = [None] * len(pixels)
        for index, point in zip(path.kept_indices, path.points, strict=True):
            out[index] = point
        return out
