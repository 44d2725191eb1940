"""The node's own CPU per camera (issue 40): reasoner_node processes side by side on the same cameras.

Three 640x480 rgb8 cameras at 15 Hz from other processes (the soak's scenario), a scripted server answering in
0.3 s, a timer trigger every second (`--period-s 0`: none, ingest only). Each variant is a node process of its
own (its own name) subscribed to the same camera topics, all running at once, so that the machine's load falls
on every variant alike: `--before PATH` (repeatable) names the package's sources of another commit (e.g.
`git archive <commit> cosmos_reasoner_ros | tar -x -C PATH`), run beside this checkout's. The CPU of each node
process (user + system, from /proc) is read over the same window, after a warm-up; several windows give the
medians and the ratio of each variant against this checkout's, window by window.
Prints JSON on its last line and writes bench/results/node_cpu.json (or --out).
    ./run exec python bench/node_cpu.py [--before /tmp/base] [--seconds 60] [--windows 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from support.camera_publisher import camera_process
from support.load import Probe, node_process
from support.paths import BENCH_RESULTS, ROOT, SHM_PROFILE
from support.processes import bench_domain, wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.ros_compat import fastdds_profile_env

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", bench_domain())
os.environ.update({k: os.environ.get(k, v) for k, v in fastdds_profile_env(SHM_PROFILE).items()})

CAMERAS = ("front", "left", "wrist")
WIDTH, HEIGHT, RATE = 640, 480, 15.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, action="append", default=[], help="sources of another commit")
    parser.add_argument("--label", action="append", default=[], help="a name for each --before")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each measured window")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--warmup-s", type=float, default=10.0)
    parser.add_argument("--period-s", type=float, default=1.0, help="trigger_period_s (0: no trigger)")
    parser.add_argument("--server-delay", type=float, default=0.3)
    parser.add_argument("--out", type=Path, default=BENCH_RESULTS / "node_cpu.json")
    args = parser.parse_args()
    labels = [*args.label, *(str(p) for p in args.before[len(args.label) :])]
    variants: list[tuple[str, Path | None]] = [
        ("this checkout", None),
        *zip(labels, args.before, strict=True),
    ]
    frame_mb = WIDTH * HEIGHT * 3 / 2**20
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="node-cpu-")))
        # `python -m` puts the working directory first on the node's path: from the checkout's root, the
        # checkout's package, whatever PYTHONPATH names first. The nodes start in the work folder instead.
        os.chdir(work)
        server = stack.enter_context(
            ScriptedServer(default=ScriptedReply(text="ok", delay_s=args.server_delay), record=False)
        )
        for cam in CAMERAS:
            stack.enter_context(camera_process(f"/{cam}/image_raw", WIDTH, HEIGHT, rate=RATE))
        nodes = []
        for index, (_label, source) in enumerate(variants):
            name = f"cpu_node_{index}"
            params = {
                "cameras": list(CAMERAS),
                "camera": {cam: {"topic": f"/{cam}/image_raw"} for cam in CAMERAS},
                "server_url": server.base_url,
                "media_dir": str(work / name / "media"),
                "media_max_files": 50,
                "buffer_seconds": 30.0,
                "buffer_max_mb": round(30.0 * 4.0 * frame_mb + 2 * frame_mb, 1),
                "trigger_period_s": args.period_s,
                "max_retries": 0,
            }
            source = source or ROOT
            nodes.append(stack.enter_context(node_process(params, work / name, name, source_root=source)))
            probe = Probe(name)
            stack.callback(probe.close)
            probe.wait_ready()
            wait_until(lambda p=probe: p.frames_buffered() > 0, 60.0, f"frames in {name}")
        time.sleep(args.warmup_s)
        windows: list[dict[str, Any]] = []
        for _ in range(args.windows):
            start, cpu0 = time.monotonic(), [n.cpu_s() for n in nodes]
            time.sleep(args.seconds)
            cpu1, wall = [n.cpu_s() for n in nodes], time.monotonic() - start
            cores = [(b - a) / wall for a, b in zip(cpu0, cpu1, strict=True)]
            windows.append(
                {
                    "wall_s": round(wall, 1),
                    "load_average_1min": round(os.getloadavg()[0], 2),
                    "node_cpu_cores": {
                        label: round(c, 4) for (label, _), c in zip(variants, cores, strict=True)
                    },
                }
            )
            print(json.dumps(windows[-1]), flush=True)
        for node in nodes:
            node.stop()
    summary: dict[str, Any] = {
        "benchmark": "node_cpu",
        "cameras": f"{len(CAMERAS)} x {WIDTH}x{HEIGHT} rgb8 at {RATE:g} Hz (other processes, SHM profile)",
        "trigger_period_s": args.period_s,
        "server_delay_s": args.server_delay,
        "window_s": args.seconds,
        "windows": windows,
        "cpus": os.cpu_count(),
        "variants": {},
    }
    mine = [w["node_cpu_cores"]["this checkout"] for w in windows]
    for label, _ in variants:
        cores = [w["node_cpu_cores"][label] for w in windows]
        entry: dict[str, Any] = {
            "node_cpu_cores_median": round(statistics.median(cores), 4),
            "per_camera_percent_of_a_core_median": round(100 * statistics.median(cores) / len(CAMERAS), 1),
        }
        if label != "this checkout":
            ratios = [m / c for m, c in zip(mine, cores, strict=True) if c > 0]
            entry["this_checkout_vs_it_median_ratio"] = (
                round(statistics.median(ratios), 3) if ratios else None
            )
        summary["variants"][label] = entry
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
