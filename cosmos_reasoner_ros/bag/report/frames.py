"""The frames a report shows: a bag's colour frames by header stamp (decoded on demand), a record's answer
drawn on its frame, and a baseline's and a run's answers drawn on one frame where they differ."""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.io import image_connections, messages, open_reader, typestore
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.errors import FrameError
from cosmos_reasoner_ros.geometry import Trajectory, ns_from_sec_nanosec

__all__ = ["FrameIndex", "annotated_frame", "difference_frame", "save_image"]


class FrameIndex:
    """The colour frames of a bag by header stamp, decoded on demand (only the frames a report shows)."""

    def __init__(self, bag: Path, topic: str = "") -> None:
        self.reader = open_reader(bag)
        try:
            self.conn = image_connections(self.reader, topic)[0]
            self.topic = self.conn.topic
            self.store = typestore()
            stamps: list[int] = []
            bag_ns: list[int] = []
            for _, t, data in messages(self.reader, [self.conn]):
                msg: Any = self.store.deserialize_cdr(data, self.conn.msgtype)
                stamps.append(ns_from_sec_nanosec(msg.header.stamp.sec, msg.header.stamp.nanosec))
                bag_ns.append(t)
            if not stamps:
                raise BagError(f"topic {self.topic} has no messages")
        except BaseException:
            self.reader.close()
            raise
        order = sorted(range(len(stamps)), key=stamps.__getitem__)
        self._stamps = [stamps[i] for i in order]
        self._bag_ns = [bag_ns[i] for i in order]

    @property
    def start_ns(self) -> int:
        return int(self.reader.start_time)

    @property
    def count(self) -> int:
        return len(self._stamps)

    @property
    def compressed(self) -> bool:
        return self.conn.msgtype.endswith("CompressedImage")

    def frame(self, stamp_ns: int) -> np.ndarray | None:
        """RGB frame with the newest header stamp at or before `stamp_ns` (the first frame when none is)."""
        from cosmos_reasoner_ros.clips import message_to_array

        i = max(0, bisect.bisect_right(self._stamps, stamp_ns) - 1)
        for _, _, data in messages(self.reader, [self.conn], self._bag_ns[i]):
            try:
                image = message_to_array(self.store.deserialize_cdr(data, self.conn.msgtype), backend="numpy")
            except FrameError:
                return None
            return image if image.ndim == 3 else None
        return None

    def frame_for(self, record: ResultRecord) -> np.ndarray | None:
        """The newest frame of the record's clip (the trigger's bag time when the clip is unknown)."""
        return self.frame(record.clip_end_ns or self.start_ns + round(record.trigger_s * 1e9))

    def close(self) -> None:
        self.reader.close()


def _caption(record: ResultRecord) -> str:
    """The answer's first line that says something (not a code fence), or the outcome of a failure."""
    if not record.success:
        return f"[{record.outcome}]"
    lines = [
        line.strip()
        for line in record.answer.splitlines()
        if line.strip() and not line.strip().startswith("```")
    ]
    return lines[0] if lines else ""


def annotated_frame(record: ResultRecord, frame: np.ndarray) -> np.ndarray:
    """The frame with the record's trajectories and boxes (drawn from their 0-1000 values, so the frame's size
    need not match the one the node sent), or the answer's first line as a caption."""
    from cosmos_reasoner_ros.geometry import annotate

    trajectories = [t.trajectory for t in record.trajectories]
    boxes = [b.box for b in record.boxes]
    caption = "" if trajectories or boxes else _caption(record)
    return annotate(frame, trajectories, boxes, caption=caption)


def _relabel(t: Trajectory, prefix: str) -> Trajectory:
    return Trajectory(f"{prefix}: {t.label}" if t.label else prefix, t.points)


def difference_frame(baseline: ResultRecord, current: ResultRecord, frame: np.ndarray) -> np.ndarray:
    """One frame with both answers: the baseline's geometry and the current run's in different colours (labels
    start with "baseline" / "current"), and both answers' first lines in a band below the image."""
    from dataclasses import replace

    from cosmos_reasoner_ros.geometry import annotate

    trajectories = [_relabel(t.trajectory, "baseline") for t in baseline.trajectories]
    trajectories += [_relabel(t.trajectory, "current") for t in current.trajectories]
    boxes = [replace(b.box, label=f"baseline: {b.label}") for b in baseline.boxes]
    boxes += [replace(b.box, label=f"current: {b.label}") for b in current.boxes]
    drawn = annotate(frame, trajectories, boxes)
    width = drawn.shape[1]
    scale = max(0.4, width / 1400.0)
    line_h = int(28 * scale) + 6
    band = np.full((2 * line_h + 6, width, 3), 32, dtype=np.uint8)
    for n, (name, record) in enumerate((("baseline", baseline), ("current", current))):
        text = f"{name}: {_caption(record)}"[: max(20, int(width / (11 * scale)))]
        colour = (255, 200, 120) if n == 0 else (140, 220, 255)
        y = (n + 1) * line_h
        cv2.putText(band, text, (6, y), cv2.FONT_HERSHEY_SIMPLEX, scale, colour, 1, cv2.LINE_AA)
    return np.vstack([drawn, band])


def save_image(rgb: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)):
        raise BagError(f"cannot write image {path}")
