"""Bag benchmark: the generated-recordings properties (test/bag/verbs/test_generated_recordings.py) with a
large budget. Recordings with any name a file system allows, MCAP and sqlite3, folders and bare files,
split files, gaps, stamps that go back or repeat, empty topics, older and unknown types, undecodable frames,
damaged and truncated files (support/recordings.py) go through `check`, `play` and `evaluate` (against the
scripted server, lock-step), each run in this process with the invariants of support/verb_sandbox.py: an
exit code the recording allows, never a traceback, nothing written outside the output folder, nothing read
outside the inputs named. Writes, per verb, the examples run, their exit codes, the median seconds per
example, and every failure with its recording and the seed that finds it, to
bench/results/bag_generated.json; a failure found here goes into the test as an @example.
    ./run exec python bench/bag_generated.py [--check N] [--play N] [--evaluate N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from support.paths import BENCH_RESULTS
from support.recordings import Recording, outcomes, recordings, write_recording
from support.scripted_server import ScriptedReply, ScriptedServer
from support.verb_sandbox import run_verb


def _verb(name: str, r: Recording, root: Path) -> tuple[int, float]:
    bag = write_recording(r, root)
    started = time.perf_counter()
    if name == "check":
        ran = run_verb(["check", str(bag)], root, [bag], None)
    elif name == "play":
        ran = run_verb(["play", str(bag), "--all-topics", "--rate", "4", "--drain", "0"], root, [bag], None)
    else:
        out = root / "out"
        at = f"{r.duration_s / 2:.3f},{r.duration_s:.3f}"
        reply = ScriptedReply(text="<think>\nok\n</think>\n\nmove left")
        with ScriptedServer(default=reply) as server:
            argv = ["evaluate", str(bag), "-o", str(out), "--server-url", server.base_url, "--lock-step"]
            argv += ["--at", at, "--rate", "4", "--no-progress", "--timeout", "60"]
            ran = run_verb(argv, root, [bag], out)
    seconds = time.perf_counter() - started
    assert ran.rc in outcomes(r, name), (name, r, ran.rc, ran.err[-1500:])
    return ran.rc, seconds


def run(name: str, examples: int, seed_value: int) -> dict[str, Any]:
    codes: Counter[int] = Counter()
    seconds: list[float] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix=f"bench-generated-{name}-") as tmp:
        count = [0]

        @seed(seed_value)
        @settings(
            max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(r=recordings())
        def prop(r: Recording) -> None:
            count[0] += 1
            root = Path(tmp) / str(count[0])
            root.mkdir()
            rc, s = _verb(name, r, root)
            codes[rc] += 1
            seconds.append(s)

        try:
            prop()
        except Exception as exc:  # the shrunk failing example, reported with its seed
            failures.append(f"{type(exc).__name__}: {str(exc)[:3000]}")
    return {
        "examples": sum(codes.values()),
        "exit_codes": dict(sorted(codes.items())),
        "seconds_median": round(statistics.median(seconds), 3) if seconds else 0.0,
        "seed": seed_value,
        "failures": failures,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", type=int, default=400)
    parser.add_argument("--play", type=int, default=40)
    parser.add_argument("--evaluate", type=int, default=12)
    parser.add_argument("--seed", type=int, default=random.randrange(2**31))
    args = parser.parse_args()
    results = {
        name: run(name, n, args.seed + i)
        for i, (name, n) in enumerate(
            (("check", args.check), ("play", args.play), ("evaluate", args.evaluate))
        )
        if n > 0
    }
    BENCH_RESULTS.mkdir(parents=True, exist_ok=True)
    (BENCH_RESULTS / "bag_generated.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results))
    return 1 if any(r["failures"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
