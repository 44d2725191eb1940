"""Whether a JSON value is valid under a JSON schema: a small validator of the subset of JSON Schema (draft
2020-12) that task catalogs use, with the jsonschema library's semantics (patterns searched with Python's
`re`, booleans not numbers, 1.0 an integer). The oracle of the grammar fidelity check (grammar_fidelity.py):
neither the node's nor the supervisor's environment has jsonschema, so it is written here;
test/test_grammar_fidelity.py checks it against jsonschema itself.

A keyword outside the subset is named by `unsupported_keywords`: a schema that has one is not judged.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

__all__ = ["SUPPORTED_KEYWORDS", "json_value", "schema_errors", "unsupported_keywords"]

# Keywords that constrain a value, as this validator checks them.
_ASSERTIONS = frozenset(
    {
        "type", "enum", "const", "anyOf", "oneOf", "allOf", "properties", "required",
        "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "minProperties",
        "maxProperties", "$ref", "$defs", "definitions",
    }
)  # fmt: skip
# Annotations: they constrain nothing (jsonschema checks `format` only when asked to, and so do the backends).
_ANNOTATIONS = frozenset(
    {
        "$schema", "$id", "$comment", "title", "description", "default", "examples", "format",
        "deprecated", "readOnly", "writeOnly", "x-guidance",
    }
)  # fmt: skip
SUPPORTED_KEYWORDS = _ASSERTIONS | _ANNOTATIONS


def unsupported_keywords(schema: Any) -> list[str]:
    """Where the schema uses a keyword this validator does not check ("items.properties.a.uniqueItems")."""
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, bool):
            return
        if not isinstance(node, Mapping):
            found.append(f"{path or '(root)'}: not a schema")
            return
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in SUPPORTED_KEYWORDS:
                found.append(where)
            elif key in ("properties", "$defs", "definitions"):
                for name, sub in (value or {}).items():
                    walk(sub, f"{where}.{name}")
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
                for i, sub in enumerate(value or []):
                    walk(sub, f"{where}[{i}]")
            elif key in ("items", "additionalProperties"):
                walk(value, where)
            elif key == "$ref" and not (isinstance(value, str) and value.startswith("#/")):
                found.append(f"{where} (only local references)")

    walk(schema, "")
    return found


def json_value(text: str) -> Any:
    """The value of a JSON text, strictly (NaN and Infinity are not JSON); ValueError when it is not JSON."""
    return json.loads(text, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def schema_errors(instance: Any, schema: Any, root: Any = None) -> list[str]:
    """Why `instance` is invalid under `schema` (empty when valid); each reason names the place
    ("[0].start: ..."). The schema must use SUPPORTED_KEYWORDS only."""
    return list(_errors(instance, schema, "", schema if root is None else root))


def _type_of(value: Any) -> set[str]:
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number", "integer"} if math.isfinite(value) and value.is_integer() else {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    if isinstance(value, dict):
        return {"object"}
    return set()


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b) and _type_of(a) & _type_of(b) != set()


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _resolve(ref: str, root: Any) -> Any:
    node = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _errors(value: Any, schema: Any, path: str, root: Any) -> list[str]:
    here = path or "(root)"
    if schema is True:
        return []
    if schema is False:
        return [f"{here}: no value is allowed here"]
    out: list[str] = []
    if "$ref" in schema:
        out += _errors(value, _resolve(schema["$ref"], root), path, root)
    kinds = _type_of(value)
    if "type" in schema:
        wanted = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not kinds & set(wanted):
            return [*out, f"{here}: {_short(value)} is not of type {' or '.join(wanted)}"]
    if "enum" in schema and not any(_equal(value, e) for e in schema["enum"]):
        out.append(f"{here}: {_short(value)} is not one of {schema['enum']}")
    if "const" in schema and not _equal(value, schema["const"]):
        out.append(f"{here}: {_short(value)} is not {schema['const']!r}")
    for sub in schema.get("allOf", []):
        out += _errors(value, sub, path, root)
    if "anyOf" in schema:
        branches = [_errors(value, s, path, root) for s in schema["anyOf"]]
        if all(branches):
            out.append(f"{here}: {_short(value)} matches none of anyOf{_closest(branches)}")
    if "oneOf" in schema:
        matching = sum(1 for s in schema["oneOf"] if not _errors(value, s, path, root))
        if matching != 1:
            out.append(f"{here}: {_short(value)} matches {matching} of oneOf, not exactly one")
    if "number" in kinds and not isinstance(value, bool):
        out += _number_errors(value, schema, here)
    if isinstance(value, str):
        length = len(value)
        if length < schema.get("minLength", 0) or length > schema.get("maxLength", math.inf):
            out.append(f"{here}: {_short(value)} has {length} characters, outside the length bounds")
        pattern = schema.get("pattern")
        if pattern is not None and _regex(pattern).search(value) is None:
            out.append(f"{here}: {_short(value)} does not match {pattern!r}")
    if isinstance(value, list):
        out += _array_errors(value, schema, path, root)
    if isinstance(value, dict):
        out += _object_errors(value, schema, path, root)
    return out


def _closest(branches: list[list[str]]) -> str:
    """The reason of the branch that failed for more than its type (the one the value was meant for)."""
    for errors in branches:
        if errors and "is not of type" not in errors[0]:
            return f" ({errors[0].split(': ', 1)[-1]})"
    return ""


def _number_errors(value: float, schema: Mapping[str, Any], here: str) -> list[str]:
    checks: tuple[tuple[str, Callable[[float, float], bool]], ...] = (
        ("minimum", lambda v, b: v >= b),
        ("maximum", lambda v, b: v <= b),
        ("exclusiveMinimum", lambda v, b: v > b),
        ("exclusiveMaximum", lambda v, b: v < b),
    )
    return [
        f"{here}: {_short(value)} fails {key} {schema[key]}"
        for key, holds in checks
        if key in schema and not holds(value, schema[key])
    ]


def _array_errors(value: list[Any], schema: Mapping[str, Any], path: str, root: Any) -> list[str]:
    out: list[str] = []
    count = len(value)
    if count < schema.get("minItems", 0) or count > schema.get("maxItems", math.inf):
        out.append(f"{path or '(root)'}: {count} items, outside the item bounds")
    prefix = schema.get("prefixItems", [])
    for i, item in enumerate(value):
        if i < len(prefix):
            out += _errors(item, prefix[i], f"{path}[{i}]", root)
        elif "items" in schema:
            out += _errors(item, schema["items"], f"{path}[{i}]", root)
    return out


def _object_errors(value: dict[str, Any], schema: Mapping[str, Any], path: str, root: Any) -> list[str]:
    here = path or "(root)"
    out = [
        f"{here}: the required property {k!r} is missing"
        for k in schema.get("required", [])
        if k not in value
    ]
    count = len(value)
    if count < schema.get("minProperties", 0) or count > schema.get("maxProperties", math.inf):
        out.append(f"{here}: {count} properties, outside the property bounds")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key in properties:
            out += _errors(item, properties[key], where, root)
        elif extra is False:
            out.append(f"{here}: the property {key!r} is not allowed")
        elif isinstance(extra, Mapping):
            out += _errors(item, extra, where, root)
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
