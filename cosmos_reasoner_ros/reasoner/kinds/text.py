"""The text kind: the answer in words, as it is. Graded and compared by a normalised similarity of the
words (text_similarity: case folded, Unicode normalised, punctuation removed); a judge model may compare
meanings."""

from __future__ import annotations

import difflib
import re
import unicodedata
from typing import Any

from cosmos_reasoner_ros.reasoner.kinds import base

__all__ = ["KIND", "TextKind", "text_similarity"]

_PUNCT = re.compile(r"[^\w\s]")


def _words(text: str) -> list[str]:
    return _PUNCT.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split()


def text_similarity(a: str, b: str) -> float:
    """0-1: difflib's ratio of the two answers' word sequences after case folding, Unicode normalisation and
    removing punctuation (1: the same words in the same order)."""
    wa, wb = _words(a), _words(b)
    if not wa and not wb:
        return 1.0
    return difflib.SequenceMatcher(None, wa, wb, autojunk=False).ratio()


class TextKind(base.AnswerKind):
    """the answer in words"""

    name = "text"
    slot = "answer"
    structured = False
    free_text = True

    def parse(self, text: base.AnswerText) -> str:
        return text.answer

    rank = ("similarity", 1)
    metrics = (
        base.MetricSpec(
            "match", "match", "share", "higher", "", "answer words match an acceptable answer (>= match_min)"
        ),
        base.MetricSpec(
            "similarity",
            "similarity",
            "mean",
            "higher",
            "",
            "best word-sequence similarity to an acceptable one",
        ),
    )

    def grade(self, ours: str, theirs: str, context: base.GradeContext) -> tuple[base.Values, list[str]]:
        similarity = text_similarity(ours, theirs)
        return {"similarity": similarity, "match": float(similarity >= context.limits.match_min - 1e-12)}, []

    compare_checks = (base.CompareCheck("text_similarity", "text_similarity", "text_similarity_min", ">="),)

    def compare(self, baseline: str, current: str) -> tuple[base.Values, list[str]]:
        return {"text_similarity": text_similarity(baseline, current)}, []

    label_form = "the answer in words"

    def draft(self, values: Any) -> str:
        return str(values)

    def to_json(self, values: str) -> str:
        return values

    def dump(self, values: str) -> str:
        return values

    def load(self, data: Any) -> str:
        return str(data)


KIND = TextKind()
