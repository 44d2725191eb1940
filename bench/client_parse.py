"""Client and parsing benchmark against the scripted server on 127.0.0.1: the client's overhead per
request next to a bare OpenAI SDK call (interleaved, same server, same answer), time to first token,
cancellation latency, and parse time per answer kind.

Prints the figures as JSON on its last line and writes them to bench/results/client_parse.json.
    ./run exec python bench/client_parse.py [--repeats 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import openai
from figures import write_figures
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.errors import RequestCancelled
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.parsing import parse_answer
from cosmos_reasoner_ros.reasoner.request_builder import RequestSettings, build_request
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog

TRAJECTORY = (
    "<think>\nThe gripper is at the lower left, the cup in the middle: up and right, then down.\n"
    "</think>\n\n```json\n"
    + json.dumps(
        [{"point_2d": [100 + 40 * i, 800 - 50 * i], "label": "gripper trajectory"} for i in range(10)]
    )
    + "\n```"
)
ANSWERS = {
    "points": TRAJECTORY,
    "boxes": "<think>\nTwo objects.\n</think>\n\n```json\n"
    + json.dumps(
        [
            {"bbox_2d": [100, 200, 300, 400], "label": "cup"},
            {"bbox_2d": [600, 100, 900, 500], "label": "bowl"},
        ]
    )
    + "\n```",
    "segments": "<think>\nThree phases.\n</think>\n\n"
    + json.dumps(
        [
            {"start": "00:00.00", "end": "00:02.50", "caption": "reach"},
            {"start": "00:02.50", "end": "00:04.00", "caption": "grasp"},
            {"start": 4.0, "end": 6.5, "caption": "lift"},
        ]
    ),
    "choice": "<think>\nThe ball passes through the table.\n</think>\n\n<answer>\n(B) No\n</answer>",
    "text": "<think>\nThe arm is above the cup.\n</think>\n\nClose the gripper around the cup.",
}


def _ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()

    catalog = TaskCatalog.load()
    request = build_request(
        catalog.render("trajectory", task="put the cup in the bowl"), [], RequestSettings()
    )
    reply = ScriptedReply(text=TRAJECTORY)
    results: dict[str, object] = {"repeats": args.repeats, "answer_chunks": len(TRAJECTORY.split())}

    with ScriptedServer(default=reply) as server:
        client = ReasonerClient(ClientSettings(base_url=server.base_url, model="scripted"))
        sdk = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)
        kwargs = {"model": "scripted", "messages": request.messages, **request.params}
        for stream in (False, True):
            ours, bare = [], []
            for i in range(args.repeats + 3):
                start = time.perf_counter()
                client.complete(request, stream=stream)
                mine = time.perf_counter() - start
                start = time.perf_counter()
                if stream:
                    for _ in sdk.chat.completions.create(
                        stream=True, stream_options={"include_usage": True}, **kwargs
                    ):
                        pass
                else:
                    sdk.chat.completions.create(**kwargs)
                theirs = time.perf_counter() - start
                if i >= 3:  # warm-up: connections, first imports
                    ours.append(mine)
                    bare.append(theirs)
            name = "stream" if stream else "no_stream"
            results[f"{name}_client_median_ms"] = _ms(ours)
            results[f"{name}_bare_sdk_median_ms"] = _ms(bare)
            results[f"{name}_overhead_median_ms"] = round(_ms(ours) - _ms(bare), 2)

        # Time to first token: the server waits 100 ms, then sends a chunk every 5 ms.
        server.default = ScriptedReply(text=TRAJECTORY, delay_s=0.1, chunk_delay_s=0.005)
        ttft, latency = [], []
        for _ in range(max(5, args.repeats // 4)):
            completion = client.complete(request)
            ttft.append(completion.ttft_s)
            latency.append(completion.latency_s)
        results["ttft_median_ms_server_delay_100ms"] = _ms(ttft)
        results["latency_median_ms_server_delay_100ms"] = _ms(latency)

        # Cancellation: from cancel.set() to RequestCancelled, mid-stream and before the first byte.
        for where, scripted in (
            ("mid_stream", ScriptedReply(text=TRAJECTORY, chunk_delay_s=0.05)),
            ("before_first_byte", ScriptedReply(delay_s=2.0)),
        ):
            server.default = scripted
            delays = []
            for _ in range(max(5, args.repeats // 4)):
                cancel = threading.Event()
                fired: list[float] = []

                def fire(event: threading.Event = cancel, stamps: list[float] = fired) -> None:
                    stamps.append(time.perf_counter())
                    event.set()

                timer = threading.Timer(0.15, fire)
                timer.start()
                try:
                    client.complete(request, cancel=cancel)
                except RequestCancelled:
                    delays.append(time.perf_counter() - fired[0])
                timer.join()
            results[f"cancel_{where}_median_ms"] = _ms(delays)
        client.close()

    for kind, text in ANSWERS.items():
        times = []
        for _ in range(args.repeats * 25):
            start = time.perf_counter()
            parse_answer(text, kind, width=1280, height=720)
            times.append(time.perf_counter() - start)
        results[f"parse_{kind}_median_us"] = round(statistics.median(times) * 1e6, 1)

    write_figures("client_parse", results, indent=2)


if __name__ == "__main__":
    main()
