"""Compile JSON schemas the way vLLM's structured-output backends do, in whatever Python runs this file.

Run as a script by `structured_output.compile_check` in the Python of a grammar backend (the robot's vLLM
environment, or a CI environment per backend version): it imports nothing of the package, only the standard
library and the backends (xgrammar, llguidance) it finds. Reads JSON requests from stdin, one a line, and
writes one JSON report a line on stdout for each, until stdin ends (compiled grammars are kept between them):
  in:  {"schemas": {name: schema}, "backends": ["xgrammar", "llguidance"], "tokenizer": dir or null,
        "vocab_size": int or null, "vllm_front_end": bool, "compact_separators": bool or null,
        "samples": {name: {"values": [JSON values], "texts": [str], "byte_texts": [hex]}} (optional),
        "parent": the caller's pid (optional)}
  out: {"python": version, "backends": {"xgrammar": {"version": "0.2.8", "results": {name|ws: result},
        "samples": {name|ws: sampled}}}, "missing": {backend: why}}
  result: {"ok": bool, "error": str, "stage": "front_end" | "compile"}
  sampled: {"forms": ["compact", ...], "values": "0110..." (each value in each form: accepted 1, refused 0),
            "texts": "01..." (each text as sent), "bytes": "01..." (each byte text, as bytes)}

Each schema is compiled twice, with free whitespace ("free") and without ("none": vLLM's
disable_any_whitespace), as vLLM 0.19-0.34 does it: xgrammar's GrammarCompiler with its cache on (xgrammar
0.2.6-0.2.8 fail only with the cache, in the FSM hashing it feeds) and `any_whitespace`; without whitespace
vLLM 0.32-0.34 pass the compact separators (",", ":") and 0.19-0.31 none, so xgrammar writes ", " and ": "
(`compact_separators`; null: compact where the compiler takes separators); llguidance's LLMatcher on
`grammar_from_json_schema` with `whitespace_flexible` (compact without whitespace). Without a tokenizer
directory the vocabulary is the 256 bytes plus an end token: what can fail to compile is the grammar, whatever
the vocabulary. Samples are matched against each compiled grammar as whole answers (accepted and complete):
values serialized in each form the grammar's whitespace mode allows, texts as they are. The probe exits when
the process that started it is gone.
"""

import importlib
import importlib.metadata
import inspect
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

# Run as a script, its own folder (the package's) comes first on sys.path, where its modules would shadow
# top-level names the backends or vLLM import.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()}"[:1000]


def _tokenizer(directory: str | None) -> Any:
    if directory is None:
        return None
    transformers = importlib.import_module("transformers")
    return transformers.AutoTokenizer.from_pretrained(directory)


# The forms a value is written in for a grammar: free whitespace takes any of them, none only its separators.
_SEPARATORS = {"compact": (",", ":"), "spaced": (", ", ": ")}
_FREE_FORMS = ("compact", "spaced", "pretty")


def _serialize(value: Any, form: str) -> str:
    if form == "pretty":
        return json.dumps(value, ensure_ascii=False, indent=2)
    return json.dumps(value, ensure_ascii=False, separators=_SEPARATORS[form])


def _sampled(accepts: Any, forms: tuple[str, ...], samples: dict[str, Any]) -> dict[str, Any]:
    """The samples matched against one compiled grammar (`accepts(text) -> bool`)."""
    values = "".join(
        "1" if accepts(_serialize(value, form)) else "0"
        for value in samples.get("values") or ()
        for form in forms
    )
    texts = "".join("1" if accepts(text) else "0" for text in samples.get("texts") or ())
    raw = "".join("1" if accepts(bytes.fromhex(h)) else "0" for h in samples.get("byte_texts") or ())
    return {"forms": list(forms), "values": values, "texts": texts, "bytes": raw}


class _XGrammar:
    """xgrammar as vLLM's backend_xgrammar.py uses it, its compiled grammars kept between requests."""

    def __init__(self, tok: Any, vocab_size: int | None) -> None:
        self.xgr = xgr = importlib.import_module("xgrammar")
        if tok is None:
            vocab = [bytes([i]) for i in range(256)] + [b"<|im_end|>"]
            info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW, stop_token_ids=[256])
        else:
            info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab_size)
        # vLLM's compiler (backend_xgrammar.py in every release 0.19-0.34): eight threads, the cache on.
        self.compiler = xgr.GrammarCompiler(
            info, max_threads=8, cache_enabled=True, cache_limit_bytes=512 * 1024**2
        )
        self.with_separators = "separators" in inspect.signature(self.compiler.compile_json_schema).parameters
        self.compiled: dict[tuple[str, bool, bool], Any] = {}

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        xgr = self.xgr
        unsupported = _vllm_unsupported_check() if request.get("vllm_front_end") else None
        compact = request.get("compact_separators")
        compact = self.with_separators if compact is None else bool(compact) and self.with_separators
        samples = request.get("samples") or {}
        results: dict[str, Any] = {}
        sampled: dict[str, Any] = {}
        for name, schema in request["schemas"].items():
            text = json.dumps(schema)
            for free in (True, False):
                key = f"{name}|{'free' if free else 'none'}"
                if unsupported is not None and unsupported(schema):
                    results[key] = {
                        "ok": False,
                        "stage": "front_end",
                        "error": "vLLM's xgrammar backend refuses the schema: it has features xgrammar does "
                        "not support (multipleOf, uniqueItems, contains, a pattern with a length bound)",
                    }
                    continue
                try:
                    xgr.Grammar.from_json_schema(text)  # vLLM's front end (validate_xgrammar_grammar)
                except Exception as exc:
                    results[key] = {"ok": False, "stage": "front_end", "error": _error(exc)}
                    continue
                kwargs: dict[str, Any] = {"any_whitespace": free}
                if not free and compact:
                    kwargs["separators"] = (",", ":")  # vLLM 0.32-0.34 with disable_any_whitespace
                try:
                    cache_key = (text, free, bool(kwargs.get("separators")))
                    if cache_key not in self.compiled:
                        self.compiled[cache_key] = self.compiler.compile_json_schema(text, **kwargs)
                    results[key] = {"ok": True}
                except Exception as exc:
                    results[key] = {"ok": False, "stage": "compile", "error": _error(exc)}
                    continue
                if name in samples:
                    forms = _FREE_FORMS if free else ("compact" if compact else "spaced",)
                    matcher = xgr.GrammarMatcher(self.compiled[cache_key], terminate_without_stop_token=True)
                    sampled[key] = _sampled(lambda s, m=matcher: self._accepts(m, s), forms, samples[name])
        found = {"version": importlib.metadata.version("xgrammar"), "results": results}
        return found | ({"samples": sampled} if sampled else {})

    @staticmethod
    def _accepts(matcher: Any, text: str | bytes) -> bool:
        matcher.reset()
        return bool(matcher.accept_string(text)) and bool(matcher.is_terminated())


def _vllm_unsupported_check() -> Any:
    """vLLM's own has_xgrammar_unsupported_json_features, when this Python has vLLM (0.19-0.34 have it)."""
    try:
        module = importlib.import_module("vllm.v1.structured_output.backend_xgrammar")
    except Exception:
        return None
    return getattr(module, "has_xgrammar_unsupported_json_features", None)


class _LLGuidance:
    """llguidance as vLLM's backend_guidance.py uses it."""

    def __init__(self, tok: Any, vocab_size: int | None) -> None:
        self.llg = llg = importlib.import_module("llguidance")
        if tok is None:
            self.tokenizer = llg.LLTokenizer("byte")
        else:
            hf = importlib.import_module("llguidance.hf")
            self.tokenizer = hf.from_tokenizer(tok, max(vocab_size or 0, len(tok)))  # as backend_guidance.py

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        llg = self.llg
        samples = request.get("samples") or {}
        results: dict[str, Any] = {}
        sampled: dict[str, Any] = {}
        for name, schema in request["schemas"].items():
            for free in (True, False):
                key = f"{name}|{'free' if free else 'none'}"
                try:
                    grammar = llg.LLMatcher.grammar_from_json_schema(
                        json.dumps(schema), defaults={"whitespace_flexible": free}
                    )
                    problem = llg.LLMatcher.validate_grammar(grammar, self.tokenizer)
                    if problem:
                        results[key] = {"ok": False, "stage": "front_end", "error": str(problem)[:1000]}
                        continue
                    matcher = llg.LLMatcher(self.tokenizer, grammar, log_level=0)
                    problem = matcher.get_error()
                    results[key] = {"ok": not problem} | (
                        {"stage": "compile", "error": problem} if problem else {}
                    )
                except Exception as exc:
                    results[key] = {"ok": False, "stage": "compile", "error": _error(exc)}
                    continue
                if name in samples and not problem:
                    forms = _FREE_FORMS if free else ("compact",)
                    sampled[key] = _sampled(lambda s, m=matcher: self._accepts(m, s), forms, samples[name])
        found = {"version": importlib.metadata.version("llguidance"), "results": results}
        return found | ({"samples": sampled} if sampled else {})

    def _accepts(self, pristine: Any, text: str | bytes) -> bool:
        matcher = pristine.deep_copy()  # reset() keeps an error state: a copy of the fresh matcher instead
        tokens = (
            self.tokenizer.tokenize_bytes(text)
            if isinstance(text, bytes)
            else self.tokenizer.tokenize_str(text)
        )
        return bool(matcher.consume_tokens(tokens)) and bool(matcher.is_accepting())


def _end_with_parent(parent: int) -> None:
    """Exit as soon as the process that started the probe is gone (a supervisor SIGKILLed during its start):
    an orphaned probe, a Python that may have imported vLLM, would otherwise run on to its last compilation.
    A thread, so that a long import or compilation does not delay it."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _report(request: dict[str, Any], backends: dict[tuple[Any, ...], Any]) -> dict[str, Any]:
    report: dict[str, Any] = {"python": sys.version.split()[0], "backends": {}, "missing": {}}
    directory, vocab_size = request.get("tokenizer"), request.get("vocab_size")
    if ("tokenizer", directory) not in backends:
        try:
            backends["tokenizer", directory] = _tokenizer(directory)
        except Exception as exc:
            report["missing"]["tokenizer"] = _error(exc)
            return report
    tok = backends["tokenizer", directory]
    for backend in request.get("backends") or ("xgrammar", "llguidance"):
        kinds = {"xgrammar": _XGrammar, "llguidance": _LLGuidance}
        if backend not in kinds:
            report["missing"][backend] = "not a grammar backend this probe knows"
            continue
        key = (backend, directory, vocab_size)
        try:
            if key not in backends:
                backends[key] = kinds[backend](tok, vocab_size)
            report["backends"][backend] = backends[key].run(request)
        except ImportError as exc:
            report["missing"][backend] = _error(exc)
    return report


def main() -> int:
    parent = os.getppid()
    _end_with_parent(parent)
    backends: dict[tuple[Any, ...], Any] = {}  # kept between requests: tokenizers, compilers, grammars
    for count, line in enumerate(sys.stdin):
        if not line.strip():
            continue
        request = json.loads(line)
        if count == 0 and request.get("parent") not in (None, parent):  # started by a process now gone
            return 3
        print(json.dumps(_report(request, backends)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
