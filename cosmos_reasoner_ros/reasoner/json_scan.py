"""JSON values in a model's free text: inside ``` fences or anywhere in the answer, strict JSON or the relaxed
forms models write (trailing commas, Python literals), with bounded work on pathological text.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

__all__ = ["decode_value", "json_values", "next_open"]

_MAX_JSON_ATTEMPTS = 400  # decode attempts per answer: bounds the work on pathological text
_MAX_RELAXED_ATTEMPTS = 16  # of which relaxed ones (a Python-level bracket scan each)
_MAX_RELAXED_CHARS = 20000
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)(?:```|\Z)", re.S)
_TRAILING_COMMA = re.compile(r",\s*([\]}])")


def json_values(text: str) -> list[Any]:
    """JSON values in an answer: the content of ``` fences when there are any (the last usable fence wins,
    since earlier ones may quote the reasoning), else every top-level value in the text, in order."""
    fences = [body for _, body in _FENCE.findall(text)] if "```" in text else []
    for body in reversed(fences):
        values = _scan(body)
        if values:
            return values
    return _scan(text)


def decode_value(text: str, start: int, relaxed: bool = True) -> tuple[Any, int]:
    """The JSON value starting at text[start] (a bracket), strictly, else (when `relaxed`) in the relaxed
    forms; (value, index after it), or (None, start) when there is none."""
    return _decode_at(json.JSONDecoder(), text, start, relaxed)


def _scan(text: str) -> list[Any]:
    values: list[Any] = []
    decoder = json.JSONDecoder()
    i, attempts = 0, 0
    while attempts < _MAX_JSON_ATTEMPTS:
        j = next_open(text, i)
        if j < 0:
            break
        attempts += 1
        value, end = _decode_at(decoder, text, j, relaxed=attempts <= _MAX_RELAXED_ATTEMPTS)
        if end > j:
            values.append(value)
            i = end
        else:
            i = j + 1
    return values


def next_open(text: str, start: int) -> int:
    """Index of the first "[" or "{" at or after `start`; -1 when there is none."""
    a, b = text.find("[", start), text.find("{", start)
    if a < 0 or b < 0:
        return max(a, b)
    return min(a, b)


def _decode_at(decoder: json.JSONDecoder, text: str, start: int, relaxed: bool) -> tuple[Any, int]:
    """A JSON value starting at `start`, strictly, else relaxed (trailing commas, Python literals with single
    quotes); (None, start) when there is none."""
    try:
        return decoder.raw_decode(text, start)
    except (ValueError, RecursionError):
        if not relaxed:
            return None, start
    end = _matching_close(text, start)
    if end < 0 or end - start > _MAX_RELAXED_CHARS:
        return None, start
    candidate = _TRAILING_COMMA.sub(r"\1", text[start : end + 1])
    try:
        return json.loads(candidate), end + 1
    except (ValueError, RecursionError):
        pass
    if "\\" in candidate:  # escapes in a Python literal may warn (a process-wide side effect): not worth it
        return None, start
    try:
        value = ast.literal_eval(candidate)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None, start
    return (_from_python(value), end + 1) if isinstance(value, list | dict | tuple) else (None, start)


def _matching_close(text: str, start: int) -> int:
    """Index of the bracket closing text[start], skipping quoted strings; -1 when unbalanced."""
    pairs = {"[": "]", "{": "}"}
    stack: list[str] = []
    quote = ""
    i = start
    limit = min(len(text), start + _MAX_RELAXED_CHARS + 1)
    while i < limit:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in pairs:
            stack.append(pairs[ch])
        elif ch in "]}":
            if not stack or stack.pop() != ch:
                return -1
            if not stack:
                return i
        i += 1
    return -1


def _from_python(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_from_python(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _from_python(v) for k, v in value.items()}
    return value
