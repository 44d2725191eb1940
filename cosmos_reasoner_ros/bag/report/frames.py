"""The frames a report shows: a camera topic's frames by header stamp (decoded on demand), a record's answer
drawn on its frame, and a baseline's and a run's answers drawn on one frame where they differ."""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.files.topics import CAMERA_TYPES, VIDEO_TYPE, choose_topics
from cosmos_reasoner_ros.bag.files.video import VideoDecoder
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.errors import FrameError
from cosmos_reasoner_ros.geometry import Trajectory, ns_from_sec_nanosec

__all__ = [
    "FrameIndex",
    "annotated_frame",
    "difference_frame",
    "frame_source",
    "handoff_trajectory",
    "record_frame",
    "save_image",
]


class FrameIndex:
    """The colour frames of one camera topic of a bag by header stamp, decoded on demand (only the frames a
    report shows). Video topics (foxglove CompressedVideo) decode from the keyframe before the frame."""

    def __init__(self, bag: Path | BagReader, topic: str = "", start_ns: int | None = None) -> None:
        self.reader = bag if isinstance(bag, BagReader) else BagReader(bag)
        self._owned = not isinstance(bag, BagReader)
        try:
            self.topic = topic or choose_topics(self.reader, depth=False).cameras[0]
            info = self.reader.topic(self.topic)
            if info.msgtype not in CAMERA_TYPES:
                raise BagError(f"topic {self.topic} carries {info.msgtype}, not camera images")
            self.msgtype = info.msgtype
            self.store, unknown = self.reader.typestore([self.topic])
            if self.msgtype in unknown:
                raise BagError(f"topic {self.topic}: {unknown[self.msgtype]}")
            stamps: list[int] = []
            bag_ns: list[int] = []
            keys: list[bool] = []
            decoder = VideoDecoder(self.topic) if self.video else None
            for m in self.reader.messages([self.topic]):
                msg: Any = self.store.deserialize_cdr(m.data, m.msgtype)
                if decoder is not None:
                    stamps.append(ns_from_sec_nanosec(msg.timestamp.sec, msg.timestamp.nanosec))
                    keys.append(any(f.key for f in decoder.decode(msg)))
                else:
                    stamps.append(ns_from_sec_nanosec(msg.header.stamp.sec, msg.header.stamp.nanosec))
                bag_ns.append(m.log_ns)
            if not stamps:
                raise BagError(f"topic {self.topic} has no messages")
        except BaseException:
            if self._owned:
                self.reader.close()
            raise
        order = sorted(range(len(stamps)), key=stamps.__getitem__)
        self._stamps = [stamps[i] for i in order]
        self._bag_ns = [bag_ns[i] for i in order]
        self._keys = [keys[i] for i in order] if keys else []
        self._start_ns = min(bag_ns) if start_ns is None else start_ns

    @property
    def video(self) -> bool:
        return self.msgtype == VIDEO_TYPE

    @property
    def start_ns(self) -> int:
        """The replay's time 0 (trigger times count from it)."""
        return self._start_ns

    @property
    def count(self) -> int:
        return len(self._stamps)

    @property
    def compressed(self) -> bool:
        return self.msgtype.endswith("CompressedImage")

    def frame(self, stamp_ns: int) -> np.ndarray | None:
        """RGB frame with the newest header stamp at or before `stamp_ns` (the first frame when none is)."""
        from cosmos_reasoner_ros.clips import message_to_array

        i = max(0, bisect.bisect_right(self._stamps, stamp_ns) - 1)
        if self.video:
            return self._video_frame(i)
        for m in self.reader.messages([self.topic], self._bag_ns[i]):
            try:
                image = message_to_array(self.store.deserialize_cdr(m.data, m.msgtype), backend="numpy")
            except FrameError:
                return None
            return image if image.ndim == 3 else None
        return None

    def _video_frame(self, i: int) -> np.ndarray | None:
        k = next((j for j in range(i, -1, -1) if self._keys[j]), None)
        if k is None:
            return None
        decoder = VideoDecoder(self.topic)
        image = None
        for m in self.reader.messages([self.topic], self._bag_ns[k]):
            if m.log_ns > self._bag_ns[i]:
                break
            frames = decoder.decode(self.store.deserialize_cdr(m.data, m.msgtype))
            image = frames[-1].rgb if frames else image
        return image

    def stamp_for(self, record: ResultRecord) -> int:
        """The end of the record's clip (the trigger's bag time when the clip is unknown)."""
        return record.clip_end_ns or self.start_ns + round(record.trigger_s * 1e9)

    def frame_for(self, record: ResultRecord) -> np.ndarray | None:
        """The newest frame of the record's clip (the trigger's bag time when the clip is unknown)."""
        return self.frame(self.stamp_for(record))

    def close(self) -> None:
        if self._owned:
            self.reader.close()


def frame_source(frames: Mapping[str, FrameIndex], record: ResultRecord) -> FrameIndex | None:
    """The frames of the record's bag, by its bag label (a single entry serves every record)."""
    return frames.get(record.bag) or (next(iter(frames.values())) if len(frames) == 1 else None)


def record_frame(frames: Mapping[str, FrameIndex], record: ResultRecord) -> np.ndarray | None:
    """The record's frame from its bag's frames (None: none for its bag, or none decodes)."""
    source = frame_source(frames, record)
    return source.frame_for(record) if source is not None else None


def _caption(record: ResultRecord) -> str:
    """The answer's first line that says something (not a code fence), or the outcome of a failure."""
    if not record.success:
        return f"[{record.outcome}]"
    lines = [
        line.strip()
        for line in record.answer.splitlines()
        if line.strip() and not line.strip().startswith("```")
    ]
    first = lines[0] if lines else ""
    # Said on the frame too: an answer on a damaged clip (provenance) is no plain success.
    return f"[damaged clip] {first}".strip() if record.clip_damaged else first


def annotated_frame(record: ResultRecord, frame: np.ndarray) -> np.ndarray:
    """The frame with the record's trajectories and boxes (drawn from their 0-1000 values, so the frame's size
    need not match the one the node sent), or the answer's first line as a caption; with the Nav2 handoff, the
    path it would have sent, labelled with its decision."""
    from cosmos_reasoner_ros.geometry import annotate

    trajectories = [t.trajectory for t in record.trajectories]
    handoff = handoff_trajectory(record)
    if handoff is not None:
        trajectories.append(handoff)
    boxes = [b.box for b in record.boxes]
    caption = "" if trajectories or boxes else _caption(record)
    if record.handoff is not None and not trajectories:
        caption = f"{caption} [handoff {record.handoff.decision}]"
    return annotate(frame, trajectories, boxes, caption=caption)


def handoff_trajectory(record: ResultRecord) -> Trajectory | None:
    """The handoff's path as seen in the answer's image (its poses, every path_spacing_m), in 0-1000 so that
    it is drawn on frames of any size; labelled "handoff <decision>" (and the gate that refused it)."""
    from cosmos_reasoner_ros.geometry import Point2D, pixel_to_norm

    handoff = record.handoff
    sized = next((t for t in record.trajectories if t.width > 0 and t.height > 0), None)
    if handoff is None or not handoff.path_px or sized is None:
        return None
    gate = handoff.failed_gate
    label = f"handoff {handoff.decision}" + (f" ({gate.name})" if gate is not None else "")
    points = tuple(
        Point2D(label, pixel_to_norm(u, sized.width), pixel_to_norm(v, sized.height))
        for u, v in handoff.path_px
    )
    return Trajectory(label, points)


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
