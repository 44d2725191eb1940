"""Whole answers only: the JSON of a structured answer is complete, whatever the server said of its end.

A cut answer (max_tokens, a dropped connection, a server that stopped early but said `stop`) leaves a JSON
value open. Reading the complete items out of it would publish part of an answer as a success and hand part of
a path to Nav2, so the JSON region of an answer is checked before it is read:

- the region is the body of the last ``` fence that holds a bracket (text around the fence is kept in the
  answer, not read), else the whole answer;
- lenient (no schema was sent): every bracket opened in the region closes, strings included; the values are
  the region's top-level JSON values, in order (prose with balanced brackets between them is skipped);
- strict (the request carried the task's schema as structured output): the region is exactly one JSON value,
  nothing before or after it, and the schema accepts it (schema_validation, the grammar check's oracle).

Nothing is salvaged: an answer that fails is an IncompleteAnswer (or a SchemaViolation), raw text kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from cosmos_reasoner_ros.errors import IncompleteAnswer, SchemaViolation
from cosmos_reasoner_ros.reasoner.json_scan import decode_value, next_open
from cosmos_reasoner_ros.schemas.schema_validation import schema_errors, unsupported_keywords

__all__ = ["json_region", "open_tags", "whole_values"]

_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.S)
_OPEN = {"[": "]", "{": "}"}
_SHOWN = 80  # characters of the answer quoted in a reason
_MAX_RELAXED = 16  # relaxed decodes (an ast.literal_eval each) per answer: bounded work on hostile text


def json_region(answer: str) -> str:
    """The part of an answer its JSON is read from: the last ``` fence holding a bracket, else the answer."""
    if "```" in answer:
        for body in reversed(_FENCE.findall(answer)):
            if "[" in body or "{" in body:
                return str(body)
    return answer


def open_tags(text: str) -> None:
    """IncompleteAnswer when the text opens a <think> block that never closes (and no <answer> block follows
    it), or its last <answer> block never closes: the answer stopped inside it."""
    think = text.rfind("<think>")
    if think >= 0 and text.find("</think>", think) < 0 and text.find("<answer>", think) < 0:
        raise IncompleteAnswer(
            "the answer's <think> block is never closed: it stopped while reasoning, before any answer",
            raw=text,
        )
    answer = text.rfind("<answer>")
    if answer >= 0 and text.find("</answer>", answer) < 0:
        raise IncompleteAnswer("the answer's <answer> block is never closed: it stopped inside it", raw=text)


def whole_values(answer: str, schema: Mapping[str, Any] | None = None, raw: str = "") -> list[Any]:
    """The JSON values of a whole answer (module doc); IncompleteAnswer / SchemaViolation otherwise.
    `raw`: the full text the answer came from, kept in the error."""
    raw = raw or answer
    region = json_region(answer)
    if schema is None:
        return _lenient(region, raw)
    value = _one_value(region, raw)
    if not unsupported_keywords(schema):
        problems = schema_errors(value, schema)
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise SchemaViolation(
                "the answer is one whole JSON value, but the task's schema (sent as structured output) "
                f"refuses it: {'; '.join(problems[:3])}{more}"[:400],
                raw=raw,
            )
    return [value]


def _lenient(region: str, raw: str) -> list[Any]:
    values: list[Any] = []
    i, relaxed_left = 0, _MAX_RELAXED
    while True:
        j = next_open(region, i)
        if j < 0:
            return values
        end = _close_of(region, j)
        if end < 0:
            raise IncompleteAnswer(_unclosed(region, j), raw=raw)
        value, decoded_end = decode_value(region, j, relaxed=relaxed_left > 0)
        if decoded_end > j:
            values.append(value)
        else:  # balanced but not JSON (prose in brackets): skipped, as json_values skips it
            relaxed_left -= 1
        i = end + 1


def _one_value(region: str, raw: str) -> Any:
    text = region.strip()
    if not text:
        raise IncompleteAnswer("the answer holds no JSON value where its schema wants one", raw=raw)
    start = region.index(text[0])
    if text[0] in _OPEN:
        end = _close_of(region, start)
        if end < 0:
            raise IncompleteAnswer(_unclosed(region, start), raw=raw)
        value, decoded_end = decode_value(region, start)
        if decoded_end <= start:
            raise IncompleteAnswer(f"the answer is not JSON: {_quote(region[start : end + 1])}", raw=raw)
        after = region[decoded_end:].strip()
    else:  # a schema whose root is a scalar: the whole region is the value
        try:
            value, decoded_end = json.JSONDecoder().raw_decode(region, start)
        except ValueError:
            raise IncompleteAnswer(f"the answer is not one JSON value: {_quote(text)}", raw=raw) from None
        after = region[decoded_end:].strip()
    if after:
        what = "another JSON value" if after[0] in _OPEN else "text"
        raise IncompleteAnswer(
            f"{what} after the answer's JSON value, where its schema wants one value and nothing else: "
            f"{_quote(after)}",
            raw=raw,
        )
    return value


def _close_of(text: str, start: int) -> int:
    """Index of the bracket closing text[start] (JSON strings skipped, escapes honoured); -1 when the value is
    left open: the text ends first (a bracket or a string never closed), or a bracket closes the wrong one."""
    stack: list[str] = []
    in_string = False
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _OPEN:
            stack.append(_OPEN[ch])
        elif ch in "]}":
            if stack.pop() != ch:
                return -1
            if not stack:
                return i
        i += 1
    return -1


def _unclosed(region: str, start: int) -> str:
    return (
        f"the JSON value opened at character {start} of the answer is never closed (cut off, or malformed): "
        f"{_quote(region[start:])}; nothing of it is used"
    )


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "...")
