"""What whole answers only cost per answer (issue 37): the completeness check (reasoner/completeness.py)
beside the JSON read it replaced (json_scan.json_values) and beside the whole parse, for a valid answer of
every structured task, lenient (no schema sent) and strict (one value, validated against the schema sent);
and the drivable-path checks, inside handoff.ground_path (collapse, distinct poses, minimum length, no running
back), for a drive_path answer of 16 and of 200 points, beside parsing that answer. Interleaved calls, medians
of --rounds rounds of --n calls each, in microseconds.
Prints JSON on its last line and writes bench/results/answer_checks.json.
    ./run exec python bench/answer_checks.py [--rounds 7] [--n 300]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from figures import write_figures
from support.handoff_answers import FRAME, INTRINSICS, H, W, outcome, points_text, settings

from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.handoff.ground_path import ground_path
from cosmos_reasoner_ros.reasoner import TaskCatalog, parse_answer
from cosmos_reasoner_ros.reasoner.completeness import whole_values
from cosmos_reasoner_ros.reasoner.json_scan import json_values
from cosmos_reasoner_ros.schemas.schema_samples import serialize, valid_values


def per_call_us(call: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n * 1e6


def interleaved(calls: dict[str, Callable[[], object]], rounds: int, n: int) -> dict[str, float]:
    """Median microseconds per call of each, the calls taking turns within every round."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            times[name].append(per_call_us(call, n))
    return {name: round(statistics.median(values), 1) for name, values in times.items()}


def parsable_answer(schema: Any, kind: str) -> str:
    """The first generated valid answer that also parses (the schema admits times such as "6:10:69" that the
    parser refuses as no clock time: timed here is the path of an answer that succeeds)."""
    for seed in range(100):
        value = valid_values(schema, random.Random(seed), 1)[0]
        text = f"<think>\nreasoning\n</think>\n\n```json\n{serialize(value, 'compact')}\n```"
        try:
            parse_answer(text, kind, W, H, schema=schema)
        except ParseError:
            continue
        return text
    raise RuntimeError("no generated answer parses")


def task_figures(catalog: TaskCatalog, rounds: int, n: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for name in sorted(catalog.names()):
        schema = catalog.spec(name).json_schema
        if schema is not None:
            figures[name] = task_row(schema, catalog.spec(name).answer_kind, rounds, n)
    return figures


def task_row(schema: Any, kind: str, rounds: int, n: int) -> dict[str, Any]:
    text = parsable_answer(schema, kind)
    answer = text.split("</think>")[-1]
    got: dict[str, Any] = interleaved(
        {
            "json_values_us": lambda: json_values(answer),
            "whole_lenient_us": lambda: whole_values(answer),
            "whole_strict_us": lambda: whole_values(answer, schema),
            "parse_no_schema_us": lambda: parse_answer(text, kind, W, H),
            "parse_with_schema_us": lambda: parse_answer(text, kind, W, H, schema=schema),
        },
        rounds,
        n,
    )
    got["added_lenient_us"] = round(got["whole_lenient_us"] - got["json_values_us"], 1)
    got["added_strict_us"] = round(got["whole_strict_us"] - got["json_values_us"], 1)
    got["answer_chars"] = len(text)
    return got


def path_row(count: int, rounds: int, n: int) -> dict[str, Any]:
    limits = settings(max_path_length_m=5.0).path_limits()
    plane = settings().ground_plane()
    points = tuple((500 + (60 * i) // count, 950 - (400 * i) // count) for i in range(count))
    answer = outcome(points)
    text = points_text(points)
    got: dict[str, Any] = interleaved(
        {
            "parse_us": lambda: parse_answer(text, "points", W, H),
            "ground_path_us": lambda: ground_path(answer, INTRINSICS, plane, limits, FRAME),
        },
        rounds,
        n,
    )
    path = ground_path(answer, INTRINSICS, plane, limits, FRAME)
    got["poses"] = 0 if isinstance(path, str) else len(path.points)
    return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    results = {
        "rounds": args.rounds,
        "n": args.n,
        "tasks": task_figures(TaskCatalog.load(), args.rounds, args.n),
        "drive_path": {f"{k}_points": path_row(k, args.rounds, max(1, args.n // 3)) for k in (16, 200)},
    }
    write_figures("answer_checks", results, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
