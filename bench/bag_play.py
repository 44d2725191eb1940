"""Bag benchmark: `make` throughput and `play` timing into a subscriber in another process.

make   the robot clip resampled to 30 Hz (644x476) into mcap as rgb8 and as jpeg: frames written per second.
play   that rgb8 bag played by `cosmos-reasoner-bag play` (reliable QoS) into a raw subscriber process,
       side by side with Fast DDS' default transports and with the shipped shared-memory profile
       (config/fastdds_shm.xml): messages delivered, publish lag (actual - scheduled) and arrival error
       (arrival offset against the recorded stamp offset, relative to the first message), median, p95 [ms].
Prints JSON on its last line and writes bench/results/bag_play.json.
    ./run exec python bench/bag_play.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from figures import write_figures
from support.paths import ROBOT_CLIP, SHM_PROFILE
from support.processes import module_cmd

CLIP = ROBOT_CLIP
PROFILE = SHM_PROFILE

from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag  # noqa: E402
from cosmos_reasoner_ros.percentiles import percentile  # noqa: E402
from cosmos_reasoner_ros.ros_compat import FASTDDS_PROFILE_VARIABLES, fastdds_profile_env  # noqa: E402


def bench_make(work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for encoding in ("rgb8", "jpeg"):
        t = time.perf_counter()
        made = make_bag([CLIP], work / f"make_{encoding}", MakeOptions(rate_hz=30.0, encoding=encoding))
        seconds = time.perf_counter() - t
        size = sum(p.stat().st_size for p in (work / f"make_{encoding}").iterdir())
        out[encoding] = {
            "frames": made.frames,
            "frames_per_s": round(made.frames / seconds, 1),
            "bag_mb": round(size / 1e6, 1),
        }
    return out


def bench_play(bag: Path, frames: int, work: Path, profile: Path | None) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("_ROS_WHEELS_BOOTSTRAP_COMPLETE", None)
    for variable in FASTDDS_PROFILE_VARIABLES:
        env.pop(variable, None)
    if profile is not None:
        env.update(fastdds_profile_env(profile))
    name = "shm" if profile else "default"
    received_file, stats_file = work / f"received_{name}.json", work / f"stats_{name}.json"
    sub = subprocess.Popen(
        [
            *module_cmd("support.bag_subscriber"),
            "--topic",
            "/camera/image_raw=sensor_msgs/msg/Image",
            "--count",
            str(frames),
            "--out",
            str(received_file),
            "--timeout",
            "60",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sub.stdout is not None and sub.stdout.readline().strip() == "ready"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "cosmos_reasoner_ros.bag.cli",
                "play",
                str(bag),
                "--topics",
                "/camera/image_raw",
                "--wait-for-subscribers",
                "60",
                "--stats",
                str(stats_file),
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        sub.wait(timeout=70)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    stats = json.loads(stats_file.read_text())
    received = json.loads(received_file.read_text())
    arrival = np.array([(t - received[0][2]) - (s - received[0][1]) / 1e9 for _, s, t in received])
    err = np.abs(arrival) * 1e3
    return {
        "published": stats["published"],
        "delivered": len(received),
        "publish_lag_median_ms": stats["lag_median_ms"],
        "publish_lag_p95_ms": stats["lag_p95_ms"],
        "arrival_error_median_ms": round(float(np.median(err)), 2),
        "arrival_error_p95_ms": round(percentile(err.tolist(), 0.95), 2),
    }


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench_bag_") as tmp:
        work = Path(tmp)
        make = bench_make(work)
        bag = work / "make_rgb8"
        play = {
            "default_transport": bench_play(bag, make["rgb8"]["frames"], work, None),
            "shm_profile": bench_play(bag, make["rgb8"]["frames"], work, PROFILE),
        }
    result = {"clip": "robotics_next_action.mp4 at 30 Hz, 644x476", "make": make, "play": play}
    write_figures("bag_play", result, indent=2)


if __name__ == "__main__":
    main()
