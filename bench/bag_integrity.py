"""Bag benchmark: the whole-bag check before a replay (files/integrity.py) on a long recording.

A robot-like camera bag written by the project (MCAP with chunk and data CRCs): the robot clip repeated for
5 minutes at 15 Hz, 644x476 rgb8 images with CameraInfo and synthetic 16UC1 depth. The check as it is now
(every CRC, count and index; messages deserialized where no CRC protects them, else the first of each topic
per file) against the check that also deserializes every message of the replayed topics (what it did before,
`verify(..., everything=True)`), alternating, three rounds each: seconds, median and ratio. Then the replay
reads the bag once more. Prints JSON on its last line and writes bench/results/bag_integrity.json.
    ./run exec python bench/bag_integrity.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from support.paths import BENCH_RESULTS, ROBOT_CLIP

from cosmos_reasoner_ros.bag.files.integrity import verify
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
from cosmos_reasoner_ros.bag.files.reader import BagReader

REPEATS = 47  # x 6.4 s of the robot clip: 5 minutes
ROUNDS = 3
TOPICS = ["/camera/image_raw", "/camera/camera_info", "/camera/depth/image_raw"]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-integrity-") as tmp:
        bag = Path(tmp) / "long"
        t = time.perf_counter()
        made = make_bag([ROBOT_CLIP] * REPEATS, bag, MakeOptions(rate_hz=15.0, depth="plane"))
        make_s = time.perf_counter() - t
        size = sum(p.stat().st_size for p in bag.iterdir())
        seconds: dict[str, list[float]] = {"now": [], "everything": []}
        with BagReader(bag) as reader:
            for _ in range(ROUNDS):
                for mode in ("everything", "now"):
                    t = time.perf_counter()
                    result = verify(reader, TOPICS, everything=mode == "everything")
                    seconds[mode].append(time.perf_counter() - t)
                    assert not result.problems, result.problems
            t = time.perf_counter()
            read = sum(1 for _ in reader.messages(TOPICS))
            read_s = time.perf_counter() - t
    now, everything = statistics.median(seconds["now"]), statistics.median(seconds["everything"])
    out: dict[str, Any] = {
        "bag": {
            "duration_s": round(made.duration_s, 1),
            "frames": made.frames,
            "messages": read,
            "size_mb": round(size / 1e6, 1),
            "make_s": round(make_s, 1),
        },
        "check_s": {mode: [round(s, 2) for s in values] for mode, values in seconds.items()},
        "check_median_s": {"now": round(now, 2), "everything": round(everything, 2)},
        "ratio_now_to_everything": round(now / everything, 3),
        "replay_read_s": round(read_s, 2),
    }
    BENCH_RESULTS.mkdir(parents=True, exist_ok=True)
    (BENCH_RESULTS / "bag_integrity.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
