"""Compile JSON schemas the way vLLM's structured-output backends do, in whatever Python runs this file.

Run as a script by `structured_output.compile_check` in the Python of a grammar backend (the robot's vLLM
environment, or a CI environment per backend version): it imports nothing of the package, only the standard
library and the backends (xgrammar, llguidance) it finds. Reads a JSON request on stdin, writes a JSON report
on stdout:
  in:  {"schemas": {name: schema}, "backends": ["xgrammar", "llguidance"], "tokenizer": dir or null,
        "vocab_size": int or null, "vllm_front_end": bool, "parent": the caller's pid (optional)}
  out: {"python": version, "backends": {"xgrammar": {"version": "0.2.8", "results": {name: result}}},
        "missing": {backend: why}}
  result: {"ok": bool, "error": str, "stage": "front_end" | "compile", "whitespace": "free" | "none"}

Each schema is compiled twice, with free whitespace and without (vLLM's disable_any_whitespace), as vLLM
0.19-0.34 does it: xgrammar's GrammarCompiler with its cache on (xgrammar 0.2.6-0.2.8 fail only with the
cache, in the FSM hashing it feeds), `any_whitespace` and, where the compiler takes them, the compact
separators; llguidance's LLMatcher on `grammar_from_json_schema` with `whitespace_flexible`. Without a
tokenizer directory the vocabulary is the 256 bytes plus an end token: what can fail to compile is the
grammar, whatever the vocabulary. The probe exits when the process that started it is gone.
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


def _xgrammar(schemas: dict[str, Any], tok: Any, vocab_size: int | None, front_end: bool) -> dict[str, Any]:
    xgr = importlib.import_module("xgrammar")
    if tok is None:
        vocab = [bytes([i]) for i in range(256)] + [b"<|im_end|>"]
        info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW, stop_token_ids=[256])
    else:
        info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab_size)
    # vLLM's compiler (backend_xgrammar.py in every release 0.19-0.34): eight threads, the cache on.
    compiler = xgr.GrammarCompiler(info, max_threads=8, cache_enabled=True, cache_limit_bytes=512 * 1024**2)
    with_separators = "separators" in inspect.signature(compiler.compile_json_schema).parameters
    unsupported = _vllm_unsupported_check() if front_end else None
    results: dict[str, Any] = {}
    for name, schema in schemas.items():
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
                xgr.Grammar.from_json_schema(
                    json.dumps(schema)
                )  # vLLM's front end (validate_xgrammar_grammar)
            except Exception as exc:
                results[key] = {"ok": False, "stage": "front_end", "error": _error(exc)}
                continue
            kwargs: dict[str, Any] = {"any_whitespace": free}
            if not free and with_separators:
                kwargs["separators"] = (",", ":")  # vLLM 0.32-0.34 with disable_any_whitespace
            try:
                compiler.compile_json_schema(json.dumps(schema), **kwargs)
                results[key] = {"ok": True}
            except Exception as exc:
                results[key] = {"ok": False, "stage": "compile", "error": _error(exc)}
    return {"version": importlib.metadata.version("xgrammar"), "results": results}


def _vllm_unsupported_check() -> Any:
    """vLLM's own has_xgrammar_unsupported_json_features, when this Python has vLLM (0.19-0.34 have it)."""
    try:
        module = importlib.import_module("vllm.v1.structured_output.backend_xgrammar")
    except Exception:
        return None
    return getattr(module, "has_xgrammar_unsupported_json_features", None)


def _llguidance(schemas: dict[str, Any], tok: Any, vocab_size: int | None) -> dict[str, Any]:
    llg = importlib.import_module("llguidance")
    if tok is None:
        ll_tok = llg.LLTokenizer("byte")
    else:
        hf = importlib.import_module("llguidance.hf")
        ll_tok = hf.from_tokenizer(tok, max(vocab_size or 0, len(tok)))  # as vLLM's backend_guidance.py
    results: dict[str, Any] = {}
    for name, schema in schemas.items():
        for free in (True, False):
            key = f"{name}|{'free' if free else 'none'}"
            try:
                grammar = llg.LLMatcher.grammar_from_json_schema(
                    json.dumps(schema), defaults={"whitespace_flexible": free}
                )
                problem = llg.LLMatcher.validate_grammar(grammar, ll_tok)
                if problem:
                    results[key] = {"ok": False, "stage": "front_end", "error": str(problem)[:1000]}
                    continue
                matcher = llg.LLMatcher(ll_tok, grammar, log_level=0)
                problem = matcher.get_error()
                results[key] = {"ok": not problem} | (
                    {"stage": "compile", "error": problem} if problem else {}
                )
            except Exception as exc:
                results[key] = {"ok": False, "stage": "compile", "error": _error(exc)}
    return {"version": importlib.metadata.version("llguidance"), "results": results}


def _end_with_parent(parent: int) -> None:
    """Exit as soon as the process that started the probe is gone (a supervisor SIGKILLed during its start):
    an orphaned probe, a Python that may have imported vLLM, would otherwise run on to its last compilation.
    A thread, so that a long import or compilation does not delay it."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> int:
    parent = os.getppid()
    _end_with_parent(parent)
    request = json.load(sys.stdin)
    if request.get("parent") not in (None, parent):  # started by a process that is gone already
        return 3
    schemas: dict[str, Any] = request["schemas"]
    report: dict[str, Any] = {"python": sys.version.split()[0], "backends": {}, "missing": {}}
    try:
        tok = _tokenizer(request.get("tokenizer"))
    except Exception as exc:
        report["missing"]["tokenizer"] = _error(exc)
        print(json.dumps(report))
        return 0
    vocab_size = request.get("vocab_size")
    for backend in request.get("backends") or ("xgrammar", "llguidance"):
        try:
            if backend == "xgrammar":
                found = _xgrammar(schemas, tok, vocab_size, bool(request.get("vllm_front_end")))
            elif backend == "llguidance":
                found = _llguidance(schemas, tok, vocab_size)
            else:
                report["missing"][backend] = "not a grammar backend this probe knows"
                continue
        except ImportError as exc:
            report["missing"][backend] = _error(exc)
            continue
        report["backends"][backend] = found
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
