"""Provenance per answer: what the recording held, per camera, in each request's own clip window, and
whether its clip ends well before its trigger. Computed from the recording itself (no ROS import):

- window: the `clip_seconds` of bag time up to the trigger, [trigger - clip_seconds, trigger], frames placed
  by their log (receive) time, as a node that lost nothing would have buffered them;
- refused: frames of the window the node's own decoder refuses (clips.message_to_array, colour only);
- out of order: frames whose header stamp is not after the previous frame's (the node drops a duplicate or
  an out-of-order frame; a stamp that jumps back starts a new timeline);
- missing: frames the recording lacks in the window at the camera's rate (a gap longer than
  GAP_FACTOR periods: one frame per period not recorded);
- stamp offset: the header stamp minus the log time furthest from 0 among the window's frames; said when
  beyond STAMP_OFFSET_LIMIT_S (a camera clock that jumped, or another clock);
- stale clip (rule `clip_lag`): the clip's end, mapped to the log time of the recorded frame of that stamp,
  lies more than one frame period (the camera's median log interval, or 1 / sample_fps if longer) plus
  CLIP_LAG_TOLERANCE_S before the trigger.

Only frames inside some request's window are decoded."""

from __future__ import annotations

import bisect
import itertools
import statistics
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from cosmos_reasoner_ros.bag.files.header_stamps import header_stamp_ns
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.records import CameraProvenance, ResultRecord
from cosmos_reasoner_ros.bag.replay.expected_clips import ClipSettings

__all__ = [
    "CLIP_LAG_TOLERANCE_S",
    "GAP_FACTOR",
    "STAMP_OFFSET_LIMIT_S",
    "AnswerProvenance",
    "answer_provenance",
]

STAMP_OFFSET_LIMIT_S = 1.0  # [s] a window's header stamps further than this from their log time are said
CLIP_LAG_TOLERANCE_S = 0.25  # [s] beyond one frame period: a clip ending earlier before its trigger is stale
GAP_FACTOR = 1.5  # a log interval longer than this many periods holds frames not recorded
_SHOWN = 8  # bag times listed in a note


@dataclass(frozen=True)
class AnswerProvenance:
    """One request's provenance: per camera, and its clip's lag behind the trigger."""

    cameras: tuple[CameraProvenance, ...] = ()
    clip_lag_s: float = 0.0  # [s] trigger minus the clip's end (its frame's log time); 0: no clip
    clip_stale: bool = False
    lag_limit_s: float = 0.0  # [s] the stale rule's limit for this request
    notes: tuple[str, ...] = ()

    @property
    def refused(self) -> int:
        return sum(len(c.refused_s) for c in self.cameras)


@dataclass
class _Camera:
    """One camera's recording: log times, header stamps, and which frames the node's decoder refuses."""

    topic: str
    log: list[int]
    stamps: list[int]
    refused: list[bool]
    period_ns: int
    by_stamp: dict[int, list[int]]  # header stamp -> log times of the frames with it, in order

    def window(self, start_ns: int, end_ns: int) -> range:
        return range(bisect.bisect_left(self.log, start_ns), bisect.bisect_right(self.log, end_ns))

    def log_of(self, stamp_ns: int, upto_ns: int) -> int:
        """The log time of the last frame up to `upto_ns` with this header stamp (a stamp that jumped back
        may repeat an earlier one); 0 when none has it."""
        logs = self.by_stamp.get(stamp_ns, ())
        return next((t for t in reversed(logs) if t <= upto_ns), 0)


def answer_provenance(
    reader: BagReader,
    origin_ns: int,
    cameras: Sequence[tuple[str, str, str]],
    settings: ClipSettings | None,
    records: Sequence[ResultRecord],
) -> list[AnswerProvenance]:
    """Per record, its provenance. cameras: (topic, kind, the node's name) per replayed camera; a video topic
    is left out. None known (empty) without the node's clip parameters."""
    if settings is None:
        return [AnswerProvenance() for _ in records]
    window_ns = round(settings.clip_seconds * 1e9)
    triggers = [origin_ns + round(r.trigger_s * 1e9) for r in records]
    spans = [(t - window_ns, t) for t in triggers]
    loaded = {name: _load(reader, topic, spans) for topic, kind, name in cameras if kind != "video"}
    sample_ns = round(1e9 / settings.sample_fps)
    out = []
    for record, (start, end) in zip(records, spans, strict=True):
        names = [n for n in record.cameras if n in loaded] or list(loaded)
        per = tuple(_camera(loaded[n], start, end, origin_ns) for n in names)
        notes = [note for c in per for note in _notes(c)]
        lag = _lag(record, [loaded[n] for n in names], end, sample_ns)
        out.append(AnswerProvenance(per, lag[0], lag[1], lag[2], tuple(notes + lag[3])))
    return out


def _load(reader: BagReader, topic: str, spans: Sequence[tuple[int, int]]) -> _Camera:
    from cosmos_reasoner_ros.clips import message_to_array
    from cosmos_reasoner_ros.errors import FrameError

    store, _ = reader.typestore([topic])
    msgtype = reader.topics[topic].msgtype
    ordered = sorted(spans)
    log, stamps, refused = [], [], []
    for m in reader.messages([topic]):
        stamp = header_stamp_ns(m.data)
        if stamp is None:
            continue
        log.append(m.log_ns)
        stamps.append(stamp)
        # Every window is as long: the one that starts last before this frame ends last.
        k = bisect.bisect_right(ordered, (m.log_ns, 1 << 62))
        inside = k > 0 and ordered[k - 1][1] >= m.log_ns
        bad = False
        if inside:  # only frames some answer's window holds are decoded
            try:
                message_to_array(store.deserialize_cdr(m.data, msgtype), colour_only=True)
            except (FrameError, ValueError, TypeError, KeyError, IndexError, AssertionError, struct.error):
                bad = True  # what the node cannot turn into a frame it refuses
        refused.append(bad)
    steps = [b - a for a, b in itertools.pairwise(log) if b > a]
    period = round(statistics.median(steps)) if steps else 0
    by_stamp: dict[int, list[int]] = {}
    for t, stamp in zip(log, stamps, strict=True):
        by_stamp.setdefault(stamp, []).append(t)
    return _Camera(topic, log, stamps, refused, period, by_stamp)


def _camera(cam: _Camera, start: int, end: int, origin_ns: int) -> CameraProvenance:
    def s(ns: int) -> float:
        return round((ns - origin_ns) / 1e9, 3)

    idx = cam.window(start, end)
    refused = tuple(s(cam.log[i]) for i in idx if cam.refused[i])
    back = tuple(s(cam.log[i]) for i in idx if i > 0 and cam.stamps[i] <= cam.stamps[i - 1])
    offsets = [cam.stamps[i] - cam.log[i] for i in idx if cam.stamps[i]]
    offset = max(offsets, key=abs, default=0)
    return CameraProvenance(
        topic=cam.topic,
        window_start_s=s(start),
        window_end_s=s(end),
        frames=len(idx),
        refused_s=refused,
        out_of_order_s=back,
        missing=_missing(cam, start, end),
        stamp_offset_s=round(offset / 1e9, 3),
    )


def _missing(cam: _Camera, start: int, end: int) -> int:
    """Frames not recorded inside [start, end]: one per period in each gap longer than GAP_FACTOR periods,
    at the times the camera would have sent them."""
    p = cam.period_ns
    if p <= 0:
        return 0
    lo = max(0, bisect.bisect_left(cam.log, start) - 1)
    hi = bisect.bisect_right(cam.log, end)
    n = 0
    for a, b in itertools.pairwise(cam.log[lo : hi + 1]):
        if b - a > GAP_FACTOR * p:
            t = a + p
            while t < b - p // 2:
                n += start <= t <= end
                t += p
    return n


def _notes(c: CameraProvenance) -> list[str]:
    window = f"this clip's window ({c.window_start_s:.2f}-{c.window_end_s:.2f} s)"
    notes = []
    if c.refused_s:
        notes.append(
            f"{len(c.refused_s)} frame(s) of {c.topic} refused in {window}: at {_times(c.refused_s)}"
        )
    if c.out_of_order_s:
        notes.append(
            f"{len(c.out_of_order_s)} frame(s) of {c.topic} out of order in {window} (header stamp not after "
            f"the previous frame's): at {_times(c.out_of_order_s)}"
        )
    if c.missing:
        notes.append(f"{c.missing} frame(s) of {c.topic} not recorded in {window} (a gap)")
    if abs(c.stamp_offset_s) > STAMP_OFFSET_LIMIT_S:
        way = "behind" if c.stamp_offset_s < 0 else "ahead of"
        notes.append(
            f"header stamps of {c.topic} in {window} sit up to {abs(c.stamp_offset_s):.2f} s {way} their log "
            f"time (more than {STAMP_OFFSET_LIMIT_S:g} s)"
        )
    return notes


def _times(times: Sequence[float]) -> str:
    shown = ", ".join(f"{t:.2f}" for t in times[:_SHOWN])
    return shown + (f" and {len(times) - _SHOWN} more" if len(times) > _SHOWN else "") + " s"


def _span(a: int, b: int, origin: int) -> str:
    return f"{(a - origin) / 1e9:.2f}-{(b - origin) / 1e9:.2f} s"


def _lag(
    record: ResultRecord, cams: Sequence[_Camera], trigger_ns: int, sample_ns: int
) -> tuple[float, bool, float, list[str]]:
    """The clip's lag behind its trigger on the bag's clock, the stale rule's verdict and limit, and notes."""
    if record.clip_end_ns <= 0 or not cams:
        return 0.0, False, 0.0, []
    origin = trigger_ns - round(record.trigger_s * 1e9)
    end_log = next((x for c in cams if (x := c.log_of(record.clip_end_ns, trigger_ns))), 0)
    start_log = next((x for c in cams if (x := c.log_of(record.clip_start_ns, trigger_ns))), 0)
    notes: list[str] = []
    if end_log and start_log and abs(end_log - record.clip_end_ns) > STAMP_OFFSET_LIMIT_S * 1e9:
        stamped = _span(record.clip_start_ns, record.clip_end_ns, origin)
        notes.append(
            f"the clip's stamps {stamped} are frames recorded at bag time {_span(start_log, end_log, origin)}"
        )
    lag_ns = trigger_ns - (end_log or record.clip_end_ns)
    period = max([c.period_ns for c in cams] + [sample_ns])
    limit = period / 1e9 + CLIP_LAG_TOLERANCE_S
    stale = lag_ns / 1e9 > limit
    if stale:
        notes.append(
            f"the clip ends {lag_ns / 1e9:.2f} s before its trigger (more than one frame period "
            f"{period / 1e9:.2f} s + {CLIP_LAG_TOLERANCE_S:g} s): the answer saw older frames"
        )
    return round(lag_ns / 1e9, 3), stale, round(limit, 3), notes
