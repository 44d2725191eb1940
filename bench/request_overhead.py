"""Request-path overhead of reasoner_node: 8 s 640x480 clip, one camera, scripted server with a fixed delay.

Measures, per trigger through the ~/trigger service: trigger -> request on the wire (arrival at the server),
split into clip encoding and the rest; response received -> all messages published; and the end-to-end
time through the node against a direct `openai` call sending the same clip file to the same server,
alternating in one run. The camera is a separate process (shared-memory Fast DDS profile); the node runs in
this process.
Prints JSON on its last line and writes bench/results/request_overhead.json.
    ./run exec python bench/request_overhead.py [--pairs 20] [--server-delay 1.0] [--codec auto]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from figures import write_figures
from support.paths import SHM_PROFILE
from support.processes import bench_domain

from cosmos_reasoner_ros.percentiles import percentile
from cosmos_reasoner_ros.ros_compat import fastdds_profile_env

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", bench_domain())
# Fast DDS 2 (Jazzy) and 3 (Kilted) read the profile from different variables: this one's, unless set.
os.environ.update({k: os.environ.get(k, v) for k, v in fastdds_profile_env(SHM_PROFILE).items()})

import openai
import rclpy
from cosmos_reasoner_ros.msg import ReasonerResult
from rclpy.context import Context
from rclpy.executors import MultiThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_srvs.srv import Trigger
from support.camera_publisher import camera_process
from support.collector import Collector
from support.processes import wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.node.reasoner_node import ReasonerNode

ANSWER = "<think>\nThe gripper holds the cup above the table.\n</think>\n\nPlace the cup on the shelf."


def stats_ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = percentile(ordered, 0.95)
    return {
        "median": round(1000 * statistics.median(ordered), 2),
        "p95": round(1000 * p95, 2),
        "max": round(1000 * ordered[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40, help="node request + direct request pairs")
    parser.add_argument(
        "--server-delay", type=float, default=1.0, help="[s] fixed delay of the scripted server"
    )
    parser.add_argument("--clip-seconds", type=float, default=8.0)
    parser.add_argument("--sample-fps", type=float, default=4.0)
    parser.add_argument("--camera-rate", type=float, default=15.0)
    parser.add_argument("--codec", default="auto")
    args = parser.parse_args()

    arrivals: dict[str, float] = {}  # prompt marker -> time.monotonic() when the request reached the server
    lock = threading.Lock()

    def reply(body: dict[str, Any]) -> ScriptedReply:
        now = time.monotonic()
        with lock:
            arrivals[str(len(arrivals))] = now
        return ScriptedReply(text=ANSWER, delay_s=args.server_delay)

    media = Path(tempfile.mkdtemp(prefix="request_overhead_"))
    rows: dict[str, list[float]] = {
        k: [] for k in ("wire", "encode", "wire_no_encode", "publish", "node", "direct")
    }
    frames_per_clip: list[int] = []
    new_frames: list[int] = []  # frames of a clip not encoded for the one before (about 4 per second between)
    with (
        ScriptedServer(reply) as server,
        camera_process("/bench_cam/image_raw", 640, 480, rate=args.camera_rate),
    ):
        context = Context()
        rclpy.init(context=context)
        params = {
            "cameras": ["front"],
            "camera.front.topic": "/bench_cam/image_raw",
            "server_url": server.base_url,
            "media_dir": str(media),
            "clip_seconds": args.clip_seconds,
            "buffer_seconds": args.clip_seconds + 4,
            "sample_fps": args.sample_fps,
            "max_long_side": 640,
            "codec": args.codec,
            "task": "next_action",
            "max_retries": 0,
            "request_timeout_s": 30.0,
        }
        node = ReasonerNode(
            parameter_overrides=[Parameter(k, value=v) for k, v in params.items()], context=context
        )
        probe = rclpy.create_node("bench_probe", context=context)
        results = Collector()
        probe.create_subscription(
            ReasonerResult,
            "/reasoner_node/result",
            results,
            QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE),
        )
        trigger = probe.create_client(Trigger, "/reasoner_node/trigger")
        executor = MultiThreadedExecutor(
            num_threads=node.executor_threads + 1, context=context
        )  # + the probe
        executor.add_node(node)
        executor.add_node(probe)
        spin = threading.Thread(target=executor.spin, daemon=True)
        spin.start()
        sdk = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)
        try:
            assert trigger.wait_for_service(timeout_sec=30.0)
            wait_until(
                lambda: node.buffers["front"].stats().fill_seconds >= args.clip_seconds,
                60.0,
                f"{args.clip_seconds} s of frames",
            )
            for i in range(args.pairs + 1):  # the first pair warms up connections and codecs
                # Through the node: trigger -> result received by a subscriber.
                n_before = len(arrivals)
                t0 = time.monotonic()
                future = trigger.call_async(Trigger.Request())
                response = wait_until(
                    lambda f=future: f.result() if f.done() else None, 30.0, "trigger response"
                )
                rid = response.message.split()[0]
                result = results.wait_for(
                    lambda items, rid=rid: next((r for r in items if r.request_id == rid), None),
                    60.0,
                    "result",
                )
                t_node = time.monotonic() - t0
                assert result.success, (result.error_kind, result.error)
                # The result may reach the subscriber before the node has published its other messages.
                outcome, published_at = wait_until(
                    lambda rid=result.request_id: next(
                        (o for o in reversed(node.recent) if o[0].request_id == rid), None
                    ),
                    10.0,
                    "the node's record of the request",
                )
                wire = arrivals[str(n_before)] - t0
                encode = sum(m.encode_s for m in outcome.media)
                assert outcome.timings is not None and outcome.timings.response_received is not None

                # Directly: the same clip file, the same prompt, the same server.
                body = server.requests[-1]
                t1 = time.monotonic()
                stream = sdk.chat.completions.create(model="scripted", messages=body["messages"], stream=True)
                text = "".join((c.choices[0].delta.content or "") for c in stream if c.choices)
                t_direct = time.monotonic() - t1
                assert text == ANSWER
                if i == 0:
                    continue
                rows["wire"].append(wire)
                rows["encode"].append(encode)
                rows["wire_no_encode"].append(wire - encode)
                rows["publish"].append(published_at - outcome.timings.response_received)
                rows["node"].append(t_node)
                rows["direct"].append(t_direct)
                frames_per_clip.append(outcome.clip_frames)
                new_frames.append(sum(m.frames - m.reused_frames for m in outcome.media))
        finally:
            sdk.close()
            executor.shutdown()
            node.destroy_node()
            probe.destroy_node()
            rclpy.shutdown(context=context)
            spin.join(10)

    ratios = [n / d for n, d in zip(rows["node"], rows["direct"], strict=True)]
    figures = {
        "benchmark": "request_overhead",
        "clip": {
            "seconds": args.clip_seconds,
            "width": 640,
            "height": 480,
            "sample_fps": args.sample_fps,
            "frames": statistics.median(frames_per_clip),
            "codec": args.codec,
            "new_frames_per_clip": {"median": statistics.median(new_frames), "max": max(new_frames)},
        },
        "server_delay_s": args.server_delay,
        "pairs": args.pairs,
        "trigger_to_wire_ms": stats_ms(rows["wire"]),
        "of_which_encode_ms": stats_ms(rows["encode"]),
        "trigger_to_wire_without_encode_ms": stats_ms(rows["wire_no_encode"]),
        "response_to_published_ms": stats_ms(rows["publish"]),
        "node_end_to_end_s": round(statistics.median(rows["node"]), 4),
        "direct_openai_end_to_end_s": round(statistics.median(rows["direct"]), 4),
        "ratio_median": round(statistics.median(ratios), 4),
        "ratio_of_medians": round(statistics.median(rows["node"]) / statistics.median(rows["direct"]), 4),
        "goals": {"overhead_p95_ms": 50, "ratio": 1.05},
    }
    write_figures("request_overhead", figures, indent=2)


if __name__ == "__main__":
    main()
