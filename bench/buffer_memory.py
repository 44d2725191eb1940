"""Buffer memory benchmark: 10 minutes of three 1920x1080 rgb8 streams at 30 Hz through wants()/add().

Stamps are fabricated (no sleeping: fed as fast as possible); every wanted frame is a fresh 1080p array, as
the decoder would allocate it. Reports the buffers' bytes and the process's resident memory against the
configured bound. Prints JSON on its last line and writes bench/results/buffer_memory.json.
    ./run exec python bench/buffer_memory.py [--minutes 10] [--max-seconds 30] [--max-mib-per-camera 64]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cv2
from figures import write_figures
from support.paths import ROBOT_CLIP

from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.multi_camera import MultiCameraBuffer

CLIP = ROBOT_CLIP
MIB = 1024 * 1024


def rss_mib() -> tuple[float, float]:
    """(current, peak) resident set size of this process, from /proc."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--cameras", type=int, default=3)
    parser.add_argument("--rate-hz", type=float, default=30.0)
    parser.add_argument("--sample-fps", type=float, default=4.0)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--max-mib-per-camera", type=float, default=64.0)
    parser.add_argument("--max-long-side", type=int, default=1280)
    args = parser.parse_args()

    cap = cv2.VideoCapture(str(CLIP))
    ok, bgr = cap.read()
    cap.release()
    if not ok:
        raise SystemExit(f"cannot read {CLIP}")
    source = cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (1920, 1080))
    names = [f"cam{i}" for i in range(args.cameras)]
    bound = int(args.max_mib_per_camera * MIB)
    multi = MultiCameraBuffer.create(names, args.sample_fps, args.max_seconds, bound, args.max_long_side)
    baseline_rss, _ = rss_mib()

    period = round(1e9 / args.rate_hz)
    messages = round(args.minutes * 60 * args.rate_hz)
    start_ns = 1_700_000_000 * 1_000_000_000
    samples = []
    started = time.perf_counter()
    for i in range(messages):
        for index, name in enumerate(names):
            stamp = start_ns + i * period + index * 3_000_000  # cameras are not in phase
            buffer = multi[name]
            if buffer.wants(stamp):
                buffer.add(Frame(name, stamp, source.copy()))  # a fresh decode per kept frame
        if i % round(args.rate_hz * 30) == 0:
            samples.append(round(rss_mib()[0] - baseline_rss, 1))
    elapsed = time.perf_counter() - started

    stats = multi.stats()
    rss, peak = rss_mib()
    fill = sum(s.fill_bytes for s in stats.values())
    total_bound = bound * len(names)
    summary = {
        "benchmark": "buffer_memory",
        "simulated": f"{args.minutes:g} min, {args.cameras} x 1920x1080 rgb8 at {args.rate_hz:g} Hz",
        "config": {
            "sample_fps": args.sample_fps,
            "max_seconds": args.max_seconds,
            "max_mib_per_camera": args.max_mib_per_camera,
            "max_long_side": args.max_long_side,
        },
        "messages": messages * len(names),
        "kept": sum(s.added for s in stats.values()),
        "decimated": sum(s.decimated for s in stats.values()),
        "frames_held": sum(s.frames for s in stats.values()),
        "fill_seconds": {name: round(s.fill_seconds, 2) for name, s in stats.items()},
        "buffer_mib": round(fill / MIB, 1),
        "bound_mib": round(total_bound / MIB, 1),
        "rss_growth_mib": round(rss - baseline_rss, 1),
        "rss_growth_samples_mib": samples,
        "rss_mib": round(rss, 1),
        "peak_rss_mib": round(peak, 1),
        "elapsed_s": round(elapsed, 1),
        # The buffers' bytes stay within the bound; the process grows by the bound plus allocator slack.
        "within_bound": fill <= total_bound and rss - baseline_rss <= total_bound / MIB + 64,
    }
    write_figures("buffer_memory", summary, indent=2)


if __name__ == "__main__":
    main()
