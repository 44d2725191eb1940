"""Whole answers only (reasoner/completeness.py through parse_answer): every valid answer of every structured
task of the shipped catalog, cut at every character, with each finish reason, is never a success holding part
of it.

The oracle is the uncut answer: a cut answer may parse only to exactly what the whole one parses to (a cut
that removes nothing but a closing fence or whitespace), else it must be refused; and a whole answer is never
called incomplete nor refused by the schema it was generated from (schema_samples writes values the schema
accepts).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.errors import IncompleteAnswer, ParseError, SchemaViolation
from cosmos_reasoner_ros.reasoner import TaskCatalog
from cosmos_reasoner_ros.reasoner.completeness import json_region, open_tags, whole_values
from cosmos_reasoner_ros.reasoner.parsing import ParsedAnswer, parse_answer
from cosmos_reasoner_ros.schemas.schema_samples import serialize, valid_values

CATALOG = TaskCatalog.load()
STRUCTURED = sorted(n for n in CATALOG.names() if CATALOG.spec(n).json_schema is not None)
WRAPPERS = ("plain", "fence", "think_fence", "think_copy", "answer_tag")
FINISH_REASONS = ("stop", None)  # "length" and "repetition" are refused before the text is read


def wrap(body: str, wrapper: str) -> str:
    """The answer as a model writes it around its JSON: bare, in a fence, after its reasoning (which may quote
    the waypoints itself, as the cookbook notes), or in an <answer> block."""
    if wrapper == "plain":
        return body
    if wrapper == "fence":
        return f"```json\n{body}\n```"
    if wrapper == "think_fence":
        return f"<think>\nThe gripper is left of the box.\n</think>\n\n```json\n{body}\n```\n"
    if wrapper == "think_copy":
        return f"<think>\nDraft: {body}\nThat looks right.\n</think>\n\n{body}"
    return f"<think>\nreasoning\n</think>\n\n<answer>\n{body}\n</answer>"


def parsed_items(parsed: ParsedAnswer) -> Any:
    return (parsed.trajectories, parsed.boxes, parsed.segments, parsed.choice)


def outcome(text: str, kind: str, schema: Any, finish: str | None) -> Any:
    """What parse_answer makes of it: the parsed items, or the error's type."""
    try:
        return parsed_items(parse_answer(text, kind, 640, 480, finish_reason=finish, schema=schema))
    except ParseError as err:
        return type(err)


@st.composite
def answers(draw: st.DrawFn) -> tuple[str, str, Any, str]:
    task = draw(st.sampled_from(STRUCTURED))
    spec = CATALOG.spec(task)
    assert spec.json_schema is not None
    seed = draw(st.integers(0, 2**32 - 1))
    value = valid_values(spec.json_schema, random.Random(seed), 1)[0]
    body = serialize(value, draw(st.sampled_from(("compact", "spaced", "pretty"))))
    return task, spec.answer_kind, spec.json_schema, wrap(body, draw(st.sampled_from(WRAPPERS)))


def check_every_cut(task: str, kind: str, schema: Any, text: str) -> None:
    for strict in (True, False):
        sent = schema if strict else None
        whole = outcome(text, kind, sent, "stop")
        assert whole not in (IncompleteAnswer, SchemaViolation), (task, strict, text)
        for cut in range(len(text)):
            for finish in FINISH_REASONS:
                got = outcome(text[:cut], kind, sent, finish)
                if isinstance(got, type):
                    continue  # refused: right for any cut
                assert got == whole, (task, strict, finish, text[:cut])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(answers())
# The issue's own find: a drive_path answer cut after three whole points, finish_reason stop.
@example(
    (
        "drive_path",
        "points",
        CATALOG.spec("drive_path").json_schema,
        '[{"point_2d":[500,900],"label":"robot path"},{"point_2d":[510,800],"label":"robot path"},'
        '{"point_2d":[520,700],"label":"robot path"},{"point_2d":[530,600],"label":"robot path"}]',
    )
)
def test_no_cut_of_a_valid_answer_is_a_success_with_part_of_it(answer: tuple[str, str, Any, str]) -> None:
    check_every_cut(*answer)


@pytest.mark.parametrize("task", STRUCTURED)
def test_every_structured_task_walks_its_cuts(task: str) -> None:
    """The same walk with fixed seeds, so that every task is cut whatever hypothesis draws."""
    spec = CATALOG.spec(task)
    assert spec.json_schema is not None
    for seed in range(3):
        value = valid_values(spec.json_schema, random.Random(seed), 1)[0]
        check_every_cut(task, spec.answer_kind, spec.json_schema, wrap(serialize(value, "spaced"), "fence"))


THREE_OF_FOUR = (
    '[{"point_2d":[500,900],"label":"p"},{"point_2d":[510,800],"label":"p"},'
    '{"point_2d":[520,700],"label":"p"},{"point_2d":[5'
)


@pytest.mark.parametrize("finish", ["stop", None, "tool_calls"])
@pytest.mark.parametrize("schema", [None, CATALOG.spec("drive_path").json_schema])
def test_the_issues_cut_drive_path_is_incomplete_not_three_points(finish: str | None, schema: Any) -> None:
    with pytest.raises(IncompleteAnswer, match="never closed") as err:
        parse_answer(THREE_OF_FOUR, "points", 640, 480, finish_reason=finish, schema=schema)
    assert err.value.raw == THREE_OF_FOUR and err.value.kind == "incomplete"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('[{"point_2d": [1, 2], "label": "a"}] and then', "text after"),
        ('[{"point_2d": [1, 2], "label": "a"}]\n[{"point_2d": [3, 4], "label": "b"}]', "another JSON value"),
        ('Sure: [{"point_2d": [1, 2], "label": "a"}]', "not one JSON value|no JSON"),
        ("", "no JSON value"),
    ],
)
def test_strict_wants_one_value_and_nothing_else(text: str, why: str) -> None:
    schema = CATALOG.spec("trajectory").json_schema
    with pytest.raises(IncompleteAnswer, match=why):
        whole_values(text, schema)


@pytest.mark.parametrize(
    "value",
    [
        [{"point_2d": [1, 2], "label": "a"}] * 200,  # 200 points where the schema allows 16
        [{"point_2d": [1, 2000], "label": "a"}],  # off the 0-1000 space
        [{"point_2d": [1, 2]}],  # a required key missing
        [],
    ],
)
def test_a_whole_value_the_schema_refuses_is_a_schema_violation(value: Any) -> None:
    schema = CATALOG.spec("drive_path").json_schema
    text = json.dumps(value)
    with pytest.raises(SchemaViolation) as err:
        parse_answer(text, "points", 640, 480, finish_reason="stop", schema=schema)
    assert err.value.kind == "schema_invalid" and err.value.raw == text
    if value:  # without the schema (not sent), the value is whole and reads as points
        assert parse_answer(text, "points", 640, 480).points


@pytest.mark.parametrize(
    "text",
    [
        "<think>\nthe path goes [[1, 2], [3, 4]] and then",  # stopped while reasoning: the copy is no answer
        "<think>\nr\n</think>\n<answer>\n[[1, 2], [3, 4]]",  # the <answer> block never closed
    ],
)
def test_blocks_left_open_are_incomplete(text: str) -> None:
    with pytest.raises(IncompleteAnswer):
        open_tags(text)
    with pytest.raises(IncompleteAnswer):
        parse_answer(text, "points", finish_reason="stop")
    assert parse_answer(text, "text").answer  # a text answer is not read as JSON


def test_a_server_reasoning_parser_that_kept_the_answer_is_still_whole() -> None:
    """vLLM's qwen3 reasoning parser leaves the content empty and the JSON in `reasoning` (no </think> came):
    that unclosed block is the server's doing, not a cut; a cut JSON there is still refused."""
    whole = '[{"point_2d": [500, 500], "label": "g"}]'
    assert parse_answer("", "points", 10, 10, reasoning=whole).points
    with pytest.raises(IncompleteAnswer, match="content is empty"):
        parse_answer("", "points", 10, 10, reasoning=whole[:-2])


@pytest.mark.parametrize(
    ("answer", "region"),
    [
        ("see ```json\n[1]\n``` then ```\nno json\n```", "\n[1]\n"[1:]),
        ("[1, 2]", "[1, 2]"),
        ("```json\n[1, 2", "[1, 2"),
    ],
)
def test_the_region_is_the_last_fence_with_json(answer: str, region: str) -> None:
    assert json_region(answer) == region


def test_prose_in_brackets_is_skipped_when_lenient_but_bounded() -> None:
    """Balanced non-JSON brackets are prose; a hostile answer of many costs bounded relaxed decodes."""
    assert whole_values('The [left] cup. [{"point_2d": [1, 2]}]') == [[{"point_2d": [1, 2]}]]
    hostile = "[a]" * 20000 + '[{"point_2d": [1, 2]}]'
    assert whole_values(hostile) == [[{"point_2d": [1, 2]}]]
