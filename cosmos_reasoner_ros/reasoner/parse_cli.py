"""`cosmos-reasoner-parse`: parse one Reasoner answer (file or stdin) for a task, print it as one JSON object.

Exit status 0 when the answer parsed, 1 otherwise (the JSON then carries the error).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.errors import ReasonerError
from cosmos_reasoner_ros.reasoner.kinds import KINDS, slot_kinds
from cosmos_reasoner_ros.reasoner.parsing import ParsedAnswer, parse_answer, split_reasoning
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog


def answer_to_json(
    task: str, parsed: ParsedAnswer | None, error: str | None = None, raw: str = ""
) -> dict[str, Any]:
    """The CLI's output object; on failure the reasoning/answer split of `raw` is still shown. Each structured
    kind's values under its name (a kind sharing its slot with another: under that one's name, in its own
    form when it is the answer's kind)."""
    ok = parsed is not None
    if parsed is None:
        reasoning, answer = split_reasoning(raw) if raw else (None, "")
        parsed = ParsedAnswer(raw=raw, reasoning=reasoning, answer=answer)
    out: dict[str, Any] = {"ok": ok, "task": task, "reasoning": parsed.reasoning, "answer": parsed.answer}
    answered = KINDS.get(parsed.answer_kind)
    for kind in slot_kinds():
        if kind.structured:
            form = answered if answered is not None and answered.slot == kind.slot else kind
            out[kind.name] = form.to_json(getattr(parsed, kind.slot))
    out["error"] = error
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cosmos-reasoner-parse", description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="task name from the catalog (its answer kind decides)")
    parser.add_argument("--width", type=int, help="source image width in pixels (with --height)")
    parser.add_argument("--height", type=int, help="source image height in pixels (with --width)")
    parser.add_argument("--tasks-file", type=Path, help="your tasks YAML, merged over the shipped catalog")
    parser.add_argument("--finish-reason", help='the server\'s finish_reason ("length" means cut off)')
    parser.add_argument(
        "--structured",
        action="store_true",
        help="the request carried the task's schema (the node's structured_output): the answer must be one "
        "JSON value the schema accepts",
    )
    parser.add_argument("file", nargs="?", type=Path, help="the answer text (default: stdin)")
    args = parser.parse_args(argv)

    raw = ""
    try:
        raw = args.file.read_text(encoding="utf-8") if args.file else sys.stdin.read()
        catalog = TaskCatalog.load(args.tasks_file)
        spec = catalog.spec(args.task)
        schema = spec.json_schema if args.structured else None
        parsed = parse_answer(
            raw, spec.answer_kind, args.width, args.height, finish_reason=args.finish_reason, schema=schema
        )
        out = answer_to_json(args.task, parsed)
    except ReasonerError as err:
        out = answer_to_json(args.task, None, f"{err.kind}: {err}", raw)
    except (OSError, UnicodeDecodeError) as err:
        out = answer_to_json(args.task, None, f"input: {err}")
    print(json.dumps(out, ensure_ascii=False))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
