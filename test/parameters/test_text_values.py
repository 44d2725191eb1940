"""parameters.text_values: a value given as text read by one rule. Over generated texts the readers agree with
independent oracles (the true and false words written here, a regular expression for integers, Python's
Decimal for numbers), and every place that takes such a text (the launch arguments, the server's settings, the
bag tools' --min-score) gives the same verdict and value."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cosmos_reasoner_ros import launch_config
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.scores.thresholds import parse_min_score
from cosmos_reasoner_ros.parameters.text_values import boolean_text, integer_text, number_text
from cosmos_reasoner_ros.server.errors import ConfigError
from cosmos_reasoner_ros.server.settings import settings_from_mapping

# The oracle's words, written out (not imported): what a robot's launch line or config may say.
TRUE = {"true", "1", "yes", "on"}
FALSE = {"false", "0", "no", "off"}
SPACES = " \t\n\r\x0b\x0c"  # what str.strip() and int() both take off (ASCII)
INTEGER = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*")

_words = st.sampled_from(sorted(TRUE | FALSE | {"t", "f", "y", "n", "2", "-1", "tru", "onn", "none", ""}))
_case = st.lists(st.booleans(), min_size=8, max_size=8)
_pad = st.text(alphabet=SPACES, max_size=2)
_numberish = st.text(alphabet="0123456789+-_.eEinfatyINFATY " + SPACES, max_size=12)


def _recase(word: str, upper: list[bool]) -> str:
    return "".join(c.upper() if u else c for c, u in zip(word, upper + [False] * len(word), strict=False))


def _bool_oracle(text: str) -> bool | None:
    word = text.strip(SPACES).lower()
    return True if word in TRUE else False if word in FALSE else None


def _int_oracle(text: str) -> int | None:
    core = text.strip(SPACES)
    return int(core.replace("_", "")) if INTEGER.fullmatch(core) else None


def _number_oracle(text: str) -> float | None:
    core = text.strip(SPACES)
    if re.search(r"(?<![0-9])_|_(?![0-9])", core):  # PEP 515: an underscore only between digits
        return None  # (Decimal reads "_746" as 746; a number written so is a typo)
    try:
        exact = Decimal(core)
    except InvalidOperation:
        return None
    if not exact.is_finite():
        return None
    value = float(exact)
    return value if math.isfinite(value) else None


def _verdict(read, text: str):  # type: ignore[no-untyped-def]
    try:
        return read(text)
    except ValueError:
        return None


def _launched(argument: str, text: str):  # type: ignore[no-untyped-def]
    """What the launch file passes the node for `argument:=text`; an empty argument is one not given (its
    parameter stays as the params file says), as the oracle's verdict of "" (None) says too."""
    overrides = launch_config.plan({argument: text}).node.parameters[-1]
    assert isinstance(overrides, dict)
    return overrides.get(f"handoff.{argument}")


_bool_texts = st.one_of(
    st.builds(lambda p, w, u, q: p + _recase(w, u) + q, _pad, _words, _case, _pad), st.text()
)


@given(_bool_texts)
@example("ON")
@example(" off\n")
@example("1.0")
def test_a_boolean_text_is_one_of_the_words(text: str) -> None:
    assert _verdict(boolean_text, text) == _bool_oracle(text)


@given(st.one_of(_numberish, st.integers(-(10**30), 10**30).map(str), st.text()))
@example("8_000")
@example("1_")
@example(" -7 ")
@example("+0")
@example("1e3")
def test_an_integer_text_is_a_decimal_integer(text: str) -> None:
    if not text.isascii():  # int() also reads other scripts' digits; the oracle knows ASCII only
        return
    assert _verdict(integer_text, text) == _int_oracle(text)


@given(st.one_of(_numberish, st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text()))
@example("nan")
@example("-inf")
@example("1e400")
@example("1_000.5")
@example(".5")
@example("5.")
@example("Infinity")
@example("\r\x0b_746")
@example("7__4")
def test_a_number_text_is_finite(text: str) -> None:
    if not text.isascii():
        return
    assert _verdict(number_text, text) == _number_oracle(text)


@given(_bool_texts)
@example("on")
@example("Off")
def test_every_place_reads_a_boolean_text_alike(text: str) -> None:
    expected = _bool_oracle(text)
    try:
        launched = _launched("confirm", text)
    except launch_config.LaunchArgumentError as exc:
        assert expected is None and "confirm: expected true or false" in str(exc)
    else:
        assert launched is expected
    try:
        setting = settings_from_mapping({"enforce_eager": text}).enforce_eager
    except ConfigError as exc:
        assert expected is None and "setting enforce_eager: expected true or false" in str(exc)
    else:
        assert setting is expected


@given(st.one_of(_numberish, st.floats(allow_nan=True, allow_infinity=True).map(repr)))
@example("inf")
@example("\r\x0b_746")
@example("12")
def test_every_place_reads_a_number_text_alike(text: str) -> None:
    expected = _number_oracle(text)
    try:
        launched = _launched("camera_pitch_deg", text)
    except launch_config.LaunchArgumentError as exc:
        assert expected is None and str(exc).startswith("camera_pitch_deg: expected a")
    else:
        assert launched == expected
    try:
        limit = parse_min_score(f"trajectory.ade_px={text}").limit
    except BagError as exc:
        assert expected is None and "trajectory.ade_px: expected a" in str(exc)
    else:
        assert limit == expected


@pytest.mark.parametrize(("text", "port"), [("8001", 8001), (" 9000 ", 9000), ("8_080", 8080)])
def test_the_server_reads_an_integer_setting_by_the_rule(text: str, port: int) -> None:
    assert settings_from_mapping({"port": text}).port == port


@pytest.mark.parametrize("text", ["80.5", "eighty", "", "0x50"])
def test_the_server_refuses_an_integer_setting_that_is_not_one(text: str) -> None:
    with pytest.raises(ConfigError, match="setting port: expected an integer"):
        settings_from_mapping({"port": text})
