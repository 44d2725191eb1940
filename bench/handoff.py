"""What the Nav2 handoff adds on the node's delivery thread, per answer: Handoff.consider (every gate, the
path on the ground plane, cropped, resampled and oriented) for a drive_path answer of 16 points, alone and as
the third of three answers that must agree (three Fréchet distances between 0.1 m-spaced paths); beside
parsing the same answer (parse_answer), which the node does for every answer anyway, in the same run. Medians
of --rounds rounds of --n calls each, interleaved.
Prints JSON on its last line and writes bench/results/handoff.json.
    ./run exec python bench/handoff.py [--rounds 7] [--n 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable

from support.handoff_answers import FRAME, INTRINSICS, NS, H, W, outcome, points_text, settings
from support.paths import BENCH_RESULTS

from cosmos_reasoner_ros.handoff import Handoff
from cosmos_reasoner_ros.reasoner import parse_answer

# 16 points from near the robot to about 2.5 m ahead, bending right (every point below the horizon).
POINTS = tuple((500 + 10 * i, 950 - 35 * i) for i in range(16))


def per_call_us(make: Callable[[int], Callable[[], object]], n: int) -> float:
    calls = [make(i) for i in range(n)]
    start = time.perf_counter()
    for call in calls:
        call()
    return (time.perf_counter() - start) / n * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    text = points_text(POINTS)

    def parse(_i: int) -> Callable[[], object]:
        return lambda: parse_answer(text, "points", width=W, height=H)

    one = settings(mode="dry_run", max_path_length_m=5.0)
    three = dataclasses.replace(one, agreement_answers=3)
    alone = Handoff(one)

    def consider(handoff: Handoff, answers: int) -> Callable[[int], Callable[[], object]]:
        def make(i: int) -> Callable[[], object]:
            end = (100 + i) * NS
            items = [
                outcome(POINTS, request_id=f"r{i}-{k}", clip_id=f"c{i}", clip_end_ns=end)
                for k in range(answers)
            ]
            for item in items[:-1]:  # the first answers wait; the last one's decision is timed
                handoff.consider(item, end, INTRINSICS, FRAME)
            return lambda: handoff.consider(items[-1], end, INTRINSICS, FRAME)

        return make

    figures: dict[str, list[float]] = {
        "parse_answer_us": [],
        "consider_us": [],
        "consider_agreement_3_us": [],
    }
    for round_ in range(args.rounds):
        alone, agreeing = Handoff(one), Handoff(three)  # fresh each round: no state carried over
        figures["parse_answer_us"].append(per_call_us(parse, args.n))
        figures["consider_us"].append(per_call_us(consider(alone, 1), args.n))
        figures["consider_agreement_3_us"].append(per_call_us(consider(agreeing, 3), args.n))
        print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in figures.items()), flush=True)
    medians = {k: round(statistics.median(v), 1) for k, v in figures.items()}
    decision = alone.status().last
    result = {
        "answer_points": len(POINTS),
        "path_poses": len(decision.path.points) if decision and decision.path else 0,
        "rounds": args.rounds,
        "calls_per_round": args.n,
        **medians,
        "consider_over_parse": round(medians["consider_us"] / medians["parse_answer_us"], 2),
        "agreement_3_over_parse": round(medians["consider_agreement_3_us"] / medians["parse_answer_us"], 2),
    }
    BENCH_RESULTS.mkdir(parents=True, exist_ok=True)
    (BENCH_RESULTS / "handoff.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
