"""YAML files the bag tools read (scenarios, node parameters, tolerances, rosbag2 metadata), and their errors
said without their content: a file named by a scenario may be anything (`/etc/shadow` came back quoted in an
error before), so a problem is told by its place in the file (line, column), never by the text there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.safe_paths import printable

__all__ = ["load_yaml", "yaml_problem"]


def yaml_problem(exc: BaseException) -> str:
    """Why a file is not YAML, by position only (PyYAML's own message quotes the offending line)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start})"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f"not valid YAML (line {mark.line + 1}, column {mark.column + 1})"
    return "not valid YAML"


def load_yaml(path: Path, what: str) -> Any:
    """The YAML document in `path`; BagError naming `what` and the place of the problem, never its text."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise BagError(f"cannot read {what} {printable(str(path))}: {yaml_problem(exc)}") from None
