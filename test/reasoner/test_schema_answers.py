"""What a shipped task's json_schema admits, its kind's parser takes: the grammar built from the schema is all
that stands between the model and the parser, so an answer the schema lets the model write and the parser
refuses is a request lost to an error (the clock pattern once admitted "6:10:69").

Answers are drawn by hypothesis from each schema (strings from `from_regex`, support/schema_values.py), and
read back by a hand oracle written from the schemas' meaning, not from the parser: times in seconds or
[hh:]mm:ss[.fff] clock strings, points and boxes in 0-1000 coordinates, one choice of the enum.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.schema_values import schema_values

from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.reasoner import KINDS, TaskCatalog, parse_answer
from cosmos_reasoner_ros.schemas import structured_output
from cosmos_reasoner_ros.schemas.schema_validation import schema_errors

W, H = 640, 480
GRAMMARS = structured_output.catalog_grammars()
CATALOG = TaskCatalog.load()
KIND_OF = {name: CATALOG.spec(name).answer_kind for name in GRAMMARS}
CLOCK = re.compile(r"(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")


def _seconds(value: float | str) -> float:
    """A time as the schemas describe it, by hand: a number of seconds, or a clock string."""
    if not isinstance(value, str):
        return float(value)
    found = CLOCK.fullmatch(value)
    assert found is not None, f"the schema admitted a time that is neither: {value!r}"
    hours, minutes, seconds = found.groups()
    return int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)


def _is_clock(value: float | str) -> bool:
    """A clock string whose minutes (below an hour) and seconds are below 60: one a person would write."""
    if not isinstance(value, str):
        return True
    hours, minutes, seconds = CLOCK.fullmatch(value).groups()  # type: ignore[union-attr]
    return float(seconds) < 60 and (hours is None or int(minutes) < 60)


def _flat(box: list[int]) -> bool:
    """A box with no area: its two corners share an x or a y."""
    x1, y1, x2, y2 = box
    return x1 == x2 or y1 == y2


@st.composite
def admitted(draw: st.DrawFn) -> tuple[str, Any]:
    name = draw(st.sampled_from(sorted(GRAMMARS)))
    return name, draw(schema_values(GRAMMARS[name].json_schema))


def test_every_structured_task_is_drawn() -> None:
    """Every kind with a schema in the shipped catalog is drawn (a kind added with a schema joins)."""
    assert {"points", "boxes", "segments"} <= set(KIND_OF.values()), KIND_OF


@pytest.mark.parametrize(
    ("clock", "admitted_now"),
    # found by the test below: the pattern admitted seconds of 60 and more; minutes after hours likewise
    [
        ("0:60", False),
        ("6:10:69", False),
        ("1:75:00", False),
        ("0:59.999", True),
        ("99:59", True),
        ("23:59:59.5", True),
        ("7", False),
        ("1:2:3:4", False),
    ],
)
def test_the_clock_pattern_admits_what_a_person_writes(clock: str, admitted_now: bool) -> None:
    schema = GRAMMARS["timestamp_query"].json_schema
    errors = schema_errors({"start": 0, "end": clock}, schema)
    assert (not errors) is admitted_now, errors


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=admitted())
@example(case=("timestamp_query", {"start": 0, "end": 0}))
@example(case=("grounding_2d", [{"bbox_2d": [0, 0, 0, 0], "label": ""}]))
def test_every_answer_a_shipped_schema_admits_is_parsed_as_written(case: tuple[str, Any]) -> None:
    name, value = case
    kind = KIND_OF[name]
    schema = GRAMMARS[name].json_schema
    text = json.dumps(value)
    items = value if isinstance(value, list) else [value]
    if kind != "segments":  # points, boxes: whatever the schema admits is an answer
        if kind in ("boxes", "regions") and any(_flat(i["bbox_2d"]) for i in items):
            with pytest.raises(ParseError, match="has no area"):  # a relation beyond a schema
                parse_answer(text, kind, W, H, schema=schema)
            return
        parsed = parse_answer(text, kind, W, H, schema=schema)
        held = getattr(parsed, KINDS[kind].slot)
        if kind == "points":
            assert sum(len(t.points) for t in held) == len(items), (text, held)
        else:
            assert len(held) == len(items), (text, held)
        return
    for item in items:  # every time the schema admits is a clock time a person would write
        assert _is_clock(item["start"]) and _is_clock(item["end"]), item
    spans = [(_seconds(i["start"]), _seconds(i["end"])) for i in items]
    if any(end < start for start, end in spans):  # order is beyond a schema: the parser refuses it
        with pytest.raises(ParseError, match="before it starts"):
            parse_answer(text, kind, W, H, schema=schema)
        return
    parsed = parse_answer(text, kind, W, H, schema=schema)
    got = [(s.start_s, s.end_s) for s in parsed.segments]
    assert [t for span in got for t in span] == pytest.approx([t for span in spans for t in span])
    assert [s.caption for s in parsed.segments] == [i.get("caption", "") for i in items]
