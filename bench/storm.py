"""Storms on reasoner_node (issue 11): 200 ~/trigger calls at once with busy_policy reject and with replace,
then 20 concurrent ~/reason goals with every second one cancelled while its answer streams.

The node runs as `python -m cosmos_reasoner_ros.node` in its own process against a scripted server; one
camera at 10 Hz. Prints JSON on its last line and writes bench/results/storm.json.
    ./run exec python bench/storm.py [--calls 200] [--goals 20]
Goals: every call answered, every accepted request exactly one result, cancelled goals CANCELED.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from support.camera_publisher import camera_process
from support.load import Probe, node_process
from support.paths import BENCH_RESULTS, SHM_PROFILE
from support.processes import bench_domain, wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", bench_domain())
os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(SHM_PROFILE))

TOPIC = "/storm_cam/image_raw"
STREAMED = " ".join(f"word{i}" for i in range(60))


def run(reply: ScriptedReply, extra: dict[str, Any], action: str, count: int) -> dict[str, Any]:
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="storm-")))
        server = stack.enter_context(ScriptedServer(default=reply))
        stack.enter_context(camera_process(TOPIC, 320, 240, rate=10.0))
        params = {
            "cameras": ["front"],
            "camera": {"front": {"topic": TOPIC}},
            "server_url": server.base_url,
            "media_dir": str(work / "media"),
            "clip_seconds": 1.0,
            "max_retries": 0,
            "task": "next_action",
            **extra,
        }
        node = stack.enter_context(node_process(params, work))
        probe = Probe()
        stack.callback(probe.close)
        probe.wait_ready()
        wait_until(lambda: probe.frames_buffered() > 2, 60.0, "frames in the node")
        t0 = time.monotonic()
        storm = probe.trigger_storm(count) if action == "trigger" else probe.goal_storm(count, cancel_every=2)
        figures = {
            **storm.as_dict(),
            "seconds": round(time.monotonic() - t0, 2),
            "node_alive": node.proc.poll() is None,
        }
        figures["node_exit_code"], _ = node.stop()
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--goals", type=int, default=20)
    parser.add_argument(
        "--queue-depth", type=int, default=256, help="request_queue_depth (the node's default)"
    )
    parser.add_argument("--out", type=Path, default=BENCH_RESULTS / "storm.json")
    args = parser.parse_args()
    depth = args.queue_depth
    answer = ScriptedReply(text="ok", delay_s=0.5)
    figures: dict[str, Any] = {"benchmark": "storm", "request_queue_depth": depth}
    figures["trigger_reject"] = run(answer, {"request_queue_depth": depth}, "trigger", args.calls)
    figures["trigger_replace"] = run(
        answer, {"request_queue_depth": depth, "busy_policy": "replace"}, "trigger", args.calls
    )
    figures["goals_half_cancelled"] = run(
        ScriptedReply(text=STREAMED, chunk_delay_s=0.05),
        {"request_queue_depth": depth, "max_in_flight": args.goals},
        "goal",
        args.goals,
    )
    t, r, g = figures["trigger_reject"], figures["trigger_replace"], figures["goals_half_cancelled"]
    figures["met"] = (
        all(
            x["replies"] == args.calls and x["results_missing"] == 0 and x["results_duplicated"] == 0
            for x in (t, r)
        )
        and g["acknowledged"] == g["accepted"] == args.goals
        and g["statuses"].get("STATUS_CANCELED", 0)
        == g["cancels_sent"]
        == g["cancelled_with_cancelled_result"]
        and g["results_missing"] == 0
        and g["results_duplicated"] == 0
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
