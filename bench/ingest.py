"""Ingest benchmark: three 1920x1080 rgb8 streams at 30 Hz from another process, buffered for 4 fps clips.

Side by side in one run, each in its own process and receiving the same streams:
  bare   a plain rclpy subscription whose callback does nothing (the floor every subscriber pays)
  typed  the ingest path on a typed subscription: header stamp -> wants() -> convert -> add()
  encoding  typed, plus every kept frame encoded on arrival (PreEncoder, H.264): what reasoner_node does
         while triggers come (pre_encode auto); its CPU replaces the encoding of clips at trigger time
  node   the node's own per-frame path: a subscription with message info (the publisher's sequence number)
         into node.ingest.CameraIngest (stamp, arrivals, decimation, conversion, buffer; no pre-encoding)
  raw    (--with-raw) the ingest path on a raw subscription: stamp read from the CDR bytes -> wants() ->
         deserialize + convert + add() only for kept frames. Measured here: taking a raw 1080p message
         costs about what a typed take costs, so this saves nothing; the node should subscribe typed.
`--roles` picks them (default bare,typed,encoding,node); a role written ROLE:cv1 runs with OpenCV on one
thread (cv2.setNumThreads(1)), to compare with ROLE on OpenCV's default pool side by side.
CPU seconds of each process from its first to its last message; ratio = ingest / bare (goal <= 1.15), and the
frames kept per camera against the 4 fps expected from the stamps received. Large messages need Fast DDS
shared memory: config/fastdds_shm.xml is used unless the environment names a Fast DDS profile.
Prints JSON on its last line and writes bench/results/ingest.json.
    ./run exec python bench/ingest.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import select
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support.paths import BENCH_RESULTS, ROBOT_CLIP, ROOT, SHM_PROFILE
from support.processes import bench_domain

from cosmos_reasoner_ros.bag.rclpy_compat import initialized
from cosmos_reasoner_ros.ros_compat import fastdds_profile, fastdds_profile_env

PROFILE = SHM_PROFILE
CLIP = ROBOT_CLIP
ROLES = ("bare", "typed", "encoding", "raw", "node")
DEFAULT_ROLES = "bare,typed,encoding,node"
GOAL_RATIO = 1.15


def topic(index: int) -> str:
    return f"/crr_bench/cam{index}/image_raw"


# -- publisher ----------------------------------------------------------------------------------------------


def publish(args: argparse.Namespace) -> None:
    import cv2
    import rclpy
    from rclpy.qos import qos_profile_sensor_data
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image

    cap = cv2.VideoCapture(str(CLIP))
    ok, bgr = cap.read()
    cap.release()
    if not ok:
        raise SystemExit(f"cannot read {CLIP}")
    rgb = cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (1920, 1080))
    with initialized():
        node = rclpy.create_node("crr_bench_publisher")
        publishers, templates = [], []
        for index in range(args.cameras):
            msg = Image()
            msg.header.frame_id = f"cam{index}"
            msg.height, msg.width, msg.encoding, msg.step = 1080, 1920, "rgb8", 1920 * 3
            msg.data = rgb.tobytes()
            # Serialized once; each publish patches the stamp (bytes 4..12 after the CDR encapsulation).
            templates.append(bytearray(serialize_message(msg)))
            publishers.append(node.create_publisher(Image, topic(index), qos_profile_sensor_data))
        deadline = time.monotonic() + 60
        while any(p.get_subscription_count() < args.subscribers for p in publishers):
            if time.monotonic() > deadline:
                raise SystemExit("subscribers were not discovered within 60 s")
            time.sleep(0.05)
        time.sleep(0.5)  # let every subscriber's reader match too
        period = 1.0 / args.rate
        start = time.monotonic()
        sent = 0
        for tick in range(round(args.seconds * args.rate)):
            target = start + tick * period
            delay = target - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            stamp = time.time_ns()
            for template, publisher in zip(templates, publishers, strict=True):
                struct.pack_into("<iI", template, 4, stamp // 1_000_000_000, stamp % 1_000_000_000)
                publisher.publish(bytes(template))
                sent += 1
        print(json.dumps({"role": "publisher", "sent": sent, "wall_s": round(time.monotonic() - start, 2)}))
        node.destroy_node()


# -- subscribers --------------------------------------------------------------------------------------------


def subscribe(args: argparse.Namespace) -> None:
    import rclpy
    from rclpy.qos import qos_profile_sensor_data
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image

    from cosmos_reasoner_ros.clips.clip_buffer import ClipBuffer
    from cosmos_reasoner_ros.clips.image_conversion import (
        Frame,
        image_msg_to_array,
        message_stamp_ns,
        serialized_stamp_ns,
    )
    from cosmos_reasoner_ros.errors import FrameError

    role, _, variant = args.role.partition(":")
    if variant == "cv1":
        import cv2

        cv2.setNumThreads(1)
    names = [f"cam{i}" for i in range(args.cameras)]
    pre_encoder = None
    if role == "encoding":
        import tempfile

        from cosmos_reasoner_ros.clips.clip_writer import ClipWriter, PreEncoder
        from cosmos_reasoner_ros.clips.media_store import MediaStore

        media = MediaStore(Path(tempfile.mkdtemp(prefix="crr-bench-ingest-")) / "media")
        pre_encoder = PreEncoder(ClipWriter(media, codec="h264"), queue_size=64)
    buffers = {
        n: ClipBuffer(
            n,
            args.sample_fps,
            max_seconds=args.buffer_seconds,
            max_bytes=4 * 1024**3,
            max_long_side=args.max_long_side,
        )
        for n in names
    }
    received = dict.fromkeys(names, 0)
    stamps: dict[str, list[int]] = {n: [] for n in names}
    kept_stamps: dict[str, list[int]] = {n: [] for n in names}
    errors = 0
    clock: dict[str, float] = {}

    def mark() -> None:
        now_cpu, now_wall = time.process_time(), time.monotonic()
        faults = float(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
        clock.setdefault("cpu0", now_cpu)
        clock.setdefault("wall0", now_wall)
        clock.setdefault("faults0", faults)
        clock["cpu1"], clock["wall1"], clock["faults1"] = now_cpu, now_wall, faults

    def on_bare(camera: str) -> Any:
        def callback(msg: Image) -> None:
            received[camera] += 1
            mark()

        return callback

    def on_typed(camera: str) -> Any:
        buffer = buffers[camera]

        def callback(msg: Image) -> None:
            nonlocal errors
            received[camera] += 1
            stamp = message_stamp_ns(msg, time.time_ns())
            stamps[camera].append(stamp)
            if buffer.wants(stamp):
                try:
                    image = image_msg_to_array(msg, copy=False)  # add() resizes or copies it
                    kept = buffer.add(Frame(camera, stamp, image, msg.header.frame_id))
                    if kept is not None:
                        kept_stamps[camera].append(stamp)
                        if pre_encoder is not None:
                            pre_encoder.submit(kept)
                except FrameError:
                    errors += 1
            mark()

        return callback

    def on_raw(camera: str) -> Any:
        buffer = buffers[camera]

        def callback(data: bytes) -> None:
            nonlocal errors
            received[camera] += 1
            try:
                stamp = serialized_stamp_ns(data) or time.time_ns()
                stamps[camera].append(stamp)
                if buffer.wants(stamp):
                    msg = deserialize_message(data, Image)
                    image = image_msg_to_array(msg, copy=False)
                    if buffer.add(Frame(camera, stamp, image, msg.header.frame_id)):
                        kept_stamps[camera].append(stamp)
            except FrameError:
                errors += 1
            mark()

        return callback

    def on_node(camera: str) -> Any:
        from cosmos_reasoner_ros.node.diagnostics import ProblemLog
        from cosmos_reasoner_ros.node.ingest import CameraIngest
        from cosmos_reasoner_ros.ros_compat import with_message_info

        ingest = CameraIngest(
            camera,
            buffers[camera],
            ProblemLog(print),
            use_receive_time=True,
            max_stamp_ahead_s=1.0,
            max_pixels=7680 * 4320,
        )
        node_stats[camera] = ingest.stats

        def callback(msg: Image, sequence: int | None) -> None:
            received[camera] += 1
            stamp = msg.header.stamp
            stamps[camera].append(stamp.sec * 1_000_000_000 + stamp.nanosec)  # as the typed role records
            ingest(msg, time.time_ns(), sequence)
            mark()

        return with_message_info(callback)

    node_stats: dict[str, Any] = {}
    factory = {"bare": on_bare, "typed": on_typed, "encoding": on_typed, "raw": on_raw, "node": on_node}[role]
    with initialized():
        node = rclpy.create_node(f"crr_bench_{role}_{variant or 'default'}")
        for index, name in enumerate(names):
            node.create_subscription(
                Image, topic(index), factory(name), qos_profile_sensor_data, raw=(role == "raw")
            )
        print("READY", flush=True)
        hard_deadline = time.monotonic() + args.seconds + 90
        while time.monotonic() < hard_deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
            if "wall1" in clock and time.monotonic() - clock["wall1"] > 2.0:
                break  # the publisher has finished
        node.destroy_node()
    if pre_encoder is not None:
        pre_encoder.close(timeout_s=60)  # the frames still queued are part of the cost
        clock["cpu1"] = time.process_time()

    result: dict[str, Any] = {
        "role": role,
        "received": sum(received.values()),
        "cpu_s": round(clock.get("cpu1", 0.0) - clock.get("cpu0", 0.0), 3),
        "wall_s": round(clock.get("wall1", 0.0) - clock.get("wall0", 0.0), 3),
        "page_faults": int(clock.get("faults1", 0.0) - clock.get("faults0", 0.0)),
    }
    if pre_encoder is not None:
        result["pre_encoded"] = pre_encoder.encoded
        result["pre_encode_skipped"] = pre_encoder.skipped
    if role != "bare":
        per_camera = {}
        for name in names:
            stats = buffers[name].stats()
            seen = sorted(stamps[name])
            kept = kept_stamps[name]
            if role == "node":  # the frames still buffered (the last buffer_seconds): their gaps
                kept = [f.stamp_ns for f in buffers[name].clip(1e9).frames] if stats.frames else []
            span_s = (seen[-1] - seen[0]) / 1e9 if len(seen) > 1 else 0.0
            gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(kept)]
            input_gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(seen)]
            per_camera[name] = {
                "received": received[name],
                "kept": stats.added,
                "expected_at_sample_fps": int(span_s * args.sample_fps) + 1,
                "max_kept_gap_ms": round(max(gaps, default=0.0), 1),
                "max_input_gap_ms": round(max(input_gaps, default=0.0), 1),
                "frame_shape": list(buffers[name].latest().image.shape) if stats.frames else None,
            }
        result["cameras"] = per_camera
        result["frame_errors"] = errors + sum(s.invalid for s in node_stats.values())
    print(json.dumps(result), flush=True)


# -- orchestration ------------------------------------------------------------------------------------------


def child_env() -> tuple[dict[str, str], str]:
    env = dict(os.environ)
    note = "the Fast DDS profile of the environment"
    if not fastdds_profile(env):
        env.update(fastdds_profile_env(PROFILE))
        note = str(PROFILE.relative_to(ROOT))
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", bench_domain())
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    return env, note


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError("no output in time")
    return proc.stdout.readline().strip()


def orchestrate(args: argparse.Namespace) -> None:
    env, profile_note = child_env()
    common = [
        "--cameras",
        str(args.cameras),
        "--seconds",
        str(args.seconds),
        "--rate",
        str(args.rate),
        "--sample-fps",
        str(args.sample_fps),
        "--max-long-side",
        str(args.max_long_side),
        "--buffer-seconds",
        str(args.buffer_seconds),
    ]
    me = [sys.executable, str(Path(__file__).resolve())]
    roles = args.roles.split(",") + (["raw"] if args.with_raw else [])
    if roles[0] != "bare":
        raise SystemExit("--roles must begin with bare (the yardstick)")
    subscribers = {
        role: subprocess.Popen([*me, "--role", role, *common], stdout=subprocess.PIPE, text=True, env=env)
        for role in roles
    }
    publisher: subprocess.Popen[str] | None = None
    try:
        for role, proc in subscribers.items():
            line = read_line(proc, 60)
            if line != "READY":
                raise SystemExit(f"{role} subscriber did not start: {line!r}")
        publisher = subprocess.Popen(
            [*me, "--role", "publisher", "--subscribers", str(len(roles)), *common],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        published = json.loads(read_line(publisher, args.seconds + 120))
        publisher.wait(timeout=30)
        results = {role: json.loads(read_line(proc, 120)) for role, proc in subscribers.items()}
        for proc in subscribers.values():
            proc.wait(timeout=30)
    finally:
        for proc in [*subscribers.values(), *([publisher] if publisher else [])]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    bare = results["bare"]
    summary: dict[str, Any] = {
        "benchmark": "ingest",
        "streams": f"{args.cameras} x 1920x1080 rgb8 at {args.rate:g} Hz for {args.seconds:g} s",
        "sample_fps": args.sample_fps,
        "max_long_side": args.max_long_side,
        "buffer_seconds": args.buffer_seconds,
        "fastdds_profile": profile_note,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "published": published["sent"],
        "goal_cpu_ratio": GOAL_RATIO,
        "bare": bare,
    }
    for role in roles[1:]:
        result = results[role]
        if result.get("cameras") is None:
            summary[role] = result
            continue
        ratio = result["cpu_s"] / bare["cpu_s"] if bare["cpu_s"] > 0 else None
        per_message = None
        if bare["received"] and result["received"] and bare["cpu_s"] > 0:
            per_message = (result["cpu_s"] / result["received"]) / (bare["cpu_s"] / bare["received"])
        cameras = result["cameras"]
        summary[role] = {
            **result,
            "cpu_ratio_vs_bare": round(ratio, 3) if ratio else None,
            "cpu_per_message_ratio_vs_bare": round(per_message, 3) if per_message else None,
            "kept_vs_expected": {n: f"{c['kept']}/{c['expected_at_sample_fps']}" for n, c in cameras.items()},
        }
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default="orchestrate", help="orchestrate, publisher, or ROLE[:cv1]")
    parser.add_argument("--roles", default=DEFAULT_ROLES, help="the subscribers, bare first")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--cameras", type=int, default=3)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--sample-fps", type=float, default=4.0)
    parser.add_argument("--max-long-side", type=int, default=1280)
    parser.add_argument("--buffer-seconds", type=float, default=10.0, help="the buffers' duration bound")
    parser.add_argument("--subscribers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=BENCH_RESULTS / "ingest.json")
    parser.add_argument("--with-raw", action="store_true", help="also run the raw-subscription variant")
    args = parser.parse_args()
    if args.role == "orchestrate":
        orchestrate(args)
    elif args.role == "publisher":
        publish(args)
    else:
        subscribe(args)


if __name__ == "__main__":
    main()
