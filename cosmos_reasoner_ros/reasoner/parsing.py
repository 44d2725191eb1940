"""Reasoner answers to values: reasoning split at the last </think>, JSON points/boxes in the 0-1000 space to
pixels, time segments, multiple-choice letters. Every failure is a ParseError (TruncatedAnswer when cut off).

The reasoning comes inline (`<think>...</think>` in the text) or split off by the server's reasoning parser
(`reasoning=`, from message.reasoning / reasoning_content); when the server left the content empty, its
reasoning is read as the text it came from.

Decisions: coordinates outside 0-1000 are clamped into it (then to the image); a box with swapped corners
is reordered (min/max per axis), a box with no area after clamping is rejected; a segment ending before it
starts is rejected; items without any key of the answer's kind are ignored (models add notes), items with the
key but a malformed value are rejected.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from cosmos_reasoner_ros.errors import (
    IncompleteAnswer,
    ParseError,
    SchemaViolation,
    ServerError,
    ServerUnavailable,
    TruncatedAnswer,
)
from cosmos_reasoner_ros.geometry import NORM_MAX, Box2D, Point2D, Trajectory, norm_to_pixel
from cosmos_reasoner_ros.reasoner.completeness import open_tags, whole_values
from cosmos_reasoner_ros.reasoner.json_scan import json_values

ANSWER_KINDS = ("text", "points", "boxes", "segments", "choice")

_POINT_KEYS = ("point_2d", "point", "points", "point2d", "coordinates", "coords", "position", "xy")
_BOX_KEYS = ("bbox_2d", "bbox", "box", "box_2d", "bounding_box", "bbox2d")
_LABEL_KEYS = ("label", "name", "object", "class", "description")
_START_KEYS = ("start", "start_time", "start_s", "begin", "from", "start_timestamp")
_END_KEYS = ("end", "end_time", "end_s", "stop", "to", "end_timestamp")
_TIME_KEYS = ("timestamp", "time", "timestamps", "time_range", "span", "t")
_CAPTION_KEYS = ("caption", "description", "event", "label", "action", "text")
_CHOICE_KEYS = ("answer", "choice", "option", "letter")

_CLOCK = re.compile(r"^(?:(\d+):)?(\d+):(\d+(?:[.,]\d+)?)$")
_UNIT = r"(?:seconds|second|secs|sec|s)"
_SECONDS = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*" + _UNIT + r"?$", re.I)
_RANGE = re.compile(r"^\s*(\S+(?:\s*" + _UNIT + r")?)\s*(?:-|–|—|to|until)\s*(\S+(?:\s*" + _UNIT + r")?)\s*$")
_LETTER = r"([A-E])"
_LONE_LETTER = re.compile(r"(?<![A-Za-z0-9])([A-E])(?![A-Za-z0-9])")
_ARTICLE = re.compile(r"A\s+[a-z]")
_CHOICE_PATTERNS = (
    # the whole answer is the letter: "B", "(B)", "B.", "[B]", "**B**"
    re.compile(r"^[\s*_`\"']*[(\[]?" + _LETTER + r"[)\].:]?[\s*_`\"']*$"),
    # an explicit marker: "Answer: B. because", "The answer is (C)", "Option D"
    re.compile(r"\b(?i:answer|option|choice)(?:\s+(?i:is))?\s*[:\-=]?\s*[*_`\"']*[(\[]?" + _LETTER + r"\b"),
    # a leading letter with punctuation: "B) the cup falls", "C. it rolls", "(A) yes"
    re.compile(r"^[\s*_`\"']*(?:\(" + _LETTER + r"\)|\[" + _LETTER + r"\]|" + _LETTER + r"[).:,\]])"),
)


@dataclass(frozen=True)
class Segment:
    start_s: float
    end_s: float
    caption: str = ""


@dataclass(frozen=True)
class ParsedAnswer:
    raw: str
    reasoning: str | None
    answer: str
    trajectories: tuple[Trajectory, ...] = ()
    boxes: tuple[Box2D, ...] = ()
    segments: tuple[Segment, ...] = ()
    choice: str | None = None
    answer_kind: str = "text"

    @property
    def points(self) -> tuple[Point2D, ...]:
        return tuple(p for t in self.trajectories for p in t.points)


def split_reasoning(text: str, reasoning: str | None = None) -> tuple[str | None, str]:
    """(reasoning, answer): the reasoning ends at the LAST </think> (an opening <think> is optional), and the
    answer is the text after it, or the content of its last <answer> block when there is one."""
    given = reasoning.strip() if isinstance(reasoning, str) and reasoning.strip() else None
    end = text.rfind("</think>")
    if end >= 0:
        before, after = text[:end], text[end + len("</think>") :]
        start = before.find("<think>")
        inline: str | None = (before[start + len("<think>") :] if start >= 0 else before).strip()
    else:
        before, after = "", text
        start = text.find("<think>")
        inline = None
        if start >= 0 and text[:start].strip() == "":
            # <think> never closed: reasoning up to an <answer> block when there is one, else no split at all
            body = text[start + len("<think>") :]
            tag = body.rfind("<answer>")
            if tag >= 0:
                inline, after = body[:tag].strip(), body[tag:]
            else:
                after = body
    answer = _answer_block(after)
    found = given or inline or None
    if given and inline:
        found = f"{given}\n{inline}"
    return found, answer.strip()


def _answer_block(text: str) -> str:
    start = text.rfind("<answer>")
    if start < 0:
        return text.replace("</answer>", "")
    body = text[start + len("<answer>") :]
    end = body.find("</answer>")
    return body if end < 0 else body[:end]


def parse_answer(
    text: str,
    answer_kind: str,
    width: int | None = None,
    height: int | None = None,
    finish_reason: str | None = None,
    reasoning: str | None = None,
    schema: Mapping[str, Any] | None = None,
) -> ParsedAnswer:
    """Parse a Reasoner answer of one kind; raises ParseError (TruncatedAnswer for finish_reason length or
    repetition), ServerUnavailable for abort (vLLM ends the answers in flight so when it stops or loses an
    engine core: seen with data parallelism, one engine killed), ServerError for error.

    Whole answers only, whatever the finish reason (completeness.py): the JSON of a points, boxes or segments
    answer (and of a choice written as JSON) must be complete, and its <think> / <answer> blocks closed, else
    IncompleteAnswer. `schema`: the JSON schema the request carried as structured output; then the answer must
    be exactly one JSON value that the schema accepts (SchemaViolation otherwise)."""
    if not isinstance(text, str):
        raise ParseError(f"the answer must be text, got {type(text).__name__}")
    if answer_kind not in ANSWER_KINDS:
        raise ParseError(f"unknown answer kind {answer_kind!r}; one of {', '.join(ANSWER_KINDS)}", raw=text)
    size = _image_size(width, height, text)
    partial = text if text.strip() or not isinstance(reasoning, str) else reasoning
    if finish_reason == "length":
        raise TruncatedAnswer("the answer was cut off by max_tokens (finish_reason length)", raw=partial)
    if finish_reason == "repetition":
        raise TruncatedAnswer(
            "the server cut the answer off as repetitive (finish_reason repetition)", raw=partial
        )
    if finish_reason == "abort":
        raise ServerUnavailable(
            f"the server ended the answer after {len(partial)} characters (finish_reason abort): it was "
            "stopping, or lost the engine serving it"
        )
    if finish_reason == "error":
        raise ServerError("the server failed the request while answering (finish_reason error)")
    found_reasoning, answer = split_reasoning(text, reasoning)
    if not answer and not text.strip() and isinstance(reasoning, str) and reasoning.strip():
        # A server-side reasoning parser (vLLM --reasoning-parser qwen3) puts everything before a </think>
        # that never came into `reasoning` and leaves the content empty: structured output, answers of
        # tasks without reasoning. Read it as the inline text it was, an unclosed <think>: the answer unless
        # an <answer> block follows the thinking.
        found_reasoning, answer = split_reasoning("<think>\n" + reasoning)
        try:
            return _parse_kind(reasoning, found_reasoning, answer, answer_kind, size, schema)
        except ParseError as err:
            if isinstance(err, IncompleteAnswer | SchemaViolation):
                raise type(err)(f"the content is empty; in the reasoning: {err}", raw=reasoning) from None
            raise ParseError(
                f"the content is empty and the reasoning holds no answer: {err}", raw=reasoning
            ) from None
    if answer_kind != "text":
        open_tags(text)
    if not answer:
        raise ParseError("the answer is empty" + (" (only reasoning)" if found_reasoning else ""), raw=text)
    return _parse_kind(text, found_reasoning, answer, answer_kind, size, schema)


def _parse_kind(
    raw: str,
    reasoning: str | None,
    answer: str,
    answer_kind: str,
    size: tuple[int, int] | None,
    schema: Mapping[str, Any] | None = None,
) -> ParsedAnswer:
    """The answer text read as its kind (points, boxes, segments, a choice, or text as it is), from whole
    JSON only (completeness.whole_values)."""
    result = ParsedAnswer(raw=raw, reasoning=reasoning, answer=answer, answer_kind=answer_kind)
    if answer_kind == "text":
        return result
    values = whole_values(answer, schema, raw)
    if answer_kind == "choice":
        text = json.dumps(values[0]) if schema is not None else answer
        return replace(result, choice=parse_choice(text, raw=raw))
    if answer_kind == "points":
        return replace(result, trajectories=_trajectories(values, size, raw))
    if answer_kind == "boxes":
        return replace(result, boxes=_boxes(values, size, raw))
    return replace(result, segments=_segments(values, answer, raw))


def _image_size(width: int | None, height: int | None, raw: str) -> tuple[int, int] | None:
    if width is None and height is None:
        return None
    if width is None or height is None:
        raise ParseError("width and height go together: give both or neither", raw=raw)
    try:  # any integer type (numpy's too), not bool, not float
        if isinstance(width, bool) or isinstance(height, bool):
            raise TypeError("bool")
        size = operator.index(width), operator.index(height)
    except TypeError:
        size = (0, 0)
    if min(size) < 1:
        raise ParseError(f"image size must be positive integers, got {width!r} x {height!r}", raw=raw)
    return size


def _items(values: list[Any], keys: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Dicts carrying one of `keys` (searched through lists and wrapper dicts), and bare arrays, in order."""
    keyed: list[dict[str, Any]] = []
    bare: list[Any] = []

    def walk(value: Any, depth: int) -> None:
        if depth > 8:
            return
        if isinstance(value, dict):
            lowered = {str(k).lower(): v for k, v in value.items()}
            if any(k in lowered for k in keys) or ("x" in lowered and "y" in lowered and "point_2d" in keys):
                keyed.append(lowered)
                return
            for inner in lowered.values():
                if isinstance(inner, list | dict):
                    walk(inner, depth + 1)
        elif isinstance(value, list):
            if value and all(_is_number(v) for v in value):
                bare.append(value)
                return
            for inner in value:
                walk(inner, depth + 1)

    for value in values:
        walk(value, 0)
    return keyed, bare


def _first(item: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in item:
            return item[key]
    return None


def _label(item: dict[str, Any], keys: tuple[str, ...] = _LABEL_KEYS) -> str:
    value = _first(item, keys)
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, list | dict)


def _is_number(value: Any) -> bool:
    return _number(value) is not None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            return None
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _norm(value: Any, what: str, raw: str) -> float:
    number = _number(value)
    if number is None:
        raise ParseError(f"{what} is not a finite number: {value!r}", raw=raw)
    return min(max(number, 0.0), NORM_MAX)


def _off_image(*values: Any) -> bool:
    """Any of the answered (already validated) coordinates outside 0-1000: clamping moved it."""
    return any(not 0.0 <= (_number(v) or 0.0) <= NORM_MAX for v in values)


# ---- points ---


def _pairs(value: Any, raw: str) -> list[tuple[Any, Any]]:
    """[x, y] or [[x, y], ...] or {"x":, "y":} or [{"x":, "y":}, ...]."""
    if isinstance(value, dict):
        lowered = {str(k).lower(): v for k, v in value.items()}
        if "x" in lowered and "y" in lowered:
            return [(lowered["x"], lowered["y"])]
    if isinstance(value, list):
        if len(value) == 2 and all(_is_scalar(v) for v in value):
            return [(value[0], value[1])]
        if value and all(isinstance(v, list | dict) for v in value):
            return [pair for v in value for pair in _pairs(v, raw)]
    raise ParseError(f"not a point [x, y]: {value!r}"[:300], raw=raw)


def _trajectories(values: list[Any], size: tuple[int, int] | None, raw: str) -> tuple[Trajectory, ...]:
    keyed, bare = _items(values, _POINT_KEYS)
    labelled: list[tuple[str, tuple[Any, Any]]] = []
    if keyed:
        for item in keyed:
            value = _first(item, _POINT_KEYS)
            pairs = _pairs(value if value is not None else item, raw)
            labelled.extend((_label(item), pair) for pair in pairs)
    else:
        pairs = [tuple(v) for v in bare if len(v) == 2]
        labelled.extend(("", (p[0], p[1])) for p in pairs)
    if not labelled:
        raise ParseError("no points [x, y] in the answer", raw=raw)
    order: dict[str, list[Point2D]] = {}
    for label, (vx, vy) in labelled:
        x_norm, y_norm = _norm(vx, "x", raw), _norm(vy, "y", raw)
        x = norm_to_pixel(x_norm, size[0]) if size else None
        y = norm_to_pixel(y_norm, size[1]) if size else None
        order.setdefault(label, []).append(Point2D(label, x_norm, y_norm, x, y, _off_image(vx, vy)))
    return tuple(Trajectory(label, tuple(points)) for label, points in order.items())


# ---- boxes ---


def _quads(value: Any, item: dict[str, Any], raw: str) -> list[list[Any]]:
    if value is None:
        corners = [item.get(k) for k in ("x1", "y1", "x2", "y2")]
        if any(c is None for c in corners):
            corners = [item.get(k) for k in ("xmin", "ymin", "xmax", "ymax")]
        value = corners
    if isinstance(value, dict):
        lowered = {str(k).lower(): v for k, v in value.items()}
        return _quads(None, lowered, raw)
    if isinstance(value, list):
        if len(value) == 4 and all(_is_scalar(v) for v in value):
            return [value]
        if len(value) == 2 and all(isinstance(v, list) and len(v) == 2 for v in value):
            return [[value[0][0], value[0][1], value[1][0], value[1][1]]]  # [[x1, y1], [x2, y2]]
        if value and all(isinstance(v, list | dict) for v in value):
            return [q for v in value for q in _quads(v, item, raw)]
    raise ParseError(f"not a box [x1, y1, x2, y2]: {value!r}"[:300], raw=raw)


def _boxes(values: list[Any], size: tuple[int, int] | None, raw: str) -> tuple[Box2D, ...]:
    keyed, bare = _items(values, (*_BOX_KEYS, "x1", "xmin"))
    quads: list[tuple[str, list[Any]]] = []
    if keyed:
        for item in keyed:
            quads.extend((_label(item), q) for q in _quads(_first(item, _BOX_KEYS), item, raw))
    else:
        quads.extend(("", v) for v in bare if len(v) == 4)
    if not quads:
        raise ParseError("no boxes [x1, y1, x2, y2] in the answer", raw=raw)
    boxes: list[Box2D] = []
    for label, quad in quads:
        a, b, c, d = (_norm(v, "box corner", raw) for v in quad)
        x1, x2 = min(a, c), max(a, c)
        y1, y2 = min(b, d), max(b, d)
        if x1 == x2 or y1 == y2:
            raise ParseError(f"box {quad!r} has no area", raw=raw)
        clamped = _off_image(*quad)
        if size:
            w, h = size
            px = (norm_to_pixel(x1, w), norm_to_pixel(y1, h), norm_to_pixel(x2, w), norm_to_pixel(y2, h))
            boxes.append(Box2D(label, x1, y1, x2, y2, *px, clamped=clamped))
        else:
            boxes.append(Box2D(label, x1, y1, x2, y2, clamped=clamped))
    return tuple(boxes)


# ---- time segments ---


def parse_time(value: Any) -> float:
    """Seconds from a number, a numeric string ("12.5", "12.5s"), "mm:ss.ff" or "hh:mm:ss.ff"."""
    number = _number(value)
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
    start, end = _first(item, _START_KEYS), _first(item, _END_KEYS)
    if start is not None or end is not None:
        if start is None or end is None:
            raise ParseError(f"an event needs both start and end: {item!r}"[:300], raw=raw)
        return _time(start, raw), _time(end, raw)
    stamp = _first(item, _TIME_KEYS)
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


def _segments(values: list[Any], answer: str, raw: str) -> tuple[Segment, ...]:
    keyed, bare = _items(values, (*_START_KEYS, *_TIME_KEYS))
    segments: list[Segment] = []
    for item in keyed:
        span = _span(item, raw)
        if span is None:
            continue
        caption_keys = tuple(k for k in _CAPTION_KEYS if k not in _TIME_KEYS)
        segments.append(_segment(span, _label(item, caption_keys), raw))
    if not segments and bare:
        segments.extend(_segment((_time(v[0], raw), _time(v[1], raw)), "", raw) for v in bare if len(v) == 2)
    if not segments:
        segments.extend(_text_segments(answer, raw))
    if not segments:
        raise ParseError("no time segments (start, end) in the answer", raw=raw)
    return tuple(segments)


def _segment(span: tuple[float, float], caption: str, raw: str) -> Segment:
    start, end = span
    if end < start:
        raise ParseError(f"an event ends ({end:g} s) before it starts ({start:g} s)", raw=raw)
    return Segment(start, end, caption)


_TIME_PATTERN = r"(\d+(?::\d{1,2}){1,2}(?:[.,]\d+)?|\d+(?:\.\d+)?\s*(?:seconds|secs|sec|s)?)"
# "<start> - <end>: caption", "<start> to <end>", or Cosmos-Reason1's plain "<start time> <end time>".
_TEXT_SEGMENT = re.compile(
    r"^\W*" + _TIME_PATTERN + r"(?:\s*(?:-|–|—|to|,)\s*|\s+)" + _TIME_PATTERN + r"(?![\d.])\W*(.*)$", re.I
)


def _text_segments(answer: str, raw: str) -> Iterator[Segment]:
    """Plain lines "00:01.50 - 00:03.00: the gripper opens" when the model wrote no JSON."""
    for line in answer.splitlines():
        match = _TEXT_SEGMENT.match(line.strip())
        if match:
            yield _segment(
                (_time(match.group(1), raw), _time(match.group(2), raw)), match.group(3).strip(), raw
            )


# ---- multiple choice ---


def parse_choice(answer: str, raw: str = "") -> str:
    """The option letter (A-E) of a multiple-choice answer."""
    for value in json_values(answer) if ("{" in answer) else []:
        if isinstance(value, dict):
            lowered = {str(k).lower(): v for k, v in value.items()}
            picked = _first(lowered, _CHOICE_KEYS)
            if isinstance(picked, str):
                return parse_choice(picked, raw or answer)
    text = answer.strip()
    for pattern in _CHOICE_PATTERNS:
        match = pattern.search(text)
        if match:
            return next(g for g in match.groups() if g)
    # Last resort: one distinct standalone capital letter ("I choose B."), where "A" opening a sentence before
    # a lower-case word is the article.
    letters = {
        m.group(1)
        for m in _LONE_LETTER.finditer(text)
        if not (
            _ARTICLE.match(text, m.start()) and (text[: m.start()].rstrip()[-1:] in ("", ".", "!", "?", ":"))
        )
    }
    if len(letters) == 1:
        return letters.pop()
    raise ParseError(f"no option letter A-E in the answer: {text[:80]!r}", raw=raw or answer)
