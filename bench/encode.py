"""Encode benchmark: an 8 s clip at 4 fps, 640x480, from the real robot clip, written to a file per codec.

cold: every frame new to the writer (the first trigger, or triggers further apart than the clip); the goal
applies to it. sliding: a trigger every second of the stream, so 4 of the 32 frames are new and the others
were encoded for the clip before (the writer keeps each buffered frame's packet). mp4v-opencv is OpenCV's
writer, what a machine without PyAV gets; it encodes every clip whole.
Prints the figures as JSON on its last line and writes them to bench/results/encode.json.
Goal: cold median <= 40 ms.
    ./run exec python bench/encode.py [--repeats 15] [--seconds 8] [--fps 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from figures import write_figures
from support.paths import ROBOT_CLIP

from cosmos_reasoner_ros.bag.files.make import source_frames
from cosmos_reasoner_ros.clips.clip_buffer import Clip
from cosmos_reasoner_ros.clips.clip_writer import ClipWriter, h264_available
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.media_store import MediaStore, RetentionPolicy

CLIP = ROBOT_CLIP
GOAL_MS = 40.0


def real_frames(count: int, width: int, height: int) -> list[np.ndarray]:
    size = (width, height)
    frames = [cv2.resize(image, size, interpolation=cv2.INTER_AREA) for _, image in source_frames(CLIP)]
    return [frames[i % len(frames)] for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--fps", type=float, default=4.0)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    args = parser.parse_args()

    count = round(args.seconds * args.fps)
    step = max(1, round(args.fps))  # frames per second of stream between sliding triggers
    images = real_frames(count + step * args.repeats, args.width, args.height)
    period = round(1e9 / args.fps)

    def clip_of(first: int) -> Clip:
        # New Frame objects: to the writer these are frames it has never seen.
        frames = tuple(Frame("bench", (first + i) * period, images[first + i]) for i in range(count))
        return Clip(
            "bench", frames, frames[0].stamp_ns, frames[-1].stamp_ns, args.fps, args.width, args.height
        )

    codecs = ["h264", "mp4v", "mp4v-opencv"] if h264_available() else ["mp4v-opencv"]
    results: dict[str, dict[str, float | int]] = {}
    with tempfile.TemporaryDirectory(prefix="crr-bench-encode-") as tmp:
        store = MediaStore(Path(tmp) / "media", RetentionPolicy(max_files=4, max_bytes=0, max_age_s=0))
        for codec in codecs:
            opencv = codec.endswith("-opencv")  # what a machine without PyAV gets
            writer = ClipWriter(
                store, codec=codec.removesuffix("-opencv"), backend="opencv" if opencv else "pyav"
            )
            writer.write_clip(clip_of(0))  # warm-up: encoder libraries load on first use
            cold, cold_cpu, sizes = [], [], []
            for _ in range(args.repeats):
                clip = clip_of(0)
                cpu_start = time.process_time()
                ref = writer.write_clip(clip)
                cold_cpu.append((time.process_time() - cpu_start) * 1000)
                cold.append(ref.encode_s * 1000)
                sizes.append(ref.size_bytes)
                assert ref.reused_frames == 0
            # Sliding: consecutive triggers one second of stream apart share all but `step` frames.
            stream = [Frame("bench", i * period, img) for i, img in enumerate(images)]
            sliding, reused = [], []
            for k in range(args.repeats + 1):
                frames = tuple(stream[k * step : k * step + count])
                ref = writer.write_clip(
                    Clip(
                        "bench",
                        frames,
                        frames[0].stamp_ns,
                        frames[-1].stamp_ns,
                        args.fps,
                        args.width,
                        args.height,
                    )
                )
                if k:  # the first one is cold
                    sliding.append(ref.encode_s * 1000)
                    reused.append(ref.reused_frames)
            writer.close()
            results[codec] = {
                "median_ms": round(statistics.median(cold), 1),
                "median_cpu_ms": round(statistics.median(cold_cpu), 1),
                "min_ms": round(min(cold), 1),
                "max_ms": round(max(cold), 1),
                "sliding_median_ms": round(statistics.median(sliding), 1),
                "sliding_max_ms": round(max(sliding), 1),
                "sliding_reused_frames": int(statistics.median(reused)),
                "size_bytes": int(statistics.median(sizes)),
                "frames": count,
            }
    summary = {
        "benchmark": "encode",
        "clip": f"{args.seconds:g} s at {args.fps:g} fps, {args.width}x{args.height}, {count} frames, file",
        "repeats": args.repeats,
        "load_average_1min": round(os.getloadavg()[0], 2),  # other processes on the machine
        "cpus": os.cpu_count(),
        "goal_median_ms": GOAL_MS,
        "codecs": results,
        "goal_met_cold": {codec: r["median_ms"] <= GOAL_MS for codec, r in results.items()},
    }
    write_figures("encode", summary, indent=2)


if __name__ == "__main__":
    main()
