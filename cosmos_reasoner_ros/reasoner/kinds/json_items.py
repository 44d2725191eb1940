"""Reading an answer's JSON values as the structured kinds do: the items carrying a kind's keys (searched
through lists and wrapper dicts), bare number arrays, finite numbers, 0-1000 coordinates clamped into range,
and an item's label. Items without any key of the kind are ignored (models add notes); a key with a malformed
value is a ParseError. Also the camera image that the values of a record (boxes, trajectories) refer to, as
results.jsonl writes and reads it."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.geometry import NORM_MAX

__all__ = [
    "LABEL_KEYS",
    "camera_fields",
    "camera_image",
    "compact",
    "first",
    "is_number",
    "is_scalar",
    "items",
    "label",
    "norm",
    "number",
    "off_image",
    "optional_float",
]

LABEL_KEYS = ("label", "name", "object", "class", "description")


def items(values: list[Any], keys: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Dicts carrying one of `keys` (searched through lists and wrapper dicts), and bare arrays, in order."""
    keyed: list[dict[str, Any]] = []
    bare: list[Any] = []

    def walk(value: Any, depth: int) -> None:
        if depth > 8:
            return
        if isinstance(value, dict):
            lowered = {str(k).lower(): v for k, v in value.items()}
            if any(k in lowered for k in keys) or ("x" in lowered and "y" in lowered and "point_2d" in keys):
                keyed.append(lowered)
                return
            for inner in lowered.values():
                if isinstance(inner, list | dict):
                    walk(inner, depth + 1)
        elif isinstance(value, list):
            if value and all(is_number(v) for v in value):
                bare.append(value)
                return
            for inner in value:
                walk(inner, depth + 1)

    for value in values:
        walk(value, 0)
    return keyed, bare


def first(item: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in item:
            return item[key]
    return None


def label(item: dict[str, Any], keys: tuple[str, ...] = LABEL_KEYS) -> str:
    value = first(item, keys)
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def is_scalar(value: Any) -> bool:
    return not isinstance(value, list | dict)


def is_number(value: Any) -> bool:
    return number(value) is not None


def number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            found = float(value)
        except OverflowError:
            return None
    elif isinstance(value, str):
        try:
            found = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return found if math.isfinite(found) else None


def norm(value: Any, what: str, raw: str) -> float:
    found = number(value)
    if found is None:
        raise ParseError(f"{what} is not a finite number: {value!r}", raw=raw)
    return min(max(found, 0.0), NORM_MAX)


def off_image(*values: Any) -> bool:
    """Any of the answered (already validated) coordinates outside 0-1000: clamping moved it."""
    return any(not 0.0 <= (number(v) or 0.0) <= NORM_MAX for v in values)


def compact(value: float) -> float | int:
    """A number as a drafted label writes it: an integer where it is one, else three decimals."""
    return int(value) if float(value).is_integer() else round(float(value), 3)


def camera_fields(values: Any) -> dict[str, Any]:
    """The camera image that record values (a CameraBox, a CameraTrajectory) are drawn in, as results.jsonl
    holds it."""
    return {"camera": values.camera, "width": values.width, "height": values.height}


def camera_image(data: Mapping[str, Any]) -> tuple[str, int, int]:
    """... and back: (camera, width, height), empty and 0 where the file has none."""
    return str(data.get("camera", "")), int(data.get("width", 0)), int(data.get("height", 0))


def optional_float(value: Any) -> float | None:
    """A number of results.jsonl that may be null (pixels of an image of unknown size)."""
    return None if value is None else float(value)
