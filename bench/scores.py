"""What scoring against labels costs. (1) Within an evaluation: `evaluate` replays the robot clip into
reasoner_node against the scripted server (six tasks every 0.5 s of bag time, lock-step: 72 requests), with
and without labels, alternating, --pairs runs each: the wall time of each run (replay, judging, report) and
the scoring step's own time (bag/runs/scoring.py: matching, grading, bootstrap, scores.json, label frames).
(2) A leaderboard of --runs runs of --requests labelled requests each (generated answers of the five answer
kinds with known noise): scored afresh from results.jsonl against the labels (2,000 bootstrap resamples each),
and built from the runs' scores.json. Prints JSON on its last line and writes bench/results/scores.json.
    ./run exec python bench/scores.py [--pairs 3] [--runs 20] [--requests 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import yaml
from figures import write_figures
from support.labelled import generated_run
from support.paths import CONFIG, ROBOT_CLIP, TEST_DIR
from support.processes import bench_domain
from support.scripted_server import ScriptedReply, ScriptedServer, load_reply_file, request_text

from cosmos_reasoner_ros.bag.cli import main as bag_main
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
from cosmos_reasoner_ros.bag.judge.tolerances import load_tolerances
from cosmos_reasoner_ros.bag.labels import bind_labels, labels_from_text
from cosmos_reasoner_ros.bag.records import write_records
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, TaskSpec
from cosmos_reasoner_ros.bag.runs.scoring import RunScoring
from cosmos_reasoner_ros.bag.runs.suite import run_bags
from cosmos_reasoner_ros.bag.scores import score_run, write_scores

TASKS = (
    TaskSpec("next_action"),
    TaskSpec("trajectory", "put the white package in the cardboard box"),
    TaskSpec("grounding_2d", "the cardboard box"),
    TaskSpec("grounding_2d", "the white package with the spoons"),
    TaskSpec("temporal_localization"),
    TaskSpec("plausibility"),
)


def spanning_labels() -> str:
    """The example's labels, each held over the whole bag (every request of the run is labelled)."""
    data = yaml.safe_load((CONFIG / "labels_example.yaml").read_text())
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for label in data["labels"]:
        key = (label["task"], label.get("instruction", ""))
        answers = label.get("answers") or [label["answer"]]
        entry = merged.setdefault(key, {"task": label["task"], "between": [0, 7], "answers": []})
        if label.get("instruction"):
            entry["instruction"] = label["instruction"]
        entry["answers"] += answers
    return yaml.safe_dump({"version": 1, "labels": list(merged.values())}, sort_keys=False)


def chooser() -> Any:
    replies, default, rules = load_reply_file(TEST_DIR / "support" / "robot_clip_replies.json")
    queue = deque(replies)

    def choose(body: dict[str, Any]) -> ScriptedReply:
        text = request_text(body)
        for needle, reply in rules:
            if needle in text:
                return reply
        return queue.popleft() if queue else (default or ScriptedReply())

    return choose


def evaluation_overhead(tmp: Path, pairs: int) -> dict[str, Any]:
    bag = tmp / "robot_clip"
    make_bag([ROBOT_CLIP], bag, MakeOptions(rate_hz=10.0))
    labels_file = tmp / "labels.yaml"
    labels_file.write_text(spanning_labels())
    scoring = RunScoring((labels_from_text(labels_file.read_text(), str(labels_file)),))
    tolerances = load_tolerances()
    rows: list[dict[str, Any]] = []
    with ScriptedServer(chooser()) as server:
        options = EvalOptions(
            server_url=server.base_url,
            tasks=TASKS,
            period_s=0.5,
            lock_step=True,
            progress=False,
            verbose=False,
            params=("max_retries:=0",),
        )
        for k in range(pairs + 1):  # the first pair warms caches (imports, the typestore), not kept
            for labelled in (k % 2 == 0, k % 2 == 1):
                out = tmp / f"run_{k}_{int(labelled)}"
                started = time.monotonic()
                run = run_bags([bag], out, options, tolerances, scoring=scoring if labelled else None)
                wall = time.monotonic() - started
                scored = run.result.scored
                row = {
                    "labels": labelled,
                    "wall_s": round(wall, 3),
                    "replay_s": round(run.seconds, 3),
                    "after_replay_s": round(wall - run.seconds, 3),  # judging, report, scoring
                    "requests": len(run.result.records),
                    "scoring_s": round(scored.seconds, 4) if scored else 0.0,
                    "labelled": len(scored.scores.grades) if scored else 0,
                    "load": round(os.getloadavg()[0], 2),
                }
                print(json.dumps(row), file=sys.stderr)
                if k:
                    rows.append(row)
    with_ = [r["wall_s"] for r in rows if r["labels"]]
    without = [r["wall_s"] for r in rows if not r["labels"]]
    scoring_s = [r["scoring_s"] for r in rows if r["labels"]]
    after_with = statistics.median(r["after_replay_s"] for r in rows if r["labels"])
    after_without = statistics.median(r["after_replay_s"] for r in rows if not r["labels"])
    return {
        "runs": rows,
        "after_replay_with_labels_median_s": after_with,
        "after_replay_without_median_s": after_without,
        "after_replay_added_share": round((after_with - after_without) / statistics.median(without), 5),
        "wall_with_labels_median_s": statistics.median(with_),
        "wall_without_median_s": statistics.median(without),
        "wall_ratio": round(statistics.median(with_) / statistics.median(without), 4),
        "scoring_median_s": statistics.median(scoring_s),
        "scoring_share": round(statistics.median(scoring_s) / statistics.median(with_), 5),
        "replay_without_range_s": [
            min(r["replay_s"] for r in rows if not r["labels"]),
            max(r["replay_s"] for r in rows if not r["labels"]),
        ],
    }


def leaderboard(tmp: Path, runs: int, requests: int) -> dict[str, Any]:
    folders = []
    labels_text = ""
    for i in range(runs):
        run = generated_run(requests, noise=0.02 * i, seed=i)
        folder = tmp / f"model_{i:02d}"
        folder.mkdir()
        write_records(run.records, folder / "results.jsonl")
        folders.append(folder)
        labels_text = run.labels_text  # the same truth for every run
    labels_file = tmp / "generated_labels.yaml"
    labels_file.write_text(labels_text)
    out = tmp / "board"
    started = time.monotonic()
    assert bag_main(["leaderboard", *map(str, folders), "-o", str(out), "--labels", str(labels_file)]) == 0
    rescored = time.monotonic() - started
    # one run scored and written as evaluate does (scores.json, labelled.jsonl), then the board from them
    one: list[float] = []
    labels = bind_labels([labels_from_text(labels_text, str(labels_file))], ["robot"])
    for folder in folders:
        from cosmos_reasoner_ros.bag.records import load_records

        records = load_records(folder)
        started = time.monotonic()
        write_scores(score_run(records, labels), folder, records, [str(labels_file)])
        one.append(time.monotonic() - started)
    started = time.monotonic()
    assert bag_main(["leaderboard", *map(str, folders), "-o", str(tmp / "board2")]) == 0
    from_files = time.monotonic() - started
    board = json.loads((out / "leaderboard.json").read_text())
    ade = [r["tasks"]["trajectory"]["metrics"]["ade_px"]["value"] for r in board["runs"]]
    return {
        "runs": runs,
        "requests_per_run": requests,
        "labelled_requests": runs * requests,
        "leaderboard_rescored_s": round(rescored, 3),
        "leaderboard_from_scores_json_s": round(from_files, 3),
        "one_run_scored_median_s": round(statistics.median(one), 4),
        "ade_px_in_noise_order": ade == sorted(ade),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    os.environ["ROS_DOMAIN_ID"] = bench_domain()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    figures: dict[str, Any] = {"cpu_cores": len(os.sched_getaffinity(0))}
    with tempfile.TemporaryDirectory(prefix="bench_scores_") as tmp:
        figures["leaderboard"] = leaderboard(Path(tmp), args.runs, args.requests)
        print(json.dumps(figures["leaderboard"]), file=sys.stderr)
        figures["evaluation"] = evaluation_overhead(Path(tmp), args.pairs)
    write_figures("scores", figures, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
