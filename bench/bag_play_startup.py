"""Bag benchmark: what `cosmos-reasoner-bag play` of a 4.5 s recording costs beyond its 4.5 s (a user measured
12-14 s). Side by side, alternating, in one run: the wall time of `play` as a process (46 frames of 320x240
rgb8 and CameraInfo at 10 Hz, no subscriber), and the import of the play verb's modules now against the same
plus the reasoner package (openai and the parser), which play imported before through judge.metrics. Medians
and their ratio go to bench/results/bag_play_startup.json.
    ./run exec python bench/bag_play_startup.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from support.bags import camera_messages, write_mcap_ros2
from support.paths import BENCH_RESULTS

IMPORT_NOW = "import cosmos_reasoner_ros.bag.cli, cosmos_reasoner_ros.bag.replay.play"
IMPORT_BEFORE = IMPORT_NOW + ", cosmos_reasoner_ros.reasoner"


def _seconds(cmd: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "_ROS_WHEELS_BOOTSTRAP_COMPLETE"}
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=300)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-play-startup-") as tmp:
        bag = write_mcap_ros2(
            Path(tmp) / "b45", camera_messages(frames=46, kinds=("raw", "info"), width=320, height=240), 9
        )
        play = [sys.executable, "-m", "cosmos_reasoner_ros.bag.cli", "play", str(bag), "--drain", "0"]
        times: dict[str, list[float]] = {"play": [], "import_now": [], "import_before": []}
        for _ in range(args.rounds):
            times["import_now"].append(_seconds([sys.executable, "-c", IMPORT_NOW]))
            times["import_before"].append(_seconds([sys.executable, "-c", IMPORT_BEFORE]))
            times["play"].append(_seconds(play))
    medians = {k: round(statistics.median(v), 3) for k, v in times.items()}
    result = {
        "recording_s": 4.5,
        "rounds": args.rounds,
        "median_s": medians,
        "play_overhead_s": round(medians["play"] - 4.5, 3),
        "import_ratio_before_to_now": round(medians["import_before"] / medians["import_now"], 2),
        "load_average": os.getloadavg()[0],
        "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
    }
    BENCH_RESULTS.mkdir(parents=True, exist_ok=True)
    (BENCH_RESULTS / "bag_play_startup.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
