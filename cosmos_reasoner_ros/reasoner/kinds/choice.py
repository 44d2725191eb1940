"""The choice kind: a multiple-choice answer's option letter (A-E), from "B", "(B)", "Answer: B", "B) the cup
falls", `{"answer": "B"}`, or one distinct standalone capital letter. Graded and compared by equality (case
and spaces aside)."""

from __future__ import annotations

import json
import re
from typing import Any

from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.reasoner.json_scan import json_values
from cosmos_reasoner_ros.reasoner.kinds import base
from cosmos_reasoner_ros.reasoner.kinds import json_items as ji

__all__ = ["KIND", "ChoiceKind", "parse_choice"]

_CHOICE_KEYS = ("answer", "choice", "option", "letter")
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


def parse_choice(answer: str, raw: str = "") -> str:
    """The option letter (A-E) of a multiple-choice answer."""
    for value in json_values(answer) if ("{" in answer) else []:
        if isinstance(value, dict):
            lowered = {str(k).lower(): v for k, v in value.items()}
            picked = ji.first(lowered, _CHOICE_KEYS)
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


def _same_letter(a: str | None, b: str | None) -> bool:
    return (a or "").strip().upper() == (b or "").strip().upper()


def _letter(values: Any) -> str:
    return str(values or "")


class ChoiceKind(base.AnswerKind):
    """a multiple-choice answer's option letter (A-E)"""

    name = "choice"
    slot = "choice"

    def parse(self, text: base.AnswerText) -> str:
        # Under a schema the answer is one JSON value (whole_values); its letter is read from that value.
        answer = json.dumps(text.values[0]) if text.schema is not None else text.answer
        return parse_choice(answer, raw=text.raw)

    rank = ("accuracy", 1)
    metrics = (
        base.MetricSpec(
            "accuracy", "accuracy", "share", "higher", "", "choice letter equal to an acceptable one"
        ),
    )

    def grade(
        self, ours: str, theirs: str | None, context: base.GradeContext
    ) -> tuple[base.Values, list[str]]:
        return {"accuracy": float(_same_letter(ours, theirs))}, []

    compare_checks = (base.CompareCheck("choice", "choice_equal", "choice_equal", "=="),)

    def compare(self, baseline: str, current: str) -> tuple[base.Values, list[str]]:
        return {"choice_equal": float(_same_letter(baseline, current))}, []

    label_form = "the option letter, e.g. B"

    def draft(self, values: Any) -> str:
        return _letter(values)

    def show(self, values: Any) -> str:
        return _letter(values)

    def to_json(self, values: str) -> str:
        return values

    def dump(self, values: Any) -> str:
        return _letter(values)

    def load(self, data: Any) -> str:
        return _letter(data)


KIND = ChoiceKind()
