"""Whether a compiled grammar enforces its JSON schema: a grammar that compiles may still let through what the
schema refuses (xgrammar 0.2.6-0.2.9 compile `[0-9]{1,2}:[0-9]{1,2}` into a grammar that accepts "92:3576"),
and then the model writes answers the parser refuses.

Checked without a model or a server, by the backend itself (grammar_probe.py, in the Python of vLLM or of a
pinned backend version): values generated from each schema (schema_samples) must be accepted, written the way
the grammar's whitespace mode writes JSON, and their mutations that the schema refuses (the oracle:
schema_validation) must be refused. Used by the server's start-up grammar check (server/grammar_check.py) and
by the tests that run every backend version the project supports.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.schemas.schema_samples import (
    UnsupportedPattern,
    serialize,
    text_mutations,
    valid_values,
    value_mutations,
)
from cosmos_reasoner_ros.schemas.schema_validation import json_value, schema_errors, unsupported_keywords
from cosmos_reasoner_ros.schemas.structured_output import (
    BACKENDS,
    CompileReport,
    compile_report,
    probe_request,
    run_probe,
)

__all__ = [
    "ACCEPTS_INVALID",
    "ACCEPTS_NOT_UTF8",
    "REFUSES_VALID",
    "FidelityFailure",
    "FidelityReport",
    "TaskSamples",
    "build_samples",
    "fidelity_check",
    "judge",
    "task_samples",
]

ACCEPTS_INVALID = "accepts_invalid"
REFUSES_VALID = "refuses_valid"
ACCEPTS_NOT_UTF8 = "accepts_not_utf8"
# A UTF-16 surrogate code point written in UTF-8's three-byte form: not UTF-8 (nor JSON text). Every xgrammar
# version lets a string carry it; vLLM decodes it to three U+FFFD (the H200's 66-character label).
SURROGATE = b"\xed\xa0\x80"


@dataclass(frozen=True)
class TaskSamples:
    """What one schema's grammar is asked: `valid` values must be accepted, `invalid` values and `texts`
    refused; `reasons[i]` is why the oracle refuses invalid value i (then text i - len(invalid))."""

    valid: tuple[Any, ...]
    invalid: tuple[Any, ...]
    texts: tuple[str, ...]
    reasons: tuple[str, ...]
    byte_texts: tuple[bytes, ...] = ()  # answers that are not UTF-8 (a string with a surrogate's bytes)

    def request(self) -> dict[str, Any]:
        return {
            "values": [*self.valid, *self.invalid],
            "texts": list(self.texts),
            "byte_texts": [b.hex() for b in self.byte_texts],
        }

    @property
    def size(self) -> int:
        return len(self.valid) + len(self.invalid) + len(self.texts) + len(self.byte_texts)


@dataclass(frozen=True)
class FidelityFailure:
    task: str
    backend: str  # "xgrammar 0.2.8"
    whitespace: str  # "free" or "none" (disable_any_whitespace)
    kind: str  # ACCEPTS_INVALID or REFUSES_VALID
    # Every such answer as the grammar took or refused it, shortest first, with the oracle's reason (what the
    # schema refuses in it; empty for a refused valid answer).
    examples: tuple[tuple[str, str], ...]

    @property
    def example(self) -> str:
        return self.examples[0][0]

    @property
    def why(self) -> str:
        return self.examples[0][1]

    @property
    def count(self) -> int:
        return len(self.examples)

    def describe(self) -> str:
        ws = f"{self.whitespace} whitespace"
        if self.kind == ACCEPTS_NOT_UTF8:
            return (
                f"task {self.task}: {self.backend} ({ws}) lets a string carry bytes that are not UTF-8 "
                f"(a surrogate code point, e.g. {_clip(self.example)}): the server decodes them to "
                "U+FFFD, so such an answer may break its schema's bounds (the H200: a label two characters "
                "past its 64); backend guidance refuses them"
            )
        if self.kind == ACCEPTS_INVALID:
            return (
                f"task {self.task}: {self.backend} ({ws}) accepts answers its json_schema refuses "
                f"({self.count} of the samples), e.g. {_clip(self.example)}: {self.why}"
            )
        return (
            f"task {self.task}: {self.backend} ({ws}) refuses answers its json_schema accepts "
            f"({self.count} of the samples), e.g. {_clip(self.example)}"
        )


@dataclass(frozen=True)
class FidelityReport:
    compiled: CompileReport
    failures: tuple[FidelityFailure, ...] = ()
    samples: dict[str, int] = field(default_factory=dict)  # task -> samples matched per backend and mode
    unchecked: dict[str, str] = field(default_factory=dict)  # task -> why its samples were not judged

    @property
    def ok(self) -> bool:
        return self.compiled.ok and not self.failures


def _clip(text: str, limit: int = 160) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def task_samples(
    schema: Mapping[str, Any], rng: random.Random, values: int = 24, mutations: int = 8
) -> TaskSamples:
    """`values` generated values the oracle accepts, and mutations of them it refuses: `mutations` per value
    at the value level, and as many at the text level (of the compact and the spaced JSON).
    ValueError (UnsupportedPattern) for a schema the generator or the oracle cannot handle."""
    unsupported = unsupported_keywords(schema)
    if unsupported:
        raise ValueError(f"keywords the oracle does not check: {', '.join(unsupported[:4])}")
    valid = [v for v in valid_values(schema, rng, values) if not schema_errors(v, schema)]
    invalid: list[Any] = []
    reasons: list[str] = []
    seen: set[str] = set()
    for value in valid:
        for mutated in value_mutations(value, schema, rng, mutations):
            key = serialize(mutated, "compact")
            errors = [] if key in seen else schema_errors(mutated, schema)
            seen.add(key)
            if errors:
                invalid.append(mutated)
                reasons.append(errors[0])
    texts: list[str] = []
    for value in valid:
        for form in ("compact", "spaced"):
            for text in text_mutations(serialize(value, form), rng, max(1, mutations // 2)):
                if text in seen:
                    continue
                seen.add(text)
                try:
                    errors = schema_errors(json_value(text), schema)
                except ValueError as exc:
                    errors = [f"not JSON ({str(exc)[:80]})"]
                if errors:
                    texts.append(text)
                    reasons.append(errors[0])
    byte_texts = []
    for value in valid[:8]:  # a surrogate's bytes at the start of a string value, in both separator forms
        for form in ("compact", "spaced"):
            data = serialize(value, form).encode("utf-8")
            starts = [
                i + 1 for i in range(1, len(data)) if data[i] == 34 and data[:i].rstrip()[-1:] in b":[,"
            ]
            if starts:
                spot = rng.choice(starts)
                byte_texts.append(data[:spot] + SURROGATE + data[spot:])
    return TaskSamples(tuple(valid), tuple(invalid), tuple(texts), tuple(reasons), tuple(byte_texts))


def build_samples(
    schemas: Mapping[str, Any], seed: int = 0, values: int = 24, mutations: int = 8
) -> tuple[dict[str, TaskSamples], dict[str, str]]:
    """Samples of every schema (one seeded generator each, so a task's samples do not depend on the others),
    and the tasks that could not be sampled, with why."""
    samples: dict[str, TaskSamples] = {}
    unchecked: dict[str, str] = {}
    for name, schema in schemas.items():
        try:
            rng = random.Random(f"{seed}:{name}")  # noqa: S311 (samples, not secrets)
            samples[name] = task_samples(schema, rng, values, mutations)
        except (ValueError, UnsupportedPattern, RecursionError) as exc:
            unchecked[name] = str(exc)[:300]
    return samples, unchecked


def judge(samples: Mapping[str, TaskSamples], report: Mapping[str, Any]) -> list[FidelityFailure]:
    """The failures in a probe report on `samples`: a valid value refused in one of the forms its grammar's
    whitespace mode allows, an invalid value accepted in any form, an invalid text accepted."""
    failures: list[FidelityFailure] = []
    for backend, result in (report.get("backends") or {}).items():
        label = f"{backend} {result.get('version', '?')}"
        for key, sampled in (result.get("samples") or {}).items():
            task, _, whitespace = key.rpartition("|")
            if task not in samples:
                continue
            failures += _judge_one(samples[task], sampled, task, label, whitespace)
    return failures


def _judge_one(
    samples: TaskSamples, sampled: Mapping[str, Any], task: str, label: str, whitespace: str
) -> list[FidelityFailure]:
    forms: list[str] = list(sampled.get("forms") or [])
    flags: str = sampled.get("values") or ""
    text_flags: str = sampled.get("texts") or ""
    byte_flags: str = sampled.get("bytes") or ""
    values = [*samples.valid, *samples.invalid]
    if (
        len(flags) != len(values) * len(forms)
        or len(text_flags) != len(samples.texts)
        or len(byte_flags) != len(samples.byte_texts)
    ):
        raise ValueError(f"the grammar probe answered {task} ({label}) for other samples than were sent")
    refused: list[str] = []
    accepted: list[tuple[str, str]] = []
    for i, value in enumerate(values):
        for j, form in enumerate(forms):
            took = flags[i * len(forms) + j] == "1"
            if i < len(samples.valid) and not took:
                refused.append(serialize(value, form))
            elif i >= len(samples.valid) and took:
                accepted.append((serialize(value, form), samples.reasons[i - len(samples.valid)]))
    for k, text in enumerate(samples.texts):
        if text_flags[k] == "1":
            accepted.append((text, samples.reasons[len(samples.invalid) + k]))
    out: list[FidelityFailure] = []
    if accepted:
        examples = tuple(sorted(accepted, key=lambda item: len(item[0])))
        out.append(FidelityFailure(task, label, whitespace, ACCEPTS_INVALID, examples))
    if refused:
        examples = tuple((text, "") for text in sorted(refused, key=len))
        out.append(FidelityFailure(task, label, whitespace, REFUSES_VALID, examples))
    not_utf8 = [
        (raw.decode("utf-8", "backslashreplace"), "a string carries a surrogate code point (not UTF-8)")
        for raw, took in zip(samples.byte_texts, byte_flags, strict=True)
        if took == "1"
    ]
    if not_utf8:
        examples = tuple(sorted(not_utf8, key=lambda item: len(item[0])))
        out.append(FidelityFailure(task, label, whitespace, ACCEPTS_NOT_UTF8, examples))
    return out


def fidelity_check(
    schemas: Mapping[str, Any],
    python: str | Path,
    backends: Sequence[str] = BACKENDS,
    *,
    compact_separators: bool | None = None,
    vllm_front_end: bool = False,
    seed: int = 0,
    values: int = 24,
    mutations: int = 8,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300.0,
    cancel: threading.Event | None = None,
) -> FidelityReport:
    """Compile `schemas` with `backends` in `python` (as structured_output.compile_check) and match each
    grammar against samples of its schema, in one run of the probe. ValueError as compile_check."""
    samples, unchecked = build_samples(schemas, seed, values, mutations)
    request = probe_request(
        schemas,
        backends,
        vllm_front_end=vllm_front_end,
        compact_separators=compact_separators,
        samples={name: s.request() for name, s in samples.items()},
    )
    report = run_probe(request, python, env=env, timeout_s=timeout_s, cancel=cancel)
    return FidelityReport(
        compile_report(report, schemas),
        tuple(judge(samples, report)),
        {name: s.size for name, s in samples.items()},
        unchecked,
    )
