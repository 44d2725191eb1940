"""Every answer kind of the table (reasoner.KINDS) has every part, and its parts agree: a generated valid
answer of the kind, parsed, drafted into a label and graded against that label scores the kind's perfect
values; any other answer of the kind scores no better by the kind's rank; the results.jsonl form round-trips;
an answer compared with itself passes every comparison check. A kind added without its generator here, its
module, its shipped task, or any part, fails here."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.bag.judge.tolerances import RequestTolerances
from cosmos_reasoner_ros.bag.labels import ANSWER_FORMS, LabelTolerances
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.bag.scores import KIND_METRICS, METRICS
from cosmos_reasoner_ros.reasoner import (
    ANSWER_KINDS,
    KINDS,
    AnswerKind,
    GradeContext,
    MetricSpec,
    ParsedAnswer,
    TaskCatalog,
    parse_answer,
)

W, H = 640, 480
CONTEXT = GradeContext(LabelTolerances())
CALLABLE_PARTS = ("parse", "draft", "grade", "compare", "to_json", "dump", "load", "held")
# Every part of a kind: the facts and methods its base class names.
PARTS = sorted(p for p in {*AnswerKind.__annotations__, *vars(AnswerKind)} if not p.startswith("_"))

# ---- generated valid answers, one strategy per kind, in the model's own forms ---

_WORDS = st.text(st.characters(codec="utf-8", categories=("L", "N", "Zs")), min_size=1, max_size=40).filter(
    lambda t: t.strip()
)
_NAMES = st.sampled_from(["gripper trajectory", "cup", "a red mug", "left arm", ""])
_COORD = st.integers(0, 1000)


def _box() -> st.SearchStrategy[list[int]]:
    return (
        st.tuples(_COORD, _COORD, _COORD, _COORD)
        .filter(lambda b: b[0] != b[2] and b[1] != b[3])
        .map(lambda b: [min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])])
    )


def _wrapped(body: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """The answer as it comes: bare, in a ```json fence, or after a reasoning block."""
    return st.tuples(
        body, st.sampled_from(["{}", "```json\n{}\n```", "<think>\nLet me look.\n</think>\n\n{}"])
    ).map(lambda pair: pair[1].replace("{}", pair[0]))


_POINTS = st.lists(st.tuples(_COORD, _COORD, _NAMES), min_size=1, max_size=8).map(
    lambda ps: json.dumps([{"point_2d": [x, y], "label": name} for x, y, name in ps])
)
_BOXES = st.lists(st.tuples(_box(), _NAMES), min_size=1, max_size=4).map(
    lambda bs: json.dumps([{"bbox_2d": b, "label": name} for b, name in bs])
)
_SECONDS = st.integers(0, 6000).map(lambda cs: cs / 100)
_SEGMENTS = st.lists(st.tuples(_SECONDS, _SECONDS, _WORDS), min_size=1, max_size=4).map(
    lambda ss: json.dumps([{"start": min(a, b), "end": max(a, b), "caption": c} for a, b, c in ss])
)
_CHOICE = st.tuples(
    st.sampled_from("ABCDE"), st.sampled_from(["{}", "({}) because", "Answer: {}", '{{"answer": "{}"}}'])
).map(lambda pair: pair[1].format(pair[0]))
_REGIONS = st.lists(st.tuples(_box(), _WORDS), min_size=1, max_size=4).map(
    lambda rs: json.dumps([{"bbox_2d": b, "caption": c} for b, c in rs])
)
ANSWERS: dict[str, st.SearchStrategy[str]] = {
    "text": _WORDS,
    "points": _wrapped(_POINTS),
    "boxes": _wrapped(_BOXES),
    "segments": _wrapped(_SEGMENTS),
    "choice": _CHOICE,
    "regions": _wrapped(_REGIONS),
}
ROUND_TRIP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- every kind has every part ---


def test_the_table_is_the_one_list_of_kinds() -> None:
    assert tuple(KINDS) == ANSWER_KINDS and all(KINDS[name].name == name for name in KINDS)
    assert set(ANSWERS) == set(KINDS), "a kind needs its generated answers here"
    assert set(ANSWER_FORMS) == set(KIND_METRICS) == set(KINDS)


@pytest.mark.parametrize("name", ANSWER_KINDS)
def test_every_kind_has_every_part(name: str) -> None:
    kind = KINDS[name]
    assert isinstance(kind, AnswerKind) and not inspect.isabstract(type(kind))
    assert set(CALLABLE_PARTS) <= set(PARTS)
    for part in PARTS:
        assert getattr(kind, part) is not None or part == "show", part
    for part in CALLABLE_PARTS:
        assert callable(getattr(kind, part)), part
    assert kind.show is None or callable(kind.show)
    assert kind.label_form.strip() and kind.description.strip()
    # one module per kind, named after it, holding the unit
    assert importlib.import_module(f"cosmos_reasoner_ros.reasoner.kinds.{name}").KIND is kind
    # its values live in a slot of the parsed answer and of a run's record
    assert kind.slot in {f.name for f in dataclasses.fields(ParsedAnswer)}
    assert kind.slot in {f.name for f in dataclasses.fields(ResultRecord)}


_FACTS = ("name", "slot", "label_form", "rank", "metrics")
_METHODS = ("parse", "draft", "grade", "compare", "to_json", "dump", "load")


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(ANSWER_KINDS),
    facts=st.sets(st.sampled_from(_FACTS)),
    methods=st.sets(st.sampled_from(_METHODS)),
    docstring=st.booleans(),
)
def test_a_kind_that_lacks_a_part_fails_loudly(
    name: str, facts: set[str], methods: set[str], docstring: bool
) -> None:
    """A kind's class written again without some of its own facts, methods or docstring: a missing fact or
    docstring fails when the class is defined, a missing method when the kind is made, each named."""
    kind = type(KINDS[name])
    own = {k: v for k, v in vars(kind).items() if not k.startswith("_") and k not in facts | methods}
    own["__doc__"] = kind.__doc__ if docstring else None
    missing_facts = facts | (set() if docstring else {"description"})
    try:
        cls = type("Forgetful", (AnswerKind,), own)
    except TypeError as err:
        assert missing_facts and all(f in str(err) for f in missing_facts), err
        return
    assert not missing_facts
    if not methods:
        assert cls().name == KINDS[name].name
        return
    with pytest.raises(TypeError) as err:
        cls()
    assert all(m in str(err.value) for m in methods)


@pytest.mark.parametrize("name", ANSWER_KINDS)
def test_every_kind_is_scored_and_judged(name: str) -> None:
    kind = KINDS[name]
    assert kind.metrics and all(isinstance(m, MetricSpec) for m in (*kind.metrics, *kind.extra_metrics))
    columns = {m.column for m in kind.metrics}
    key, sign = kind.rank
    assert key in columns and sign in (1, -1)
    assert set(kind.perfect) <= set(kind.unanswered) | {key} and key in kind.perfect
    assert set(kind.unanswered) >= columns, "a request without an answer has a value for every metric"
    for spec in (*kind.metrics, *kind.extra_metrics):
        assert METRICS[spec.name] == spec and spec.better in ("higher", "lower")
    assert KIND_METRICS[name][: len(kind.metrics)] == tuple(m.name for m in kind.metrics)
    tolerances = {f.name for f in dataclasses.fields(RequestTolerances)}
    for rule in kind.compare_checks:  # a check whose tolerance the judge lacks would be silently off
        assert rule.tolerance in tolerances and rule.op in ("<=", ">=", "==")


@pytest.mark.parametrize("name", ANSWER_KINDS)
def test_every_kind_has_a_shipped_task(name: str) -> None:
    catalog = TaskCatalog.load()
    assert any(catalog.spec(task).answer_kind == name for task in catalog), f"no shipped task answers {name}"


def test_an_unknown_kind_is_named_where_it_is_used() -> None:
    from cosmos_reasoner_ros.errors import ParseError

    with pytest.raises(ParseError, match="one of " + ", ".join(ANSWER_KINDS)):
        parse_answer("B", "colour")


# ---- the parts agree: a generated round trip per kind ---


def _held(kind: AnswerKind, parsed: ParsedAnswer) -> Any:
    """The parsed values as a run's record holds them (in the camera image they refer to)."""
    return kind.held(getattr(parsed, kind.slot), "camera", W, H)


def _rank(kind: AnswerKind, values: dict[str, float]) -> float:
    key, sign = kind.rank
    value = values[key]
    return -math.inf if math.isnan(value) else sign * value


def _check_against_itself(kind: AnswerKind, ours: Any) -> None:
    """An answer compared with itself passes each of its kind's checks at any tolerance."""
    metrics, _ = kind.compare(ours, ours)
    for rule in kind.compare_checks:
        best = 0.0 if rule.op == "<=" else 1.0
        assert metrics[rule.metric] == pytest.approx(best, abs=1e-9), rule


def _round_trip(name: str, draw: Callable[[st.SearchStrategy[str]], str]) -> None:
    kind = KINDS[name]
    text = draw(ANSWERS[name])
    parsed = parse_answer(text, name, W, H)
    ours = _held(kind, parsed)
    assert kind.holds(ours), text
    json.dumps(kind.to_json(getattr(parsed, kind.slot)))  # the CLI prints it
    assert kind.load(json.loads(json.dumps(kind.dump(ours)))) == ours  # results.jsonl
    label = parse_answer(kind.draft(ours), name)  # a label is read without an image size
    perfect, _ = kind.grade(ours, getattr(label, kind.slot), CONTEXT)
    for key, value in kind.perfect.items():
        assert perfect[key] == pytest.approx(value, abs=1e-9), (key, text, kind.draft(ours))
    other = _held(kind, parse_answer(draw(ANSWERS[name]), name, W, H))
    worse, _ = kind.grade(other, getattr(label, kind.slot), CONTEXT)
    assert _rank(kind, worse) <= _rank(kind, perfect) + 1e-9
    _check_against_itself(kind, ours)


@ROUND_TRIP
@given(data=st.data(), name=st.sampled_from(ANSWER_KINDS))
def test_an_answer_drafted_into_a_label_scores_perfectly_against_it(data: st.DataObject, name: str) -> None:
    _round_trip(name, data.draw)


def test_a_drafted_label_is_in_the_kinds_own_form() -> None:
    """The drafts, by hand: what a person reviewing a drafted labels file reads."""
    cases = {
        "points": (
            '[{"point_2d": [100, 200.5], "label": "g"}]',
            '[{"point_2d": [100, 200.5], "label": "g"}]',
        ),
        "boxes": (
            '[{"bbox_2d": [10, 20, 30, 40], "label": "cup"}]',
            '[{"bbox_2d": [10, 20, 30, 40], "label": "cup"}]',
        ),
        "segments": (
            '[{"start": "00:01.50", "end": 3, "caption": "opens"}]',
            '[{"start": 1.5, "end": 3, "caption": "opens"}]',
        ),
        "choice": ("(C) it rolls", "C"),
        "regions": (
            '[{"bbox": [30, 40, 10, 20], "description": "a mug"}]',
            '[{"bbox_2d": [10, 20, 30, 40], "caption": "a mug"}]',
        ),
        "text": ("<think>\nhm\n</think>\nClose the gripper.", "Close the gripper."),
    }
    assert set(cases) == set(KINDS)
    for name, (answer, drafted) in cases.items():
        kind = KINDS[name]
        assert kind.draft(_held(kind, parse_answer(answer, name, W, H))) == drafted
