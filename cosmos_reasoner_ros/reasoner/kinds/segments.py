"""The segments kind: time segments of the clip with captions (`[{"start": 1.0, "end": 2.5, "caption": ...}]`,
times in seconds, numeric strings or "mm:ss.ff"; also one object, `timestamp` ranges, bare [start, end] pairs,
or plain lines "00:01.50 - 00:03.00: caption"). Graded and compared by temporal IoU, segments paired greedily.
Frames go to the model with their times (it answers in times of the clip).

Decision: a segment ending before it starts is rejected."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.reasoner.kinds import base
from cosmos_reasoner_ros.reasoner.kinds import json_items as ji

__all__ = ["KIND", "Segment", "SegmentsKind", "parse_time", "segment_iou"]

_START_KEYS = ("start", "start_time", "start_s", "begin", "from", "start_timestamp")
_END_KEYS = ("end", "end_time", "end_s", "stop", "to", "end_timestamp")
_TIME_KEYS = ("timestamp", "time", "timestamps", "time_range", "span", "t")
_CAPTION_KEYS = tuple(
    k for k in ("caption", "description", "event", "label", "action", "text") if k not in _TIME_KEYS
)
_CLOCK = re.compile(r"^(?:(\d+):)?(\d+):(\d+(?:[.,]\d+)?)$")
_UNIT = r"(?:seconds|second|secs|sec|s)"
_SECONDS = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*" + _UNIT + r"?$", re.I)
_RANGE = re.compile(r"^\s*(\S+(?:\s*" + _UNIT + r")?)\s*(?:-|–|—|to|until)\s*(\S+(?:\s*" + _UNIT + r")?)\s*$")
_TIME_PATTERN = r"(\d+(?::\d{1,2}){1,2}(?:[.,]\d+)?|\d+(?:\.\d+)?\s*(?:seconds|secs|sec|s)?)"
# "<start> - <end>: caption", "<start> to <end>", or Cosmos-Reason1's plain "<start time> <end time>".
_TEXT_SEGMENT = re.compile(
    r"^\W*" + _TIME_PATTERN + r"(?:\s*(?:-|–|—|to|,)\s*|\s+)" + _TIME_PATTERN + r"(?![\d.])\W*(.*)$", re.I
)


@dataclass(frozen=True)
class Segment:
    start_s: float
    end_s: float
    caption: str = ""


# ---- parsing ---


def parse_time(value: Any) -> float:
    """Seconds from a number, a numeric string ("12.5", "12.5s"), "mm:ss.ff" or "hh:mm:ss.ff"."""
    number = ji.number(value)
    if number is None and isinstance(value, str):
        text = value.strip()
        clock = _CLOCK.match(text)
        if clock:
            hours, minutes, seconds = clock.group(1), clock.group(2), clock.group(3).replace(",", ".")
            sec = float(seconds)
            mins = int(minutes)
            if sec >= 60 or (hours is not None and mins >= 60):
                raise ParseError(f"not a clock time: {value!r}")
            number = (int(hours) * 3600 if hours else 0) + mins * 60 + sec
        else:
            match = _SECONDS.match(text)
            number = float(match.group(1)) if match else None
    if number is None or not math.isfinite(number):
        raise ParseError(f"not a time: {value!r}"[:200])
    if number < 0:
        raise ParseError(f"negative time: {value!r}")
    return number


def _time(value: Any, raw: str) -> float:
    try:
        return parse_time(value)
    except ParseError as err:
        raise ParseError(str(err), raw=raw) from None


def _span(item: dict[str, Any], raw: str) -> tuple[float, float] | None:
    start, end = ji.first(item, _START_KEYS), ji.first(item, _END_KEYS)
    if start is not None or end is not None:
        if start is None or end is None:
            raise ParseError(f"an event needs both start and end: {item!r}"[:300], raw=raw)
        return _time(start, raw), _time(end, raw)
    stamp = ji.first(item, _TIME_KEYS)
    if stamp is None:
        return None
    if isinstance(stamp, list):
        if len(stamp) == 2:
            return _time(stamp[0], raw), _time(stamp[1], raw)
        if len(stamp) == 1:
            t = _time(stamp[0], raw)
            return t, t
        raise ParseError(f"a time range has two ends: {stamp!r}"[:300], raw=raw)
    if isinstance(stamp, str):
        span = _RANGE.match(stamp)
        if span:
            try:
                return parse_time(span.group(1)), parse_time(span.group(2))
            except ParseError:
                pass
    t = _time(stamp, raw)
    return t, t


def _segment(span: tuple[float, float], caption: str, raw: str) -> Segment:
    start, end = span
    if end < start:
        raise ParseError(f"an event ends ({end:g} s) before it starts ({start:g} s)", raw=raw)
    return Segment(start, end, caption)


def _text_segments(answer: str, raw: str) -> Iterator[Segment]:
    """Plain lines "00:01.50 - 00:03.00: the gripper opens" when the model wrote no JSON."""
    for line in answer.splitlines():
        match = _TEXT_SEGMENT.match(line.strip())
        if match:
            yield _segment(
                (_time(match.group(1), raw), _time(match.group(2), raw)), match.group(3).strip(), raw
            )


# ---- grading against a label, comparing with a baseline ---


def segment_iou(a: Segment, b: Segment) -> float:
    """Temporal IoU of two time segments; two instants at the same time count as 1."""
    inter = max(0.0, min(a.end_s, b.end_s) - max(a.start_s, b.start_s))
    union = max(a.end_s, b.end_s) - min(a.start_s, b.start_s)
    if union <= 0:
        return 1.0 if a.start_s == b.start_s else 0.0
    return inter / union


class SegmentsKind(base.AnswerKind):
    """time segments of the clip with captions (seconds from the clip's start)"""

    name = "segments"
    slot = "segments"
    timed = True

    def parse(self, text: base.AnswerText) -> tuple[Segment, ...]:
        raw = text.raw
        keyed, bare = ji.items(text.values, (*_START_KEYS, *_TIME_KEYS))
        segments: list[Segment] = []
        for item in keyed:
            span = _span(item, raw)
            if span is not None:
                segments.append(_segment(span, ji.label(item, _CAPTION_KEYS), raw))
        if not segments and bare:
            segments.extend(
                _segment((_time(v[0], raw), _time(v[1], raw)), "", raw) for v in bare if len(v) == 2
            )
        if not segments:
            segments.extend(_text_segments(text.answer, raw))
        if not segments:
            raise ParseError("no time segments (start, end) in the answer", raw=raw)
        return tuple(segments)

    # ---- grading against a label, comparing with a baseline ---

    rank = ("tiou", 1)
    metrics = (
        base.MetricSpec(
            "mean_tiou", "tiou", "mean", "higher", "", "temporal IoU (segments paired greedily, unpaired 0)"
        ),
        base.MetricSpec(
            "tiou50", "tiou50", "share", "higher", "", "share of requests with tIoU >= the label's tiou_min"
        ),
    )

    def grade(
        self, ours: Sequence[Segment], theirs: Sequence[Segment], context: base.GradeContext
    ) -> tuple[base.Values, list[str]]:
        tiou = base.greedy_mean(len(ours), len(theirs), lambda i, j: segment_iou(ours[i], theirs[j]))
        return {"tiou": tiou, "tiou50": float(tiou >= context.limits.tiou_min - 1e-12)}, []

    compare_checks = (base.CompareCheck("segment_iou", "segment_iou_min", "segment_iou_min", ">="),)

    def compare(
        self, baseline: Sequence[Segment], current: Sequence[Segment]
    ) -> tuple[base.Values, list[str]]:
        low, mean = base.greedy_min_mean(
            len(baseline), len(current), lambda i, j: segment_iou(baseline[i], current[j])
        )
        return {"segment_iou_min": low, "segment_iou_mean": mean}, []

    # ---- forms: the CLI's, a drafted label's, results.jsonl's ---

    def to_json(self, values: Sequence[Segment]) -> list[dict[str, Any]]:
        return [{"start_s": s.start_s, "end_s": s.end_s, "caption": s.caption} for s in values]

    label_form = '[{"start": 1.0, "end": 2.5, "caption": "the gripper opens"}] (seconds)'

    def draft(self, values: Sequence[Segment]) -> str:
        return json.dumps(
            [
                {"start": ji.compact(s.start_s), "end": ji.compact(s.end_s), "caption": s.caption}
                for s in values
            ]
        )

    def dump(self, values: Sequence[Segment]) -> list[dict[str, Any]]:
        return [{"caption": s.caption, "start_s": s.start_s, "end_s": s.end_s} for s in values]

    def load(self, data: Sequence[Mapping[str, Any]]) -> tuple[Segment, ...]:
        return tuple(Segment(float(s["start_s"]), float(s["end_s"]), str(s.get("caption", ""))) for s in data)


KIND = SegmentsKind()
