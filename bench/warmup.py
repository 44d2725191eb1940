"""A robot's first decision after the server is READY, with and without the supervisor's warm-up, on the vLLM
CPU tier (the tiny checkpoint through cosmos-reasoner-server).

Each round starts a fresh server with `warmup: false` and one with `warmup: true` (order alternating by
round). Once READY, the node-shaped requests a robot makes: next_action about a clip (video, streamed, 32
tokens) and a structured trajectory on a frame (image, its JSON schema), alternating, 11 of each; every clip
and frame is new (the frames of the robot clip rotated or taken in turn), as a robot's are, so no request
finds another's media or prompt in a cache. Per kind: the first request's latency and time to first token
against the median of the next ten (goal: first <= 1.5x). Prints JSON on its last line and writes
bench/results/warmup.json.
    ./run exec python bench/warmup.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import cv2
from figures import write_figures
from support import vllm_tier
from support.paths import ROBOT_CLIP

from cosmos_reasoner_ros.clips import MediaRef
from cosmos_reasoner_ros.reasoner import (
    ClientSettings,
    ReasonerClient,
    RequestSettings,
    TaskCatalog,
    build_request,
)

REQUESTS = 11
TOKENS = 32


def frames() -> list[Any]:
    capture = cv2.VideoCapture(str(ROBOT_CLIP))
    out = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        out.append(frame)
    capture.release()
    return out


def media(media_dir: Path, n: int) -> list[tuple[MediaRef, MediaRef]]:
    """n (clip, frame) pairs, each new: the clip's frames rotated by k, the k-th frame."""
    pictures = frames()
    height, width = pictures[0].shape[:2]
    out = []
    for k in range(n):
        clip = media_dir / f"bench-clip-{k}.mp4"
        writer = cv2.VideoWriter(str(clip), cv2.VideoWriter.fourcc(*"mp4v"), 4.0, (width, height))
        for frame in pictures[k:] + pictures[:k]:
            writer.write(frame)
        writer.release()
        image = media_dir / f"bench-frame-{k}.jpg"
        cv2.imwrite(str(image), pictures[k % len(pictures)])
        out.append(
            (
                MediaRef(
                    "video",
                    clip.as_uri(),
                    clip,
                    "video/mp4",
                    clip.stat().st_size,
                    0.0,
                    width,
                    height,
                    fps=4.0,
                ),
                MediaRef(
                    "image", image.as_uri(), image, "image/jpeg", image.stat().st_size, 0.0, width, height
                ),
            )
        )
    return out


def first_decisions(server: vllm_tier.SupervisedServer) -> dict[str, Any]:
    assert server.media_dir is not None
    catalog = TaskCatalog.load()
    settings = RequestSettings(structured_output=True, max_tokens=TOKENS)
    pairs = media(server.media_dir, REQUESTS)
    series: dict[str, list[tuple[float, float]]] = {"next_action": [], "trajectory": []}
    with ReasonerClient(ClientSettings(base_url=server.base_url, read_timeout_s=300)) as client:
        client.model_id()  # /v1/models once, as the node does when the server becomes healthy
        for clip, image in pairs:
            video = build_request(catalog.render("next_action"), [clip], settings)
            video.params["extra_body"]["min_tokens"] = TOKENS  # the same decoding work every time
            done = client.complete(video, stream=True)
            series["next_action"].append((done.latency_s, done.ttft_s))
            structured = build_request(
                catalog.render("trajectory", task="put the charger in the box"), [image], settings
            )
            done = client.complete(structured, stream=True)
            series["trajectory"].append((done.latency_s, done.ttft_s))
    out: dict[str, Any] = {}
    for kind, rows in series.items():
        first, rest = rows[0], rows[1:]
        latency, ttft = statistics.median(r[0] for r in rest), statistics.median(r[1] for r in rest)
        out[kind] = {
            "first_s": round(first[0], 3),
            "first_ttft_s": round(first[1], 3),
            "next_median_s": round(latency, 3),
            "next_median_ttft_s": round(ttft, 3),
            "latency_ratio": round(first[0] / latency, 2),
            "ttft_ratio": round(first[1] / ttft, 2),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    reason = vllm_tier.missing_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    figures: dict[str, Any] = {"cpu_cores": len(os.sched_getaffinity(0)), "load_before": os.getloadavg()[0]}
    runs: dict[str, list[dict[str, Any]]] = {"without_warmup": [], "with_warmup": []}
    for round_ in range(args.rounds):
        order = [False, True] if round_ % 2 == 0 else [True, False]
        for warm in order:
            name = "with_warmup" if warm else "without_warmup"
            with vllm_tier.SupervisedServer(overrides={"warmup": warm}) as server:
                result = first_decisions(server)
                result["start_s"] = round(server.start_s, 1)
                log = server.log_path.read_text()
                result["warmup_line"] = next(
                    (
                        line.split("] ", 1)[-1]
                        for line in log.splitlines()
                        if "warm-up: " in line and "requests in" in line
                    ),
                    "",
                )
            runs[name].append(result)
            print(f"{name}: {json.dumps(result)}", file=sys.stderr)
    figures.update(runs)
    figures["load_after"] = os.getloadavg()[0]
    write_figures("warmup", figures, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
