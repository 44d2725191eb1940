"""Values generated from a JSON schema, and mutations of them: what the grammar fidelity check
(grammar_fidelity.py) asks a compiled grammar to accept and to refuse.

`valid_values` writes values the schema accepts (strings from the regex of their pattern, numbers and counts
at their bounds and between); `value_mutations` and `text_mutations` change them the way a model's answer goes
wrong: digits added and dropped, separators moved, bounds crossed, characters a pattern excludes, required
properties left out, extra ones added. Whether a mutation is still valid is for the oracle to say
(schema_validation.schema_errors), not for this module. Plain Python and a seeded random.Random: the same seed
gives the same samples.
"""

from __future__ import annotations

import json
import math
import random
import re
import re._constants as sre  # the parser's node names (Python 3.11+)
import re._parser as sre_parse
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

__all__ = [
    "UnsupportedPattern",
    "regex_sample",
    "serialize",
    "text_mutations",
    "valid_values",
    "value_mutations",
]

# Characters a generated string is made of: printable ASCII, DEL (raw in JSON; llguidance 1.3.0 refuses it),
# and some of two to four bytes in UTF-8 (a model writes them raw). No control characters below 0x20: JSON
# carries them only escaped.
_ALPHABET = [chr(c) for c in range(0x20, 0x80)] + ["é", "ß", "Ω", "日", "—", "\u2028", "\ufeff", "🙂"]
_DIGITS = "0123456789"
_SEPARATORS = ":.,-/ "
_MAX_EXTRA_REPEAT = 4  # an unbounded repeat ({n,}, *, +) goes at most this far beyond its minimum


class UnsupportedPattern(ValueError):
    """A pattern this generator cannot write strings for (look-around, back-references to unknown groups)."""


@lru_cache(maxsize=256)
def _parsed(pattern: str) -> Any:
    try:
        return sre_parse.parse(pattern)
    except re.error as exc:
        raise UnsupportedPattern(f"{pattern!r} is not a regular expression: {exc}") from None


def _category(name: Any) -> Callable[[str], bool]:
    tests: dict[Any, Callable[[str], bool]] = {
        sre.CATEGORY_DIGIT: lambda c: c.isdigit(),
        sre.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
        sre.CATEGORY_SPACE: lambda c: c.isspace(),
        sre.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
        sre.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
        sre.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
    }
    if name not in tests:
        raise UnsupportedPattern(f"character category {name}")
    return tests[name]


@lru_cache(maxsize=1024)
def _in_class(items: tuple[Any, ...]) -> list[str]:
    """The alphabet's characters a character class ([...]) takes."""
    negate = bool(items) and items[0][0] == sre.NEGATE
    codes: list[tuple[int, int]] = []  # inclusive ranges of code points
    categories: list[Callable[[str], bool]] = []
    for op, arg in items[1:] if negate else items:
        if op == sre.LITERAL:
            codes.append((arg, arg))
        elif op == sre.RANGE:
            codes.append((arg[0], arg[1]))
        elif op == sre.CATEGORY:
            categories.append(_category(arg))
        else:
            raise UnsupportedPattern(f"character class item {op}")

    def takes(c: str) -> bool:
        return any(lo <= ord(c) <= hi for lo, hi in codes) or any(test(c) for test in categories)

    return [c for c in _ALPHABET if takes(c) != negate]


def regex_sample(pattern: str, rng: random.Random, edge: bool = False) -> str:
    """A string the pattern matches as a whole. `edge`: every repeat at its minimum or its maximum."""
    groups: dict[int, str] = {}

    def write(nodes: Any) -> str:
        out: list[str] = []
        for op, arg in nodes:
            if op == sre.LITERAL:
                out.append(chr(arg))
            elif op == sre.NOT_LITERAL:
                out.append(rng.choice([c for c in _ALPHABET if ord(c) != arg]))
            elif op == sre.ANY:
                out.append(rng.choice(_ALPHABET))
            elif op == sre.IN:
                choices = _in_class(tuple(arg))
                if not choices:
                    raise UnsupportedPattern(f"{pattern!r}: a class no printable character is in")
                out.append(rng.choice(choices))
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
                low, high, body = arg
                top = low + _MAX_EXTRA_REPEAT if high == sre.MAXREPEAT else high
                count = rng.choice((low, top)) if edge else rng.randint(low, top)
                out.extend(write(body) for _ in range(count))
            elif op in (sre.SUBPATTERN, sre.ATOMIC_GROUP):
                group, body = (arg[0], arg[-1]) if op == sre.SUBPATTERN else (None, arg)
                text = write(body)
                if group is not None:
                    groups[group] = text
                out.append(text)
            elif op == sre.BRANCH:
                out.append(write(rng.choice(arg[1])))
            elif op == sre.AT:
                continue  # ^ $ \A \Z \b: the whole string is written, anchors add nothing
            elif op == sre.GROUPREF and arg in groups:
                out.append(groups[arg])
            else:
                raise UnsupportedPattern(f"{pattern!r}: {op} is not written by this generator")
        return "".join(out)

    return write(_parsed(pattern))


# ---- values the schema accepts ----


def valid_values(schema: Mapping[str, Any], rng: random.Random, count: int) -> list[Any]:
    """`count` values generated from the schema, every other one at the edges (repeats, lengths, item counts
    and numbers at their bounds). Unchecked: the caller keeps those its oracle accepts (oneOf, allOf)."""
    return [_value(schema, rng, schema, edge=i % 2 == 1, depth=0) for i in range(count)]


def _resolve(schema: Any, root: Any) -> Any:
    while isinstance(schema, Mapping) and "$ref" in schema:
        node = root
        for part in str(schema["$ref"])[2:].split("/"):
            node = node[part]
        schema = node
    return schema


def _kind(schema: Mapping[str, Any], rng: random.Random) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        return str(rng.choice(kind))
    if isinstance(kind, str):
        return kind
    for keys, implied in (
        (("properties", "required", "additionalProperties"), "object"),
        (("items", "prefixItems", "minItems", "maxItems"), "array"),
        (("pattern", "minLength", "maxLength"), "string"),
        (("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"), "number"),
    ):
        if any(k in schema for k in keys):
            return implied
    return rng.choice(("string", "integer", "boolean", "null"))


def _value(schema: Any, rng: random.Random, root: Any, edge: bool, depth: int) -> Any:
    schema = _resolve(schema, root)
    if schema is True or not isinstance(schema, Mapping) or depth > 16:
        return None
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            branch = dict(rng.choice(schema[key]))
            rest = {k: v for k, v in schema.items() if k != key}
            return _value({**rest, **_resolve(branch, root)}, rng, root, edge, depth + 1)
    kind = _kind(schema, rng)
    if kind == "object":
        return _object(schema, rng, root, edge, depth)
    if kind == "array":
        return _array(schema, rng, root, edge, depth)
    if kind == "string":
        return _string(schema, rng, edge)
    if kind in ("integer", "number"):
        return _number(schema, rng, edge, kind == "integer")
    if kind == "boolean":
        return rng.random() < 0.5
    return None


def _object(
    schema: Mapping[str, Any], rng: random.Random, root: Any, edge: bool, depth: int
) -> dict[str, Any]:
    required = set(schema.get("required", []))
    out: dict[str, Any] = {}
    for name, sub in (schema.get("properties") or {}).items():  # in the schema's order, as grammars write
        if name in required or rng.random() < (1.0 if edge else 0.5):
            out[name] = _value(sub, rng, root, edge, depth + 1)
    return out


def _array(schema: Mapping[str, Any], rng: random.Random, root: Any, edge: bool, depth: int) -> list[Any]:
    low = int(schema.get("minItems", 0))
    high = int(schema.get("maxItems", low + 3))
    count = rng.choice((low, high)) if edge else rng.randint(low, high)
    prefix = schema.get("prefixItems") or []
    items = schema.get("items", True)
    return [_value(prefix[i] if i < len(prefix) else items, rng, root, edge, depth + 1) for i in range(count)]


def _string(schema: Mapping[str, Any], rng: random.Random, edge: bool) -> str:
    low = int(schema.get("minLength", 0))
    high = int(schema.get("maxLength", max(low, 12)))
    pattern = schema.get("pattern")
    if pattern is not None:
        for _ in range(20):  # a pattern's strings that also keep the length bounds
            text = regex_sample(str(pattern), rng, edge)
            if low <= len(text) <= high:
                return text
        return text
    length = rng.choice((low, high)) if edge else rng.randint(low, min(high, low + 16))
    return "".join(rng.choice(_ALPHABET) for _ in range(length))


def _number(schema: Mapping[str, Any], rng: random.Random, edge: bool, integer: bool) -> float | int:
    low = float(schema.get("minimum", -1000.0))
    high = float(schema.get("maximum", max(low, 0.0) + 1000.0))
    if "exclusiveMinimum" in schema:
        low = max(low, float(schema["exclusiveMinimum"]) + (1 if integer else 0.001))
    if "exclusiveMaximum" in schema:
        high = min(high, float(schema["exclusiveMaximum"]) - (1 if integer else 0.001))
    if integer or rng.random() < 0.4:
        first, last = math.ceil(low), math.floor(high)
        return rng.choice((first, last)) if edge else rng.randint(first, last)
    value = round(rng.uniform(low, high), rng.choice((1, 2, 3)))
    return min(max(value, low), high) if not edge else rng.choice((low, high))


# ---- mutations: how an answer goes wrong ----


def _string_mutations(text: str, rng: random.Random, schema: Mapping[str, Any]) -> list[str]:
    """The string with a digit added or dropped, a separator moved, a character the pattern may exclude,
    cut to nothing or run past its length."""
    out: list[str] = []
    spot = rng.randint(0, len(text))
    out.append(text[:spot] + rng.choice(_DIGITS) + text[spot:])  # a digit added
    out.append(text + rng.choice(_DIGITS))
    out.append(rng.choice(_DIGITS) + text)
    if text:
        drop = rng.randrange(len(text))
        out.append(text[:drop] + text[drop + 1 :])  # a character dropped
        digits = [i for i, c in enumerate(text) if c.isdigit()]
        if digits:
            i = rng.choice(digits)
            out.append(text[:i] + text[i + 1 :])  # a digit dropped
            out.append(text[:i] + text[i] * 3 + text[i + 1 :])  # digits repeated
        separators = [i for i, c in enumerate(text) if c in _SEPARATORS]
        if separators:
            i = rng.choice(separators)
            rest = text[:i] + text[i + 1 :]
            j = rng.randint(0, len(rest))
            out.append(rest[:j] + text[i] + rest[j:])  # a separator moved
            out.append(text[:i] + rng.choice(_SEPARATORS) + text[i + 1 :])  # a separator changed
            out.append(text[:i] + text[i] + text[i:])  # doubled
        out.append(text[:spot] + rng.choice('"\\\n\t\x01') + text[spot:])  # a character patterns exclude
        out.append(text[: rng.randrange(len(text))])  # cut short
    out.append("")
    if "maxLength" in schema:
        out.append(text + "a" * (int(schema["maxLength"]) + 1 - len(text)))
    out.append(text + "x" * rng.choice((1, 8, 65, 129)))  # past a repeat's bound
    out.append(rng.choice(_SEPARATORS) + text + rng.choice(_SEPARATORS))
    return out


def _number_mutations(value: float, rng: random.Random, schema: Mapping[str, Any]) -> list[Any]:
    out: list[Any] = [value + 1, value - 1, value * 10 + rng.randint(0, 9), -value - 1, value + 0.5]
    if isinstance(value, int) and abs(value) >= 10:
        out.append(value // 10)  # a digit dropped
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in schema:
            bound = schema[key]
            out += [bound - 1, bound + 1, bound - 0.001, bound + 0.001, bound]
    out += [str(value), None, True]
    return out


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value)
    if isinstance(value, list):
        return list(range(len(value)))
    return []


def _schemas_at(schema: Any, root: Any, value: Any) -> list[Mapping[str, Any]]:
    """The (sub)schemas that speak about `value`: anyOf/oneOf/allOf branches flattened."""
    schema = _resolve(schema, root)
    if not isinstance(schema, Mapping):
        return []
    found = [schema]
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(key) or ():
            found += _schemas_at(branch, root, value)
    return found


def _child_schema(schemas: list[Mapping[str, Any]], key: Any) -> list[Any]:
    out: list[Any] = []
    for schema in schemas:
        if isinstance(key, str):
            out.append((schema.get("properties") or {}).get(key, schema.get("additionalProperties", True)))
        else:
            prefix = schema.get("prefixItems") or []
            out.append(prefix[key] if key < len(prefix) else schema.get("items", True))
    return out


def value_mutations(value: Any, schema: Mapping[str, Any], rng: random.Random, count: int) -> list[Any]:
    """Up to `count` copies of `value`, each with one place changed (chosen at random, each depth alike)."""
    places: list[tuple[tuple[Any, ...], Any, list[Mapping[str, Any]]]] = []

    def walk(node: Any, path: tuple[Any, ...], schemas: list[Mapping[str, Any]]) -> None:
        places.append((path, node, schemas))
        for key in _children(node):
            subs = [s for sub in _child_schema(schemas, key) for s in _schemas_at(sub, schema, node[key])]
            walk(node[key], (*path, key), subs)

    walk(value, (), _schemas_at(schema, schema, value))
    out: list[Any] = []
    for _ in range(count):
        path, node, schemas = rng.choice(places)
        merged: dict[str, Any] = {}
        for sub in schemas:
            merged.update(sub)
        changed = rng.choice(_node_mutations(node, merged, rng))
        out.append(_replace(value, path, changed))
    return out


def _node_mutations(node: Any, schema: Mapping[str, Any], rng: random.Random) -> list[Any]:
    if isinstance(node, bool) or node is None:
        return [not node, 0, "true", None if node is not None else False]
    if isinstance(node, (int, float)):
        return _number_mutations(node, rng, schema)
    if isinstance(node, str):
        return [*_string_mutations(node, rng, schema), 7, None]
    if isinstance(node, list):
        out: list[Any] = [[], [*node, *node], node[:-1], [node], {"items": node}]
        if node:
            out.append([*node, node[-1]])
            out.append(node * (int(schema.get("maxItems", len(node))) + 1))
        return out
    out = [{}, {**node, "extra": 1}, [node]]
    for key in node:
        out.append({k: v for k, v in node.items() if k != key})  # a property left out
        out.append({(k + "_" if k == key else k): v for k, v in node.items()})  # a property renamed
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_replace(v, rest, new) if i == head else v) for i, v in enumerate(value)]


def text_mutations(text: str, rng: random.Random, count: int) -> list[str]:
    """Up to `count` copies of a JSON text with one character-level change: digits added and dropped,
    separators moved, quotes and brackets lost (the grammar's own syntax, beside the values)."""
    if not text:
        return []
    out: list[str] = []
    for _ in range(count):
        spot = rng.randrange(len(text))
        kind = rng.randrange(5)
        if kind == 0:
            out.append(text[:spot] + rng.choice(_DIGITS) + text[spot:])
        elif kind == 1:
            out.append(text[:spot] + text[spot + 1 :])
        elif kind == 2:
            marks = [i for i, c in enumerate(text) if c in ':,."']
            i = rng.choice(marks) if marks else spot
            rest = text[:i] + text[i + 1 :]
            j = rng.randint(0, len(rest))
            out.append(rest[:j] + text[i] + rest[j:])
        elif kind == 3:
            out.append(text[:spot] + text[spot] * 2 + text[spot + 1 :])
        else:
            out.append(text[:spot] + rng.choice(' \n"\\,:]}') + text[spot:])
    return out


_SEPARATOR_FORMS = {"compact": (",", ":"), "spaced": (", ", ": ")}


def serialize(value: Any, form: str) -> str:
    """A value as JSON text in one of the forms grammar_probe.py writes it (the same json.dumps calls):
    compact, spaced (", " and ": ", xgrammar's separators without whitespace before vLLM 0.32) or pretty
    (indented: free whitespace). Non-ASCII is kept, as a model writes it."""
    if form == "pretty":
        return json.dumps(value, ensure_ascii=False, indent=2)
    return json.dumps(value, ensure_ascii=False, separators=_SEPARATOR_FORMS[form])
