"""Soak of reasoner_node (issue 11's scenario): three 640x480 cameras at 15 Hz from other processes, a timer
trigger every second, a scripted server answering in 0.3 s, for a configurable duration (default 10 minutes).

The node runs as `python -m cosmos_reasoner_ros.node` in its own process; its RSS and CPU are read from /proc.
Prints JSON on its last line and writes bench/results/soak.json.
    ./run exec python bench/soak.py [--minutes 10] [--warmup-s 60]
Goals: 0 missing and 0 duplicate results; RSS at most the buffer bound + 150 MB; growth after warm-up <= 10 MB
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

from support.camera_publisher import camera_process
from support.load import Probe, media_usage, node_process, sequence_gaps
from support.paths import BENCH_RESULTS, SHM_PROFILE
from support.processes import bench_domain, wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.ros_compat import fastdds_profile_env

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", bench_domain())
# Fast DDS 2 (Jazzy) and 3 (Kilted) read the profile from different variables: this one's, unless set.
os.environ.update({k: os.environ.get(k, v) for k, v in fastdds_profile_env(SHM_PROFILE).items()})

CAMERAS = ("front", "left", "wrist")
WIDTH, HEIGHT, RATE = 640, 480, 15.0
MEDIA_MAX_FILES = 50  # a trigger a second fills it in the first minute; the rest runs at the bound


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--period-s", type=float, default=1.0, help="trigger_period_s")
    parser.add_argument("--server-delay", type=float, default=0.3)
    parser.add_argument("--buffer-seconds", type=float, default=30.0)
    parser.add_argument("--sample-every-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=BENCH_RESULTS / "soak.json")
    args = parser.parse_args()
    duration = args.minutes * 60.0
    # The buffer bound is set to what buffer_seconds of frames take (4 fps x 640x480x3), so that the goal
    # "RSS <= bound + 150 MB" is measured against a bound the node actually fills.
    frame_mb = WIDTH * HEIGHT * 3 / 2**20
    per_camera_mb = round(args.buffer_seconds * 4.0 * frame_mb + 2 * frame_mb, 1)
    bound_mb = per_camera_mb * len(CAMERAS)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="soak-")))
        media = work / "media"
        server = stack.enter_context(
            ScriptedServer(default=ScriptedReply(text="ok", delay_s=args.server_delay), record=False)
        )
        for cam in CAMERAS:
            stack.enter_context(camera_process(f"/{cam}/image_raw", WIDTH, HEIGHT, rate=RATE))
        params = {
            "cameras": list(CAMERAS),
            "camera": {cam: {"topic": f"/{cam}/image_raw"} for cam in CAMERAS},
            "server_url": server.base_url,
            "media_dir": str(media),
            "media_max_files": MEDIA_MAX_FILES,
            "buffer_seconds": args.buffer_seconds,
            "buffer_max_mb": per_camera_mb,
            "trigger_period_s": args.period_s,
            "max_retries": 0,
        }
        node = stack.enter_context(node_process(params, work))
        probe = Probe()
        stack.callback(probe.close)
        probe.wait_ready()
        wait_until(lambda: probe.frames_buffered() > 0, 60.0, "frames in the node")
        start, cpu0 = time.monotonic(), node.cpu_s()
        samples: list[tuple[float, float]] = [(0.0, node.rss_mb())]
        breakdown = [{"t": 0.0, **node.memory_mb()}]
        media_files_seen = [media_usage(media)[0]]  # finished clips at each sample: within media_max_files
        while (elapsed := time.monotonic() - start) < duration:
            time.sleep(min(args.sample_every_s, duration - elapsed))
            samples.append((round(time.monotonic() - start, 1), round(node.rss_mb(), 1)))
            breakdown.append({"t": samples[-1][0], **node.memory_mb()})
            media_files_seen.append(media_usage(media)[0])
        cpu = node.cpu_s() - cpu0
        wall = time.monotonic() - start
        time.sleep(2.0)  # the last results arrive
        with probe._lock:
            ids = list(probe.results)
            kinds: dict[str, int] = {}
            for rid in ids:
                kinds[probe.kinds[rid]] = kinds.get(probe.kinds[rid], 0) + 1
            duplicates_by_count = sum(c > 1 for c in probe.results.values())
        files, nbytes, _temporaries = media_usage(media)
        code, stop_s = node.stop()
    missing, duplicated = sequence_gaps(ids)
    warm = [rss for t, rss in samples if t >= args.warmup_s]
    rss_warm = warm[0] if warm else samples[-1][1]
    figures = {
        "benchmark": "soak",
        "minutes": args.minutes,
        "cameras": f"{len(CAMERAS)} x {WIDTH}x{HEIGHT} rgb8 at {RATE:g} Hz",
        "trigger_period_s": args.period_s,
        "server_delay_s": args.server_delay,
        "timer_ticks_expected": int(wall / args.period_s),
        "results": len(ids),
        "result_kinds": kinds,
        "missing_results": missing,
        "duplicate_results": duplicated + duplicates_by_count,
        "buffer_bound_mb": round(bound_mb, 1),
        "rss_start_mb": samples[0][1],
        "rss_after_warmup_mb": rss_warm,
        "rss_end_mb": samples[-1][1],
        "rss_max_mb": max(rss for _, rss in samples),
        "rss_growth_after_warmup_mb": round(samples[-1][1] - rss_warm, 1),
        "rss_median_after_warmup_mb": round(statistics.median(warm), 1) if warm else None,
        "rss_samples": samples,
        "memory_breakdown_mb": breakdown,
        "media_files": files,
        "media_bytes": nbytes,
        "media_files_max_seen": max(media_files_seen),
        "node_cpu_cores": round(cpu / wall, 3),
        "node_exit_code": code,
        "node_stop_s": round(stop_s, 2),
        "goals": {
            "missing": 0,
            "duplicates": 0,
            "rss_max_mb": round(bound_mb + 150, 1),
            "growth_after_warmup_mb": 10,
            "media_files_max": MEDIA_MAX_FILES,
        },
    }
    # RSS also counts pages the node shares: libraries, and the cameras' Fast DDS shared-memory segments it
    # maps to read their images (up to segment_size per publisher, as the publishers cycle through them).
    # The node's own memory is the anonymous part.
    own = [b["RssAnon"] for b in breakdown if b["t"] >= args.warmup_s] or [breakdown[-1]["RssAnon"]]
    figures["own_memory_after_warmup_mb"] = own[0]
    figures["own_memory_max_mb"] = max(b["RssAnon"] for b in breakdown)
    figures["own_memory_growth_after_warmup_mb"] = round(breakdown[-1]["RssAnon"] - own[0], 1)
    figures["shared_memory_end_mb"] = breakdown[-1]["RssShmem"]
    figures["libraries_mb"] = breakdown[-1]["RssFile"]
    counted = missing == 0 and figures["duplicate_results"] == 0
    figures["met_on_rss"] = (
        counted and figures["rss_max_mb"] <= bound_mb + 150 and figures["rss_growth_after_warmup_mb"] <= 10
    )
    figures["met_on_own_memory"] = (
        counted
        and figures["own_memory_max_mb"] <= bound_mb + 150
        and figures["own_memory_growth_after_warmup_mb"] <= 10
    )
    figures["met_media_bound"] = figures["media_files_max_seen"] <= MEDIA_MAX_FILES
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps({k: v for k, v in figures.items() if k not in ("rss_samples", "memory_breakdown_mb")}))


if __name__ == "__main__":
    main()
