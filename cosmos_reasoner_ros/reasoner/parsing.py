"""Reasoner answers to values: the reasoning split at the last </think>, the finish reason judged, whole JSON
required (completeness.py), then the answer read by its kind's own parser (kinds/: points and boxes in the
0-1000 space to pixels, time segments, multiple-choice letters, text as it is) into the kind's slot of the
ParsedAnswer. Every failure is a ParseError (TruncatedAnswer when cut off).

The reasoning comes inline (`<think>...</think>` in the text) or split off by the server's reasoning parser
(`reasoning=`, from message.reasoning / reasoning_content); when the server left the content empty, its
reasoning is read as the text it came from.

Decisions common to the structured kinds: items without any key of the answer's kind are ignored (models add
notes), items with the key but a malformed value are rejected; each kind's module says its own.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
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
from cosmos_reasoner_ros.geometry import Box2D, Point2D, Trajectory
from cosmos_reasoner_ros.reasoner.completeness import open_tags, whole_values
from cosmos_reasoner_ros.reasoner.json_scan import json_values
from cosmos_reasoner_ros.reasoner.kinds import ANSWER_KINDS, TEXT, AnswerKind, AnswerText, Segment, kind_of
from cosmos_reasoner_ros.reasoner.kinds.choice import parse_choice
from cosmos_reasoner_ros.reasoner.kinds.segments import parse_time

__all__ = [
    "ANSWER_KINDS",
    "ParsedAnswer",
    "Segment",
    "json_values",
    "parse_answer",
    "parse_choice",
    "parse_time",
    "split_reasoning",
]


@dataclass(frozen=True)
class ParsedAnswer:
    raw: str
    reasoning: str | None
    answer: str
    trajectories: tuple[Trajectory, ...] = ()
    boxes: tuple[Box2D, ...] = ()
    segments: tuple[Segment, ...] = ()
    choice: str | None = None
    answer_kind: str = TEXT.name

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
    kind = kind_of(answer_kind, text)
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
            return _parse_kind(reasoning, found_reasoning, answer, kind, size, schema)
        except ParseError as err:
            if isinstance(err, IncompleteAnswer | SchemaViolation):
                raise type(err)(f"the content is empty; in the reasoning: {err}", raw=reasoning) from None
            raise ParseError(
                f"the content is empty and the reasoning holds no answer: {err}", raw=reasoning
            ) from None
    if kind.structured:
        open_tags(text)
    if not answer:
        raise ParseError("the answer is empty" + (" (only reasoning)" if found_reasoning else ""), raw=text)
    return _parse_kind(text, found_reasoning, answer, kind, size, schema)


def _parse_kind(
    raw: str,
    reasoning: str | None,
    answer: str,
    kind: AnswerKind,
    size: tuple[int, int] | None,
    schema: Mapping[str, Any] | None = None,
) -> ParsedAnswer:
    """The answer text read by its kind's parser into the kind's slot, from whole JSON only
    (completeness.whole_values) for a structured kind."""
    values = whole_values(answer, schema, raw) if kind.structured else []
    parsed = kind.parse(AnswerText(answer, values, size, raw, schema))
    result = ParsedAnswer(raw=raw, reasoning=reasoning, answer=answer, answer_kind=kind.name)
    return replace(result, **{kind.slot: parsed})


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
