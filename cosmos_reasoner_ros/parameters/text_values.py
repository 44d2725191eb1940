"""A value given as text (a launch argument, a `--set` of the server's settings, a `--min-score`) read as the
type it stands for, one rule each for every place that takes one: which words are true and false, what an
integer is, and that a number is finite. Each raises ValueError("expected ..., got '...'"); the caller names
what the text was for."""

from __future__ import annotations

import math

__all__ = ["FALSE_WORDS", "TRUE_WORDS", "boolean_text", "integer_text", "number_text"]

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def boolean_text(text: str) -> bool:
    """One of TRUE_WORDS or FALSE_WORDS, in any case, with spaces around."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def integer_text(text: str) -> int:
    """A decimal integer as Python writes one (`-3`, `8_000`, ` 42 `)."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def number_text(text: str) -> float:
    """A finite decimal number (`2`, `-0.5`, `1e3`); `nan` and `inf` are not."""
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {text!r}")
    return number
