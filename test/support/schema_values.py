"""Hypothesis's own values of a JSON schema (the subset the shipped task schemas use), independent of the
package's schema_samples: strings from hypothesis's from_regex. Used by the grammar fidelity check and by the
check that every answer a shipped schema admits is parsed."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def schema_values(schema: Any) -> st.SearchStrategy[Any]:
    """Hypothesis's own values of a schema (the subset the shipped schemas use): independent of
    schema_samples, strings from hypothesis's from_regex."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([schema_values(branch) for branch in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "object":
        required = set(schema.get("required", []))
        parts = {
            name: (schema_values(sub) if name in required else st.none() | schema_values(sub))
            for name, sub in schema["properties"].items()
        }
        order = list(schema["properties"])  # the schema's order: vLLM's xgrammar writes properties in it
        return st.fixed_dictionaries(parts).map(
            lambda d: {k: d[k] for k in order if k in required or d[k] is not None}
        )
    if kind == "array":
        return st.lists(
            schema_values(schema["items"]),
            min_size=schema.get("minItems", 0),
            max_size=schema.get("maxItems", 4),
        )
    if kind == "string":
        return st.from_regex(schema["pattern"], fullmatch=True, alphabet=st.characters(codec="utf-8"))
    if kind == "integer":
        return st.integers(schema["minimum"], schema["maximum"])
    low, high = schema["minimum"], schema["maximum"]
    return st.integers(low, high) | st.floats(low, high).map(lambda x: min(max(round(x, 3), low), high))
