"""Generated sequences against reasoner_node, the long budget (issue 27): the state machine of
support/node_sequences.py (lifecycle transitions valid and not, trigger bursts, goals, parameter sets, camera
frames good and bad, the scripted server's behaviours, shutdown signals; every invariant checked after each
step) run for many seeds, managed and plain, each seed a hypothesis run of `--examples` sequences of up to
`--steps` steps against a fresh node process.

Writes bench/results/sequences.json: every seed tried (replay one with `--seeds N`, or in the test suite with
`--hypothesis-seed=N`), what it found (hypothesis's shrunk reproduction, the steps to paste into
test/node/test_node_sequences.py as a named test), the rules run, and the answer latencies of each kind of
call (p50 / p95 / max) with the largest RSS seen.
    ./run exec python bench/sequences.py [--minutes 10] [--examples 10] [--steps 25] [--seeds 1,2,3]
Goal: no seed finds anything.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

import hypothesis.core
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from support import node_sequences
from support.paths import BENCH_RESULTS, SHM_PROFILE
from support.processes import bench_domain

from cosmos_reasoner_ros.percentiles import percentile
from cosmos_reasoner_ros.ros_compat import fastdds_profile_env

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", bench_domain())
os.environ.update({k: os.environ.get(k, v) for k, v in fastdds_profile_env(SHM_PROFILE).items()})

MACHINES = {"managed": node_sequences.ManagedNodeSequences, "plain": node_sequences.PlainNodeSequences}


def run_seed(machine: str, seed: int, examples: int, steps: int) -> dict[str, Any]:
    """One hypothesis run with this seed (what pytest's --hypothesis-seed sets)."""
    budget = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    start = time.monotonic()
    hypothesis.core.global_force_seed = seed
    try:
        run_state_machine_as_test(MACHINES[machine], settings=budget)
        found = ""
    except BaseException as exc:  # a found sequence (AssertionError, an exception group of several)
        if isinstance(exc, KeyboardInterrupt):
            raise
        found = "".join(traceback.format_exception(exc))[-12_000:]
    finally:
        hypothesis.core.global_force_seed = None
    return {
        "machine": machine,
        "seed": seed,
        "examples": examples,
        "steps": steps,
        "seconds": round(time.monotonic() - start, 1),
        "found": found,
    }


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 1),
        "p95_ms": round(1000 * percentile(ordered, 0.95), 1),
        "max_ms": round(1000 * ordered[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="stop starting seeds after this long")
    parser.add_argument("--examples", type=int, default=10, help="sequences per seed")
    parser.add_argument("--steps", type=int, default=25, help="most steps per sequence")
    parser.add_argument("--seeds", default="", help="comma-separated seeds to replay (default: random ones)")
    parser.add_argument("--machines", default="managed,plain")
    parser.add_argument("--out", type=Path, default=BENCH_RESULTS / "sequences.json")
    args = parser.parse_args()
    machines = [m.strip() for m in args.machines.split(",") if m.strip()]
    given = [int(s) for s in args.seeds.split(",") if s.strip()]
    rng = random.SystemRandom()
    end = time.monotonic() + 60 * args.minutes
    runs: list[dict[str, Any]] = []
    while (given and len(runs) < len(given) * len(machines)) or (not given and time.monotonic() < end):
        index = len(runs)
        seed = given[index // len(machines)] if given else rng.getrandbits(32)
        machine = machines[index % len(machines)]
        runs.append(run_seed(machine, seed, args.examples, args.steps))
        shown = {k: v for k, v in runs[-1].items() if k != "found"}
        print(json.dumps(shown | {"found": bool(runs[-1]["found"])}), flush=True)
    figures = {
        "benchmark": "sequences",
        "examples_per_seed": args.examples,
        "steps_per_example": args.steps,
        "seeds_tried": [{"machine": r["machine"], "seed": r["seed"], "seconds": r["seconds"]} for r in runs],
        "seeds_finding_something": [r for r in runs if r["found"]],
        "rules_run": dict(sorted(node_sequences.RULES_RUN.items())),
        "answer_latency_by_call": {k: quantiles(v) for k, v in sorted(node_sequences.LATENCIES.items())},
        "peak_rss_mb": round(node_sequences.PEAK_RSS_MB[0], 1),
        "minutes": round(sum(r["seconds"] for r in runs) / 60, 1),
    }
    figures["met"] = not figures["seeds_finding_something"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps({k: v for k, v in figures.items() if k != "seeds_finding_something"}))


if __name__ == "__main__":
    main()
