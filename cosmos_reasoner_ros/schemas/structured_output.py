"""What a structured-output request asks of vLLM, and whether vLLM's grammar backends compile it.

Shared by the node's request builder and the server's start-up check and warm-up (the server imports
nothing of the node's core), so that both send the same request form and a warm-up compiles the very grammars
the node's requests will use (vLLM caches compiled grammars by the schema's text):
- request_fields: the schema as `structured_outputs.json`, and the chat template's thinking switch off for a
  request that does not reason (behind a reasoning parser vLLM then sees reasoning as over from the prompt, so
  the grammar applies from the first token and the answer is content; docs/SERVING.md);
- schema_problems: limits of the backends that vLLM releases 0.19-0.34 install, checked without any backend;
- compile_check: the schemas compiled by a backend, in a Python that has it (grammar_probe.py; run_probe
  sends it any request, grammar_fidelity.py one with samples to match);
- catalog_grammars: the catalog's structured tasks as the server reads them (config/tasks.yaml and a user's
  tasks file merged over it, field by field, as the node's catalog does).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import yaml

from cosmos_reasoner_ros.package_files import config_file

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11

__all__ = [
    "BACKENDS",
    "PROBE",
    "REPEAT_LIMIT",
    "THINKING_OFF",
    "CompileFailure",
    "CompileReport",
    "ProbeOptions",
    "TaskGrammar",
    "catalog_grammars",
    "compile_check",
    "compile_report",
    "merge_catalogs",
    "probe_request",
    "request_fields",
    "run_probe",
    "schema_problems",
]

PROBE = Path(__file__).with_name("grammar_probe.py")
BACKENDS = ("xgrammar", "llguidance")
# xgrammar 0.2.6, 0.2.7 and 0.2.8 (pinned by vLLM 0.31-0.34, installed by 0.29-0.30 at their release) cannot
# compile a JSON-schema string pattern with a counted repeat above 128 (mlc-ai/xgrammar#863, fixed in 0.2.9):
# vLLM accepts the request, its engine fails to compile the grammar (0.19-0.25: the engine dies).
REPEAT_LIMIT = 128
_CANCEL_POLL_S = 0.2  # how often a running compile_check looks at its cancel event
# The thinking switch of Qwen3-style chat templates; vLLM drops it silently where the template has none.
THINKING_OFF = {"enable_thinking": False}
_REPEAT = re.compile(r"(?<!\\)\{(\d+)(?:,(\d*))?\}")


def request_fields(schema: Mapping[str, Any] | None, reasoning: bool) -> dict[str, Any]:
    """The extra_body entries of a request: its structured output (when it has a schema) and, when it does not
    reason, the chat template's thinking switch off."""
    fields: dict[str, Any] = {}
    if schema is not None:
        fields["structured_outputs"] = {"json": json.loads(json.dumps(schema))}
    if not reasoning:
        fields["chat_template_kwargs"] = dict(THINKING_OFF)
    return fields


def schema_problems(schema: Any, where: str = "json_schema") -> list[str]:
    """What in a JSON schema vLLM's backends are known to fail on, whatever the backend's version is checked
    to be (the server compiles them with its own backend too: compile_check)."""
    problems: list[str] = []
    try:
        json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as exc:  # a YAML date, a set, NaN: nothing a server could read
        return [f"{where}: not JSON ({str(exc)[:120]})"]

    def walk(node: Any, path: str, depth: int) -> None:
        if depth > 64:
            problems.append(f"{path}: nested deeper than 64 levels")
            return
        if isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]", depth + 1)
            return
        if not isinstance(node, dict):
            return
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            for match in _REPEAT.finditer(pattern):
                bounds = [int(b) for b in match.groups() if b]
                if max(bounds) > REPEAT_LIMIT:
                    repeat = match.group(0)[:24]
                    problems.append(
                        f"{path}.pattern: the repeat {repeat} counts above {REPEAT_LIMIT}, which "
                        "xgrammar 0.2.6-0.2.8 (vLLM 0.29-0.34) cannot compile (mlc-ai/xgrammar#863): use "
                        f"{{0,{REPEAT_LIMIT}}} (or {{0,{REPEAT_LIMIT}}}{{0,{REPEAT_LIMIT}}} for longer text)"
                    )
        for key, value in node.items():
            walk(value, f"{path}.{key}", depth + 1)

    walk(schema, where, 0)
    return problems


@dataclass(frozen=True)
class CompileFailure:
    task: str
    backend: str  # e.g. "xgrammar 0.2.8"
    whitespace: str  # "free" (vLLM's default) or "none" (disable_any_whitespace)
    stage: str  # "front_end" (vLLM refuses the request: HTTP 400) or "compile" (the engine fails on it)
    error: str  # the backend's message

    def describe(self) -> str:
        when = "refused by vLLM's front end" if self.stage == "front_end" else "does not compile"
        ws = f"{self.whitespace} whitespace"
        return f"task {self.task}: its json_schema {when} with {self.backend} ({ws}): {self.error}"


@dataclass(frozen=True)
class CompileReport:
    backends: dict[str, str] = field(default_factory=dict)  # backend -> version, those that ran
    failures: tuple[CompileFailure, ...] = ()
    missing: dict[str, str] = field(default_factory=dict)  # backend -> why it could not run
    checked: tuple[str, ...] = ()  # the task names compiled

    @property
    def ok(self) -> bool:
        return bool(self.backends) and not self.failures


class ProbeOptions(TypedDict, total=False):
    """How the probe compiles: probe_request's keyword arguments, which compile_check passes on."""

    tokenizer: Path | None
    vocab_size: int | None
    vllm_front_end: bool
    compact_separators: bool | None


def compile_check(
    schemas: Mapping[str, Any],
    python: str | Path,
    backends: Sequence[str] = BACKENDS,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300.0,
    cancel: threading.Event | None = None,
    **options: Unpack[ProbeOptions],
) -> CompileReport:
    """Compile `schemas` ({task: schema}) with `backends` in the Python `python` (grammar_probe.py runs there:
    a backend that aborts cannot take the caller down, and xgrammar's torch stays out of the caller's memory).
    Raises ValueError when the probe cannot run, gives no report, or is cancelled (`cancel` set: the probe,
    a Python that may have imported vLLM, is killed, not left to finish). `options`: see probe_request."""
    request = probe_request(schemas, backends, **options)
    report = run_probe(request, python, env=env, timeout_s=timeout_s, cancel=cancel)
    return compile_report(report, schemas)


def probe_request(
    schemas: Mapping[str, Any],
    backends: Sequence[str] = BACKENDS,
    *,
    tokenizer: Path | None = None,
    vocab_size: int | None = None,
    vllm_front_end: bool = False,
    compact_separators: bool | None = None,
    samples: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What grammar_probe.py reads (its docstring says each field). `compact_separators`: whether vLLM passes
    xgrammar the compact separators without whitespace (versions.xgrammar_compact_separators); None: where
    the compiler takes them."""
    return {
        "schemas": dict(schemas),
        "backends": list(backends),
        "tokenizer": str(tokenizer) if tokenizer else None,
        "vocab_size": vocab_size,
        "vllm_front_end": vllm_front_end,
        "compact_separators": compact_separators,
        "samples": dict(samples or {}),
        "parent": os.getpid(),  # the probe ends itself when this process is gone (even SIGKILLed)
    }


def run_probe(
    request: Mapping[str, Any],
    python: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300.0,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """grammar_probe.py's report on one request, run in `python`; ValueError when it cannot run, gives no
    report, times out or is cancelled (the probe is killed then).

    The request reaches the probe as a file on its standard input, not through a pipe: communicate() writes
    input only during its first call, and a request of samples (about 1 MB) outgrows a pipe before a probe
    on a loaded machine starts reading it; its retries (the cancel polls) would never write the rest."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as sent:
        sent.write(json.dumps(request) + "\n")
        sent.flush()
        sent.seek(0)
        try:
            probe = subprocess.Popen(
                [str(python), str(PROBE)],
                stdin=sent,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=dict(env) if env is not None else None,
            )
        except OSError as exc:
            raise ValueError(f"the grammar check could not run in {python}: {exc}") from None
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            stdout, stderr = probe.communicate(timeout=_CANCEL_POLL_S)
            break
        except subprocess.TimeoutExpired:
            why = "cancelled" if cancel is not None and cancel.is_set() else ""
            why = why or (f"timed out after {timeout_s:g} s" if time.monotonic() >= deadline else "")
            if why:
                probe.kill()
                probe.communicate()
                raise ValueError(f"the grammar check in {python} {why}") from None
    try:
        report: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " | ".join(stderr.strip().splitlines()[-3:])[-600:]
        raise ValueError(
            f"the grammar check in {python} gave no report (exit code {probe.returncode}): {tail}"
        ) from None
    return report


def compile_report(report: Mapping[str, Any], schemas: Mapping[str, Any]) -> CompileReport:
    """The compile results of a probe report."""
    found: dict[str, str] = {}
    failures: list[CompileFailure] = []
    for backend, result in (report.get("backends") or {}).items():
        label = f"{backend} {result.get('version', '?')}"
        found[backend] = str(result.get("version", "?"))
        for key, outcome in (result.get("results") or {}).items():
            if outcome.get("ok"):
                continue
            task, _, whitespace = key.rpartition("|")
            failures.append(
                CompileFailure(
                    task,
                    label,
                    whitespace,
                    str(outcome.get("stage", "compile")),
                    str(outcome.get("error", ""))[:600],
                )
            )
    return CompileReport(
        found,
        tuple(failures),
        {str(k): str(v) for k, v in (report.get("missing") or {}).items()},
        tuple(schemas),
    )


# ---- the catalog as the server reads it ----


@dataclass(frozen=True)
class TaskGrammar:
    """What the server needs of a structured task: its schema, whether it reasons, its media kind."""

    name: str
    json_schema: dict[str, Any]
    reasoning: bool
    media: str


def merge_catalogs(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`: same-named profiles and tasks are merged field by field, new ones added."""
    merged: dict[str, Any] = {k: v for k, v in base.items() if k not in ("profiles", "tasks")}
    merged.update({k: v for k, v in override.items() if k not in ("profiles", "tasks")})
    for section in ("profiles", "tasks"):
        out: dict[str, Any] = {}
        for source in (base, override):
            entries = source.get(section) or {}
            if not isinstance(entries, Mapping):
                raise ValueError(f"{section} must be a mapping of names to entries")
            for name, entry in entries.items():
                if isinstance(entry, Mapping) and isinstance(out.get(name), Mapping):
                    out[name] = {**out[name], **entry}
                else:
                    out[name] = entry
        merged[section] = out
    return merged


def read_catalog_file(path: Path) -> dict[str, Any]:
    """A task catalog file as a mapping; ValueError when it cannot be read or is not one."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"cannot read task catalog {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"task catalog {path} is not valid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"task catalog {path} must be a mapping with profiles and tasks")
    return data


def catalog_grammars(tasks_file: Path | None = None) -> dict[str, TaskGrammar]:
    """The tasks with a json_schema in the shipped catalog, with `tasks_file` merged over it; ValueError for a
    file that cannot be read, or a schema that is not a mapping or has a known problem (schema_problems)."""
    data = read_catalog_file(config_file("tasks.yaml"))
    if tasks_file is not None:
        data = merge_catalogs(data, read_catalog_file(tasks_file))
    tasks = data.get("tasks") or {}
    if not isinstance(tasks, Mapping):
        raise ValueError("tasks must be a mapping of names to entries")
    found: dict[str, TaskGrammar] = {}
    for name, entry in tasks.items():
        if not isinstance(entry, Mapping) or entry.get("json_schema") is None:
            continue
        schema = entry["json_schema"]
        if not isinstance(schema, dict):
            raise ValueError(f"task {name}: json_schema must be a mapping (a JSON schema)")
        problems = schema_problems(schema, f"task {name}: json_schema")
        if problems:
            raise ValueError("; ".join(problems))
        found[str(name)] = TaskGrammar(
            str(name), schema, bool(entry.get("reasoning", False)), str(entry.get("media", "video"))
        )
    return found
