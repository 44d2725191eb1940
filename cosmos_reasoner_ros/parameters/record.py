"""One parameter as one record (rclpy's ParameterDescriptor without ROS): its name, type, default, unit, range
or choices and description, and the one check of a value against them that every validation asks.

The records themselves live one module per owner: the node's in parameters/node.py (gathered from
node_clips.py, node_server.py and node_requests.py), cameras.py and handoff.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "Parameter", "by_name", "flag", "integer", "names", "number", "seconds", "text"]

# The types a parameter may have (ROS parameter types: bool, integer, double, string, string array) and how a
# message names each.
KINDS: dict[type, str] = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "text",
    list: "a list",
}


@dataclass(frozen=True)
class Parameter:
    """A parameter's facts. `unit` is written in brackets before the description where it is shown
    ("[s] period of ..."); `range` is [low, high], both included, of a number; `choices` the allowed texts;
    `rule` a further check of a valid value (the server URL's), returning its problem or None."""

    name: str
    type: type
    default: Any
    description: str
    unit: str = ""
    range: tuple[float, float] | None = None
    choices: tuple[str, ...] | None = None
    rule: Callable[[Any], str | None] | None = None

    def __post_init__(self) -> None:
        if self.type not in KINDS:
            raise TypeError(f"{self.name}: type {self.type.__name__} is not a parameter type")
        if self.range is not None and self.type not in (int, float):
            raise TypeError(f"{self.name}: only a number has a range")
        if self.choices is not None and self.type is not str:
            raise TypeError(f"{self.name}: only text has choices")
        if (problem := self.problem(self.default)) is not None:
            raise ValueError(f"{self.name}: its default {self.default!r} {problem}")

    @property
    def documentation(self) -> str:
        """The description as the node's ParameterDescriptor and the launch file show it: the unit first."""
        return f"[{self.unit}] {self.description}" if self.unit else self.description

    def type_problem(self, value: Any) -> str | None:
        """Whether `value` has the parameter's type (an integer is a number; true is no integer)."""
        if self.type is bool:
            ok = isinstance(value, bool)
        elif self.type is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.type is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif self.type is str:
            ok = isinstance(value, str)
        else:
            ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        if ok:
            return None
        got = "null" if value is None else type(value).__name__
        return f"must be {KINDS[self.type]}, got {got}"

    def check(self, value: Any) -> None:
        """Raise ValueError(f"{name} {problem}") where `value` is not valid: a constructor's check of an
        argument that this record governs (the node has validated it; a direct caller may not have)."""
        if (problem := self.problem(value)) is not None:
            raise ValueError(f"{self.name} {problem}")

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` for this parameter (None: nothing): its type, a number's finiteness and
        range, a text's choices, the rule. The caller names the parameter: f"{name}: {problem}"."""
        if (problem := self.type_problem(value)) is not None:
            return problem
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        if self.range is not None:
            low, high = self.range
            if not low <= value <= high:
                return f"must be in [{low:g}, {high:g}], got {value:g}"
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}, got {value!r}"
        return self.rule(value) if self.rule is not None else None


def by_name(records: Iterable[Parameter]) -> Mapping[str, Parameter]:
    """Records by name, in their order; a name given twice is a mistake of the table."""
    table: dict[str, Parameter] = {}
    for record in records:
        if record.name in table:
            raise ValueError(f"parameter {record.name} is written twice")
        table[record.name] = record
    return table


# One constructor a type, so that a table reads one record a line or two: the name, the default, then what
# bounds it, then the description.


def seconds(name: str, default: float, bounds: tuple[float, float], description: str) -> Parameter:
    """A duration or period in seconds, the most common record: a number in [s] within `bounds`."""
    return Parameter(name, float, default, description, unit="s", range=bounds)


def number(name: str, default: float, unit: str, bounds: tuple[float, float], description: str) -> Parameter:
    """A number in [unit] within `bounds`."""
    return Parameter(name, float, default, description, unit=unit, range=bounds)


def integer(
    name: str, default: int, bounds: tuple[float, float], description: str, unit: str = ""
) -> Parameter:
    """An integer within `bounds`, in [unit] where it has one."""
    return Parameter(name, int, default, description, unit=unit, range=bounds)


def flag(name: str, default: bool, description: str) -> Parameter:
    """True or false."""
    return Parameter(name, bool, default, description)


def text(
    name: str,
    default: str,
    description: str,
    choices: tuple[str, ...] | None = None,
    rule: Callable[[Any], str | None] | None = None,
) -> Parameter:
    """Text, one of `choices` where given, passing `rule` where given."""
    return Parameter(name, str, default, description, choices=choices, rule=rule)


def names(name: str, default: list[str], description: str) -> Parameter:
    """A list of texts."""
    return Parameter(name, list, default, description)
