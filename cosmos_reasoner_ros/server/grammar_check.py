"""The structured tasks' JSON schemas compiled, before vLLM starts, by the grammar backend of vLLM's own
environment: a schema that vLLM would accept and then fail to compile (vLLM 0.19-0.25: its engine dies;
0.26-0.34: the request fails with HTTP 500 or a stream without an answer) stops the start with a message that
names the task, the backend and its error (exit code 2).

A grammar that compiles may still not hold (grammar_fidelity.py): each compiled grammar is matched, in the
same run of the probe, against answers generated from its schema and mutations of them the schema refuses,
in the whitespace mode and with the separators this vLLM release uses. A grammar that accepts what its schema
refuses (or refuses what it accepts) is logged as a warning naming the task, the backend and an example; the
start goes on (the node's parser still refuses such an answer).

Which backend: `structured_outputs.backend` (config/server.yaml); with vLLM's default `auto`, xgrammar, and
llguidance for a schema vLLM's front end sends to it (features xgrammar does not support)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cosmos_reasoner_ros.schemas.grammar_fidelity import (
    ACCEPTS_INVALID,
    ACCEPTS_NOT_UTF8,
    FidelityFailure,
    FidelityReport,
    fidelity_check,
)
from cosmos_reasoner_ros.schemas.structured_output import CompileFailure, TaskGrammar, catalog_grammars
from cosmos_reasoner_ros.vllm_releases import xgrammar_compact_separators

from .errors import ConfigError
from .settings import ServerSettings

__all__ = ["GrammarCheck", "structured_tasks"]


def structured_tasks(settings: ServerSettings) -> dict[str, TaskGrammar]:
    """The structured tasks the node will use: `structured_tasks`, or every task with a json_schema in the
    catalog (config/tasks.yaml with `tasks_file` over it). ConfigError for a bad file or an unknown name."""
    tasks_file = Path(settings.tasks_file).expanduser() if settings.tasks_file else None
    if tasks_file is not None and not tasks_file.is_file():
        raise ConfigError(f"tasks_file: {tasks_file} does not exist")
    try:
        grammars = catalog_grammars(tasks_file)
    except ValueError as exc:
        raise ConfigError(f"tasks_file: {exc}") from None
    if not settings.structured_tasks:
        return grammars
    unknown = [t for t in settings.structured_tasks if t not in grammars]
    if unknown:
        raise ConfigError(
            f"structured_tasks: {', '.join(unknown)}: not a task with a json_schema (those: "
            f"{', '.join(grammars) or 'none'})"
        )
    return {name: grammars[name] for name in settings.structured_tasks}


@dataclass
class GrammarCheck:
    """Runs the check on a thread of its own (beside vLLM's start): `done` says when it has finished,
    `result()` waits for it: the notes to log, or ConfigError naming every task that fails. `close()` ends it
    (the probe process is killed), so that it never outlives the supervisor."""

    settings: ServerSettings
    grammars: Mapping[str, TaskGrammar]
    python: Path | None
    version: str
    env: Mapping[str, str] | None = None
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        self._notes: list[str] = []
        self._error: ConfigError | None = None
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, name="grammar-check", daemon=True)

    def start(self) -> GrammarCheck:
        self._thread.start()
        return self

    @property
    def done(self) -> bool:
        """The check has finished: result() returns (or raises) at once."""
        return self._thread.ident is not None and not self._thread.is_alive()

    def close(self) -> None:
        """Stop the check: its probe (a Python that may have imported vLLM) is killed, not left running."""
        self._cancel.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=10.0)

    def result(self, stop: threading.Event | None = None) -> list[str]:
        """The notes, once the check is done (ConfigError when it found failures); not waited for beyond its
        own timeout, or once `stop` is set (the supervisor is stopping)."""
        deadline = time.monotonic() + self.timeout_s + 30
        while self._thread.is_alive() and time.monotonic() < deadline and not (stop and stop.is_set()):
            self._thread.join(0.2)
        if self._thread.is_alive():
            return ["grammar check: not finished, not waited for"]
        if self._error is not None:
            raise self._error
        return self._notes

    def _run(self) -> None:
        try:
            self._notes, self._error = self.check()
        except Exception as exc:  # never a dead thread: a note saying the check could not run
            self._notes = [f"grammar check: could not run ({type(exc).__name__}: {exc})"]

    def check(self) -> tuple[list[str], ConfigError | None]:
        if not self.grammars:
            return [], None
        if self.python is None:
            return [
                "grammar check: skipped, the Python environment of the vLLM executable is unknown "
                "(a wrapper script?): the schemas were checked against known backend limits only"
            ], None
        backend = str(self.settings.structured_outputs.get("backend", "auto"))
        backends = {"xgrammar": ["xgrammar"], "guidance": ["llguidance"]}.get(
            backend, ["xgrammar", "llguidance"]
        )
        schemas = {name: g.json_schema for name, g in self.grammars.items()}
        try:
            compact = xgrammar_compact_separators(self.version)
        except ValueError:
            compact = None
        try:
            fidelity = fidelity_check(
                schemas,
                self.python,
                backends,
                compact_separators=compact,
                vllm_front_end=True,
                env=self.env,
                timeout_s=self.timeout_s,
                cancel=self._cancel,
            )
        except ValueError as exc:
            return [f"grammar check: {exc}"], None
        report = fidelity.compiled
        if not report.backends:
            missing = "; ".join(f"{k}: {v}" for k, v in report.missing.items())
            return [f"grammar check: no grammar backend in {self.python} ({missing})"], None
        whitespace = "none" if self.settings.structured_outputs.get("disable_any_whitespace") else "free"
        failures = [f for f in self._relevant(report.failures, backend) if f.whitespace == whitespace]
        checked = ", ".join(f"{k} {v}" for k, v in report.backends.items())
        if not failures:
            notes = [f"grammar check: the json_schema of {', '.join(schemas)} compile with {checked}"]
            return notes + self._fidelity_notes(
                fidelity.failures, report.failures, fidelity, whitespace
            ), None
        lines = "\n  ".join(f.describe() for f in failures)  # one per task and backend
        return [], ConfigError(
            f"vLLM {self.version} cannot use the structured output of these tasks (grammar backend "
            f"{backend}: {checked}), so every such request would fail:\n  {lines}\nFix the schema in the "
            "tasks file, or leave the task out of structured_tasks"
        )

    def _fidelity_notes(
        self,
        found: tuple[FidelityFailure, ...],
        compiled: tuple[CompileFailure, ...],
        fidelity: FidelityReport,
        whitespace: str,
    ) -> list[str]:
        """Warnings for grammars that do not hold (in the configured backend and whitespace mode), and what
        was checked."""
        backend = str(self.settings.structured_outputs.get("backend", "auto"))
        sent = self._sent_to_guidance(compiled) if backend == "auto" else None
        relevant = [
            f
            for f in found
            if f.whitespace == whitespace
            and (sent is None or f.backend.startswith("llguidance") == (f.task in sent))
        ]
        not_utf8 = [f for f in relevant if f.kind == ACCEPTS_NOT_UTF8]
        relevant = [f for f in relevant if f.kind != ACCEPTS_NOT_UTF8]
        notes = []
        if not_utf8:
            tasks = ", ".join(dict.fromkeys(f.task for f in not_utf8))
            notes.append(
                f"grammar check: WARNING {not_utf8[0].backend} lets the strings of {tasks} carry bytes "
                "that are not UTF-8 (a surrogate code point, ED A0 80): the server decodes them to U+FFFD, "
                "so such an answer may break its schema's bounds (the H200: a label two characters past its "
                "64); backend guidance refuses them"
            )
        notes += [
            f"grammar check: WARNING {f.describe()}"
            + (
                "; write the schema in a form this backend enforces (a counted repeat such as [0-9]{1,2} "
                "as [0-9][0-9]?: docs/SERVING.md, 'What each release enforces')"
                if f.kind == ACCEPTS_INVALID
                else ""
            )
            for f in relevant
        ]
        notes += [
            f"grammar check: the answers of task {task} were not matched against its grammar ({why})"
            for task, why in fidelity.unchecked.items()
        ]
        if not relevant:
            samples = sum(fidelity.samples.values())
            notes.append(
                f"grammar check: the grammars accept the {samples:,} answers generated from their schemas "
                f"and refuse the {'other ' if not_utf8 else ''}mutations the schemas refuse"
            )
        return notes

    @staticmethod
    def _sent_to_guidance(failures: tuple[CompileFailure, ...]) -> set[str]:
        """With `auto`, vLLM hands a schema its xgrammar front end refuses to llguidance."""
        return {f.task for f in failures if f.backend.startswith("xgrammar") and f.stage == "front_end"}

    @classmethod
    def _relevant(cls, failures: tuple[CompileFailure, ...], backend: str) -> list[CompileFailure]:
        """The failures that matter for the configured backend. With `auto`, vLLM hands a schema its xgrammar
        front end refuses to llguidance, and compiles every other one with xgrammar (no fallback then)."""
        if backend != "auto":
            return list(failures)
        sent_to_guidance = cls._sent_to_guidance(failures)
        return [
            f
            for f in failures
            if (f.backend.startswith("xgrammar") and f.task not in sent_to_guidance)
            or (f.backend.startswith("llguidance") and f.task in sent_to_guidance)
        ]
