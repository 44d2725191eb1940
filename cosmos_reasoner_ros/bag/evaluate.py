"""`cosmos-reasoner-bag evaluate`: replays a bag into `reasoner_node` (a child process), sends Reason goals at
bag times, and writes the report folder (results.jsonl, annotated frames, index.html, plots); or builds
the same report from ReasonerResult messages recorded earlier (`--results`)."""

from __future__ import annotations

import bisect
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import cv2
import numpy as np

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.io import image_connections, messages, open_reader, typestore
from cosmos_reasoner_ros.bag.report import ReportFiles, ResultRecord, write_records, write_report
from cosmos_reasoner_ros.errors import FrameError
from cosmos_reasoner_ros.package_files import package_file


def default_params_file() -> Path | None:
    return package_file("config", "reasoner.yaml")


@dataclass(frozen=True)
class TaskSpec:
    task: str
    instruction: str = ""
    step: str = ""  # the current step, for tasks that take one (assisted_next_action)

    @classmethod
    def parse(cls, text: str) -> TaskSpec:
        """`name`, `name:instruction` or `name:instruction|step`."""
        name, _, rest = text.partition(":")
        instruction, _, step = rest.partition("|")
        if not name.strip():
            raise BagError(f"task {text!r} has no name")
        return cls(name.strip(), instruction.strip(), step.strip())


@dataclass(frozen=True)
class EvalOptions:
    server_url: str = "http://127.0.0.1:8000/v1"
    tasks: tuple[TaskSpec, ...] = (TaskSpec("next_action"),)
    period_s: float = 2.0  # [s of bag time] trigger period; ignored when `at_s` is given
    at_s: tuple[float, ...] = ()  # [s from the bag's start] trigger times
    image_topic: str = ""  # empty: the bag's only colour image topic
    params_file: Path | None = None  # node parameters; None: the shipped config/reasoner.yaml
    params: tuple[str, ...] = ()  # extra node parameters, name:=value
    rate: float = 1.0
    wait: bool = False  # pause playback while requests are in flight (slow servers)
    timeout_s: float = 120.0  # [s] per request after playback ends / in --wait
    startup_timeout_s: float = 60.0  # [s] for the node's action server to appear
    node_name: str = "reasoner_node"
    image_format: str = "jpg"  # annotated frames: jpg or png
    progress: bool = True
    record: bool = False  # also record the node's output topics into <out>/outputs (mcap)
    depth: bool = True  # give the node the bag's depth + CameraInfo topics (3D trajectories)


def trigger_times(duration_s: float, period_s: float, at_s: Sequence[float] = ()) -> list[float]:
    """Given times inside the bag, else every period from one period in (the first clip needs frames)."""
    if at_s:
        bad = [t for t in at_s if not 0 <= t <= duration_s]
        if bad:
            raise BagError(f"trigger times {bad} lie outside the bag (0-{duration_s:.2f} s)")
        return sorted(at_s)
    if period_s <= 0:
        raise BagError("the trigger period must be > 0 (or give --at times)")
    n = int(duration_s / period_s + 1e-9)
    return [k * period_s for k in range(1, n + 1)]


# ----------------------------------------------------------------------------------- frames and annotation


class FrameIndex:
    """The colour frames of a bag by header stamp, decoded on demand (only the frames a report shows)."""

    def __init__(self, bag: Path, topic: str = "") -> None:
        self.reader = open_reader(bag)
        self.conn = image_connections(self.reader, topic)[0]
        self.topic = self.conn.topic
        self.store = typestore()
        self._stamps: list[int] = []
        self._bag_ns: list[int] = []
        for _, bag_ns, data in messages(self.reader, [self.conn]):
            msg: Any = self.store.deserialize_cdr(data, self.conn.msgtype)
            self._stamps.append(msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec)
            self._bag_ns.append(bag_ns)
        order = sorted(range(len(self._stamps)), key=self._stamps.__getitem__)
        self._stamps = [self._stamps[i] for i in order]
        self._bag_ns = [self._bag_ns[i] for i in order]
        if not self._stamps:
            raise BagError(f"topic {self.topic} has no messages")

    @property
    def start_ns(self) -> int:
        return int(self.reader.start_time)

    @property
    def compressed(self) -> bool:
        return self.conn.msgtype.endswith("CompressedImage")

    def frame(self, stamp_ns: int) -> np.ndarray | None:
        """RGB frame with the newest header stamp at or before `stamp_ns` (the first frame when none is)."""
        from cosmos_reasoner_ros.image_conversion import message_to_array

        i = max(0, bisect.bisect_right(self._stamps, stamp_ns) - 1)
        bag_ns = self._bag_ns[i]
        for _, _, data in messages(self.reader, [self.conn], bag_ns):
            try:
                image = message_to_array(self.store.deserialize_cdr(data, self.conn.msgtype), backend="numpy")
            except FrameError:
                return None
            return image if image.ndim == 3 else None
        return None

    def close(self) -> None:
        self.reader.close()


def annotated_frame(record: ResultRecord, frame: np.ndarray) -> np.ndarray:
    """The frame with the record's trajectories and boxes (drawn from the 0-1000 coordinates, so the frame's
    size need not match the one the node sent), or the answer's first line as a caption."""
    from cosmos_reasoner_ros.annotation import annotate
    from cosmos_reasoner_ros.parsing import Box2D, Point2D, Trajectory

    trajectories = [
        Trajectory(
            t.get("label", ""),
            tuple(Point2D(t.get("label", ""), float(x), float(y)) for x, y in t.get("points_norm", [])),
        )
        for t in record.trajectories
    ]
    boxes = [
        Box2D(b.get("label", ""), *(float(v) for v in b.get("norm", [0, 0, 0, 0]))) for b in record.boxes
    ]
    caption = ""
    if not trajectories and not boxes:
        first = (record.answer.strip().splitlines() or [""])[0] if record.success else f"[{record.outcome}]"
        caption = first
    return annotate(frame, trajectories, boxes, caption=caption)


def save_image(rgb: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)):
        raise BagError(f"cannot write image {path}")


# ------------------------------------------------------------------------------- messages to records


def _stamp_ns(t: Any) -> int:
    return int(t.sec) * 1_000_000_000 + int(t.nanosec)


def record_from_msg(msg: Any, trigger_s: float = 0.0) -> ResultRecord:
    """A ReasonerResult (rclpy or rosbags object: the fields are read by name) as a ResultRecord."""
    return ResultRecord(
        request_id=msg.request_id,
        task=msg.task,
        instruction=msg.instruction,
        trigger_s=round(trigger_s, 6),
        stamp_ns=_stamp_ns(msg.header.stamp),
        clip_start_ns=_stamp_ns(msg.clip_start),
        clip_end_ns=_stamp_ns(msg.clip_end),
        clip_frames=int(msg.clip_frames),
        cameras=tuple(msg.cameras),
        clip_uris=tuple(msg.clip_uris),
        success=bool(msg.success),
        error_kind=msg.error_kind,
        error=msg.error,
        reasoning=msg.reasoning,
        answer=msg.answer,
        choice=msg.choice,
        trajectories=tuple(
            {
                "label": t.label,
                "camera": t.camera,
                "width": int(t.image_width),
                "height": int(t.image_height),
                "points_norm": [[float(p.x), float(p.y)] for p in t.points_norm],
            }
            for t in msg.trajectories
        ),
        boxes=tuple(
            {
                "label": b.label,
                "camera": b.camera,
                "width": int(b.image_width),
                "height": int(b.image_height),
                "norm": [float(b.x1_norm), float(b.y1_norm), float(b.x2_norm), float(b.y2_norm)],
            }
            for b in msg.boxes
        ),
        segments=tuple(
            {"caption": s.caption, "start_s": float(s.start_offset_s), "end_s": float(s.end_offset_s)}
            for s in msg.segments
        ),
        model=msg.model,
        prompt_tokens=int(msg.prompt_tokens),
        completion_tokens=int(msg.completion_tokens),
        latency_s=float(msg.latency_s),
        ttft_s=float(msg.time_to_first_token_s),
        finish_reason=msg.finish_reason,
    )


def finish_report(
    records: Sequence[ResultRecord],
    out: Path,
    frames: FrameIndex | None,
    image_format: str = "jpg",
    title: str = "",
) -> ReportFiles:
    """Annotated frames, results.jsonl, index.html and plots in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    done = []
    for n, record in enumerate(records, start=1):
        image = ""
        if frames is not None:
            stamp = record.clip_end_ns or frames.start_ns + round(record.trigger_s * 1e9)
            frame = frames.frame(stamp)
            if frame is not None:
                image = f"images/{n:04d}_{record.task or 'request'}.{image_format}"
                save_image(annotated_frame(record, frame), out / image)
        done.append(ResultRecord.from_dict({**record.__dict__, "image": image}) if image else record)
    write_records(done, out / "results.jsonl")
    return write_report(done, out, title or f"Cosmos Reasoner evaluation ({len(done)} requests)")


def evaluate_recorded(
    results_bag: Path,
    out: Path,
    images_bag: Path | None = None,
    image_topic: str = "",
    image_format: str = "jpg",
) -> ReportFiles:
    """The report from ReasonerResult messages in a recorded bag (every topic of that type)."""
    reader = open_reader(results_bag)
    try:
        conns = [c for c in reader.connections if c.msgtype == "cosmos_reasoner_ros/msg/ReasonerResult"]
        if not conns:
            have = ", ".join(f"{c.topic} ({c.msgtype})" for c in reader.connections) or "none"
            raise BagError(f"bag {results_bag} has no ReasonerResult topic; it has: {have}")
        store = typestore()
        records = []
        start = reader.start_time
        for conn, bag_ns, data in messages(reader, conns):
            records.append(record_from_msg(store.deserialize_cdr(data, conn.msgtype), (bag_ns - start) / 1e9))
    finally:
        reader.close()
    frames = FrameIndex(images_bag, image_topic) if images_bag is not None else None
    try:
        return finish_report(records, out, frames, image_format)
    finally:
        if frames is not None:
            frames.close()


# ------------------------------------------------------------------------------------------- live run


_EMPTY = "''"  # a YAML empty string: rcl rejects `name:=` with nothing after it


def depth_topics(reader: Any) -> tuple[str, str]:
    """(depth image topic, CameraInfo topic) of a bag, or empty strings when it lacks either."""
    depth = next(
        (c.topic for c in reader.connections if c.msgtype == "sensor_msgs/msg/Image" and "depth" in c.topic),
        "",
    )
    info = next((c.topic for c in reader.connections if c.msgtype == "sensor_msgs/msg/CameraInfo"), "")
    return (depth, info) if depth and info else ("", "")


def node_parameters(
    options: EvalOptions,
    image_topic: str,
    compressed: bool,
    media_dir: Path,
    depth_topic: str = "",
    info_topic: str = "",
) -> list[str]:
    """The node's parameters for a replay of the bag, as `name:=value` (YAML values, as `-p` takes them); they
    override the parameter file."""
    return [
        f"server_url:={options.server_url}",
        "cameras:=[camera]",
        f"camera.camera.topic:={image_topic}",
        f"camera.camera.compressed:={'true' if compressed else 'false'}",
        f"camera.camera.depth_topic:={depth_topic or _EMPTY}",
        f"camera.camera.camera_info_topic:={info_topic or _EMPTY}",
        f"media_dir:={media_dir}",
        "trigger_period_s:=0.0",
        "image_qos:=reliable",
        f"max_in_flight:={max(1, len(options.tasks))}",
        "wait_for_server_s:=10.0",
        *options.params,
    ]


def node_command(
    options: EvalOptions,
    image_topic: str,
    compressed: bool,
    media_dir: Path,
    depth_topic: str = "",
    info_topic: str = "",
) -> list[str]:
    params_file = options.params_file or default_params_file()
    cmd = [
        sys.executable,
        "-m",
        "cosmos_reasoner_ros.node",
        "--ros-args",
        "-r",
        f"__node:={options.node_name}",
    ]
    if params_file is not None:
        cmd += ["--params-file", str(params_file)]
    for value in node_parameters(options, image_topic, compressed, media_dir, depth_topic, info_topic):
        cmd += ["-p", value]
    return cmd


class NodeHandle(Protocol):
    """A running reasoner_node (and whatever was started with it)."""

    def check_alive(self) -> None:
        """Raise BagError (with the log's tail) when the node has exited."""

    def stop(self) -> None:
        """Stop it and everything started with it."""


# Starts the node for a replay: (parameter file or None, parameters as `name:=value`, log path) -> handle.
NodeStarter = Callable[[Path | None, Sequence[str], Path], NodeHandle]


@dataclass
class _Pending:
    spec: TaskSpec
    trigger_s: float
    result: Any = None
    error: str = ""
    done: threading.Event = field(default_factory=threading.Event)


class _Goals:
    """Reason goals in flight; completion arrives on the executor thread."""

    def __init__(self, client: Any, on_done: Callable[[], None]) -> None:
        self.client = client
        self.items: list[_Pending] = []
        self._on_done = on_done
        self._lock = threading.Lock()

    def send(self, spec: TaskSpec, trigger_s: float) -> None:
        from cosmos_reasoner_ros.action import Reason

        pending = _Pending(spec, trigger_s)
        with self._lock:
            self.items.append(pending)
        future = self.client.send_goal_async(
            Reason.Goal(task=spec.task, instruction=spec.instruction, step=spec.step)
        )

        def on_goal(f: Any) -> None:
            handle = f.result()
            if handle is None or not handle.accepted:
                self._finish(pending, None, "goal rejected")
                return
            handle.get_result_async().add_done_callback(
                lambda r: self._finish(pending, r.result().result.result, "")
            )

        future.add_done_callback(on_goal)

    def _finish(self, pending: _Pending, result: Any, error: str) -> None:
        pending.result, pending.error = result, error
        pending.done.set()
        self._on_done()

    def in_flight(self) -> int:
        with self._lock:
            return sum(not p.done.is_set() for p in self.items)

    def wait_all(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(p.done.wait(max(0.0, deadline - time.monotonic())) for p in list(self.items))


class _NodeProcess:
    def __init__(self, cmd: list[str], log_path: Path) -> None:
        env = dict(os.environ)
        env.pop("_ROS_WHEELS_BOOTSTRAP_COMPLETE", None)  # let the child set up its own library paths
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.log_path = log_path

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise BagError(f"reasoner_node exited with code {self.proc.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def evaluate_live(
    bag: Path, out: Path, options: EvalOptions = EvalOptions(), start_node: NodeStarter | None = None
) -> ReportFiles:
    """Replay `bag` into a fresh reasoner_node, trigger the tasks, collect every result, write the report.

    start_node: how the node starts (e.g. `ros2 launch`); None: `python -m cosmos_reasoner_ros.node` here."""
    import rclpy
    from rclpy.action.client import ActionClient
    from rclpy.executors import SingleThreadedExecutor
    from tqdm import tqdm

    from cosmos_reasoner_ros.action import Reason
    from cosmos_reasoner_ros.bag.play import Player, PlayOptions
    from cosmos_reasoner_ros.bag.record import Recorder, default_topics

    out.mkdir(parents=True, exist_ok=True)
    frames = FrameIndex(bag, options.image_topic)
    media = out / "media"
    media.mkdir(exist_ok=True)
    if options.record and (out / "outputs").exists():
        raise BagError(f"{out / 'outputs'} exists already; choose a new report folder")
    node_proc: NodeHandle | None = None
    recorder: Recorder | None = None
    context = rclpy.Context()
    rclpy.init(context=context)
    executor = SingleThreadedExecutor(context=context)
    spinner: threading.Thread | None = None
    try:
        node = rclpy.create_node("cosmos_reasoner_bag_evaluate", context=context)
        executor.add_node(node)
        player = Player(node, bag, PlayOptions(rate=options.rate))
        times = trigger_times(player.duration_s, options.period_s, options.at_s)
        total = len(times) * len(options.tasks)
        depth, info = depth_topics(frames.reader) if options.depth else ("", "")
        if start_node is None:
            cmd = node_command(options, frames.topic, frames.compressed, media, depth, info)
            node_proc = _NodeProcess(cmd, out / "node.log")
        else:
            parameters = node_parameters(options, frames.topic, frames.compressed, media, depth, info)
            node_proc = start_node(options.params_file or default_params_file(), parameters, out / "node.log")
        client: ActionClient[Any, Any, Any] = ActionClient(node, Reason, f"/{options.node_name}/reason")
        spinner = threading.Thread(target=executor.spin, daemon=True)
        spinner.start()
        deadline = time.monotonic() + options.startup_timeout_s
        while not client.wait_for_server(timeout_sec=0.5):
            node_proc.check_alive()
            if time.monotonic() > deadline:
                raise BagError(
                    f"reasoner_node's action server did not appear within {options.startup_timeout_s} s"
                )
        image_pub = player.publishers[frames.conn.id][1]
        while image_pub.get_subscription_count() == 0:
            node_proc.check_alive()
            if time.monotonic() > deadline:
                raise BagError("reasoner_node did not subscribe to the image topic")
            time.sleep(0.05)
        if options.record:
            recorder = Recorder(node, out / "outputs", default_topics(options.node_name))
            recorder.discover()
        next_discovery = [time.monotonic() + 1.0]

        bar = tqdm(total=total, unit="req", desc="evaluate", disable=not options.progress, file=sys.stderr)
        goals = _Goals(client, lambda: bar.update(1))
        start_ns = player.start_ns
        queue = list(times)

        def before_publish(bag_ns: int) -> None:
            # A trigger fires once every message stamped before it has gone out.
            while queue and (bag_ns - start_ns) / 1e9 > queue[0] + 1e-9:
                t = queue.pop(0)
                for spec in options.tasks:
                    goals.send(spec, t)
                bar.set_postfix(bag_s=f"{t:.1f}")
                if options.wait:
                    goals.wait_all(options.timeout_s)
            node_proc.check_alive()
            if recorder is not None and time.monotonic() > next_discovery[0]:
                recorder.discover()  # topics the node creates late (none today; cheap insurance)
                next_discovery[0] = time.monotonic() + 1.0

        player.run(before_publish=before_publish)
        for t in queue:  # triggers at the very end of the bag
            for spec in options.tasks:
                goals.send(spec, t)
        goals.wait_all(options.timeout_s)
        bar.close()
        if recorder is not None:
            time.sleep(0.5)  # the result topic's last samples, published just before the action results
            recorder.close()
        records = []
        for p in goals.items:
            if p.result is not None:
                records.append(record_from_msg(p.result, p.trigger_s))
            else:
                records.append(
                    ResultRecord(
                        task=p.spec.task,
                        instruction=p.spec.instruction,
                        trigger_s=p.trigger_s,
                        error_kind="internal" if p.done.is_set() else "timeout",
                        error=p.error or "no result within the timeout",
                    )
                )
        player.close()
        return finish_report(records, out, frames, options.image_format)
    finally:
        if recorder is not None:
            recorder.close()
        if node_proc is not None:
            node_proc.stop()
        executor.shutdown()
        if spinner is not None:
            spinner.join(timeout=5)
        frames.close()
        if context.ok():
            rclpy.shutdown(context=context)
