"""`cosmos-reasoner-bag make`: video files or image folders to a rosbag2 bag of camera images (raw or JPEG)
at a chosen rate, with CameraInfo and optional synthetic depth; header stamps equal the bag timestamps.
No ROS import."""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.typestore import typestore
from cosmos_reasoner_ros.bag.files.writer import open_writer

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}
ENCODINGS = ("rgb8", "bgr8", "jpeg")
DEPTH_KINDS = ("none", "plane", "gradient")
DEPTH_ENCODINGS = ("16UC1", "32FC1")


@dataclass(frozen=True)
class MakeOptions:
    rate_hz: float = 0.0  # [Hz] output rate; 0: every source frame at its own time
    encoding: str = "rgb8"  # rgb8 / bgr8 (sensor_msgs/Image) or jpeg (CompressedImage)
    jpeg_quality: int = 90
    image_topic: str = "/camera/image_raw"  # with jpeg, "/compressed" is appended unless already there
    info_topic: str = "/camera/camera_info"  # empty: no CameraInfo
    frame_id: str = "camera_optical_frame"
    fov_deg: float = 60.0  # [deg] horizontal field of view of the pinhole CameraInfo
    depth: str = "none"  # none, plane (constant distance) or gradient (near at the bottom)
    depth_encoding: str = "16UC1"  # 16UC1 [mm] or 32FC1 [m]
    depth_topic: str = "/camera/depth/image_raw"
    depth_m: float = 1.5  # [m] plane distance; the gradient runs from depth_m/2 to depth_m*2
    image_fps: float = 10.0  # [Hz] frame rate assumed for image folders
    max_long_side: int = 0  # [px] downscale frames to this long side; 0: keep
    start_ns: int | None = None  # first header stamp / bag timestamp; None: now (time.time_ns())
    storage: str = "mcap"

    def check(self) -> None:
        if self.encoding not in ENCODINGS:
            raise BagError(f"unknown encoding {self.encoding!r}; use one of {', '.join(ENCODINGS)}")
        if self.depth not in DEPTH_KINDS:
            raise BagError(f"unknown depth {self.depth!r}; use one of {', '.join(DEPTH_KINDS)}")
        if self.depth_encoding not in DEPTH_ENCODINGS:
            raise BagError(f"unknown depth encoding {self.depth_encoding!r}; use 16UC1 or 32FC1")
        if self.rate_hz < 0 or self.image_fps <= 0 or not 0 < self.fov_deg < 180 or self.depth_m <= 0:
            raise BagError("rate must be >= 0, image fps and depth > 0, fov in (0, 180) degrees")
        if not self.image_topic.startswith("/"):
            raise BagError(f"topic names must be absolute: {self.image_topic!r}")

    @property
    def image_topic_name(self) -> str:
        if self.encoding == "jpeg" and not self.image_topic.endswith("/compressed"):
            return self.image_topic + "/compressed"
        return self.image_topic


@dataclass(frozen=True)
class MadeBag:
    path: Path
    frames: int
    width: int
    height: int
    duration_s: float  # from the first to the last image stamp
    topics: dict[str, int] = field(default_factory=dict)  # messages per topic
    start_ns: int = 0  # the first stamp


def _video_frames(path: Path) -> Iterator[tuple[float, np.ndarray]]:
    """(seconds from the start, RGB frame) of a video, with PyAV when installed, else OpenCV."""
    try:
        import av
    except ImportError:  # PyAV is an optional extra; OpenCV decodes most files too
        return _opencv_frames(path)
    return _pyav_frames(path, av)


def _pyav_frames(path: Path, av: Any) -> Iterator[tuple[float, np.ndarray]]:
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            t0: float | None = None
            for n, frame in enumerate(container.decode(stream)):
                t = float(frame.time) if frame.time is not None else n / float(stream.average_rate or 30)
                t0 = t if t0 is None else t0
                yield t - t0, frame.to_ndarray(format="rgb24")
    except (av.error.FFmpegError, IndexError) as exc:
        raise BagError(f"cannot decode video {path}: {exc}") from None


def _opencv_frames(path: Path) -> Iterator[tuple[float, np.ndarray]]:
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise BagError(f"cannot open video {path}")
    fps = cap.get(cv2.CAP_PROP_FPS) or 30.0
    n = 0
    try:
        while True:
            ok, bgr = cap.read()
            if not ok:
                break
            yield n / fps, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
            n += 1
    finally:
        cap.release()
    if n == 0:
        raise BagError(f"no frames decoded from {path}")


def _folder_frames(path: Path, fps: float) -> Iterator[tuple[float, np.ndarray]]:
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise BagError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in folder {path}")
    for n, file in enumerate(files):
        bgr = cv2.imread(str(file), cv2.IMREAD_COLOR)
        if bgr is None:
            raise BagError(f"cannot read image {file}")
        yield n / fps, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def source_frames(path: Path, image_fps: float = 10.0) -> Iterator[tuple[float, np.ndarray]]:
    if path.is_dir():
        return _folder_frames(path, image_fps)
    if path.suffix.lower() in IMAGE_SUFFIXES:
        return _folder_frames_single(path)
    if not path.is_file():
        raise BagError(f"source {path} does not exist")
    return _video_frames(path)


def _folder_frames_single(path: Path) -> Iterator[tuple[float, np.ndarray]]:
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise BagError(f"cannot read image {path}")
    yield 0.0, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def resample(
    frames: Iterator[tuple[float, np.ndarray]], rate_hz: float, period_s: float
) -> Iterator[tuple[float, np.ndarray]]:
    """Frames at k / rate_hz seconds, each the newest source frame at or before that time (sample and hold),
    over the source's duration (its last frame time + one source period). rate_hz 0 passes frames through."""
    if rate_hz <= 0:
        yield from frames
        return
    k = 0
    previous: tuple[float, np.ndarray] | None = None
    for t, image in frames:
        if previous is not None:
            while k / rate_hz < t - 1e-9:
                yield k / rate_hz, previous[1]
                k += 1
        previous = (t, image)
    if previous is not None:
        end = previous[0] + period_s
        while k / rate_hz < end - 1e-9:
            yield k / rate_hz, previous[1]
            k += 1


def _source_period(path: Path, image_fps: float) -> float:
    if path.is_dir() or path.suffix.lower() in IMAGE_SUFFIXES:
        return 1.0 / image_fps
    cap = cv2.VideoCapture(str(path))
    fps = cap.get(cv2.CAP_PROP_FPS) if cap.isOpened() else 0.0
    cap.release()
    return 1.0 / fps if fps and math.isfinite(fps) and fps > 0 else 1.0 / 30.0


def _resize(image: np.ndarray, max_long_side: int) -> np.ndarray:
    h, w = image.shape[:2]
    if max_long_side <= 0 or max(h, w) <= max_long_side:
        return image
    s = max_long_side / max(h, w)
    return cv2.resize(image, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)


def intrinsics(width: int, height: int, fov_deg: float) -> tuple[float, float, float, float]:
    """(fx, fy, cx, cy) of a square-pixel pinhole with the given horizontal field of view."""
    fx = width / 2.0 / math.tan(math.radians(fov_deg) / 2.0)
    return fx, fx, (width - 1) / 2.0, (height - 1) / 2.0


def synthetic_depth(width: int, height: int, kind: str, encoding: str, depth_m: float) -> np.ndarray:
    """A plane at depth_m, or a vertical gradient from 2*depth_m at the top to depth_m/2 at the bottom
    (a floor seen from above-front); 16UC1 in millimetres, 32FC1 in metres."""
    if kind == "plane":
        metres = np.full((height, width), depth_m, dtype=np.float32)
    else:
        column = np.linspace(2.0 * depth_m, 0.5 * depth_m, height, dtype=np.float32)
        metres = np.repeat(column[:, None], width, axis=1)
    if encoding == "16UC1":
        return np.round(metres * 1000.0).astype(np.uint16)
    return metres


class _Messages:
    """rosbags message objects for one stamp (the typestore's dataclasses, serialized to CDR)."""

    def __init__(self, options: MakeOptions) -> None:
        self.o = options
        self.store = typestore()
        t = self.store.types
        self.Header, self.Time = t["std_msgs/msg/Header"], t["builtin_interfaces/msg/Time"]
        self.Image, self.Compressed = t["sensor_msgs/msg/Image"], t["sensor_msgs/msg/CompressedImage"]
        self.Info, self.Roi = t["sensor_msgs/msg/CameraInfo"], t["sensor_msgs/msg/RegionOfInterest"]

    def header(self, stamp_ns: int) -> Any:
        sec, nanosec = divmod(stamp_ns, 1_000_000_000)
        return self.Header(stamp=self.Time(sec=sec, nanosec=nanosec), frame_id=self.o.frame_id)

    def image(self, rgb: np.ndarray, stamp_ns: int) -> tuple[str, bytes | memoryview]:
        if self.o.encoding == "jpeg":
            ok, buf = cv2.imencode(
                ".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, self.o.jpeg_quality]
            )
            if not ok:
                raise BagError("JPEG encoding failed")
            msg = self.Compressed(header=self.header(stamp_ns), format="jpeg", data=buf.reshape(-1))
            return "sensor_msgs/msg/CompressedImage", self.store.serialize_cdr(msg, msg.__msgtype__)
        pixels = rgb if self.o.encoding == "rgb8" else rgb[:, :, ::-1]
        msg = self.raw(pixels, self.o.encoding, stamp_ns)
        return "sensor_msgs/msg/Image", self.store.serialize_cdr(msg, msg.__msgtype__)

    def depth(self, depth: np.ndarray, stamp_ns: int) -> bytes:
        msg = self.raw(depth, self.o.depth_encoding, stamp_ns)
        return bytes(self.store.serialize_cdr(msg, msg.__msgtype__))

    def raw(self, pixels: np.ndarray, encoding: str, stamp_ns: int) -> Any:
        """An Image of the pixels (rows by columns, a colour image's channels last), row after row."""
        h, w = pixels.shape[:2]
        channels = pixels.shape[2] if pixels.ndim == 3 else 1
        return self.Image(
            header=self.header(stamp_ns),
            height=h,
            width=w,
            encoding=encoding,
            is_bigendian=0,
            step=w * channels * pixels.itemsize,
            data=np.ascontiguousarray(pixels).view(np.uint8).reshape(-1),
        )

    def info(self, width: int, height: int, stamp_ns: int) -> bytes:
        fx, fy, cx, cy = intrinsics(width, height, self.o.fov_deg)
        msg = self.Info(
            header=self.header(stamp_ns),
            height=height,
            width=width,
            distortion_model="plumb_bob",
            d=np.zeros(5),
            k=np.array([fx, 0, cx, 0, fy, cy, 0, 0, 1], dtype=np.float64),
            r=np.eye(3).reshape(-1),
            p=np.array([fx, 0, cx, 0, 0, fy, cy, 0, 0, 0, 1, 0], dtype=np.float64),
            binning_x=0,
            binning_y=0,
            roi=self.Roi(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False),
        )
        return bytes(self.store.serialize_cdr(msg, msg.__msgtype__))


def make_bag(sources: Sequence[Path], out: Path, options: MakeOptions = MakeOptions()) -> MadeBag:
    """Write the sources one after the other (in time) into a new bag at `out`."""
    options.check()
    if not sources:
        raise BagError("no sources given")
    if out.exists():
        raise BagError(f"{out} exists already; choose a new bag path")
    build = _Messages(options)
    store = build.store
    image_type = "sensor_msgs/msg/CompressedImage" if options.encoding == "jpeg" else "sensor_msgs/msg/Image"
    counts: dict[str, int] = {}
    start_ns = time.time_ns() if options.start_ns is None else options.start_ns
    if start_ns < 0:
        raise BagError(f"the start time must be >= 0 s since the epoch, got {start_ns / 1e9}")
    writer = open_writer(out, options.storage)
    size: tuple[int, int] | None = None
    last_ns = start_ns
    offset_s = 0.0
    ok = False
    try:
        image_conn = writer.add_topic(options.image_topic_name, image_type, store)
        info_conn = (
            writer.add_topic(options.info_topic, "sensor_msgs/msg/CameraInfo", store)
            if options.info_topic
            else None
        )
        depth_conn = (
            writer.add_topic(options.depth_topic, "sensor_msgs/msg/Image", store)
            if options.depth != "none"
            else None
        )
        depth: np.ndarray | None = None
        for source in sources:
            period = _source_period(source, options.image_fps)
            t_end = 0.0
            for t, frame in resample(source_frames(source, options.image_fps), options.rate_hz, period):
                image = _resize(frame, options.max_long_side)
                h, w = image.shape[:2]
                if size is None:
                    size = (w, h)
                elif size != (w, h):
                    image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
                    h, w = size[1], size[0]
                stamp = start_ns + round((offset_s + t) * 1e9)
                stamp = max(stamp, last_ns + 1) if counts else stamp  # strictly increasing stamps
                _, data = build.image(image, stamp)
                writer.write(image_conn, stamp, data)
                if info_conn is not None:
                    writer.write(info_conn, stamp, build.info(w, h, stamp))
                if depth_conn is not None:
                    if depth is None:
                        depth = synthetic_depth(w, h, options.depth, options.depth_encoding, options.depth_m)
                    writer.write(depth_conn, stamp, build.depth(depth, stamp))
                counts[image_conn] = counts.get(image_conn, 0) + 1
                last_ns, t_end = stamp, t
            offset_s += t_end + (1.0 / options.rate_hz if options.rate_hz > 0 else period)
        if size is None:
            raise BagError("the sources gave no frames")
        ok = True
    finally:
        if ok:
            writer.close()
        else:
            writer.abort()
            shutil.rmtree(out, ignore_errors=True)  # no half-written bag left behind
    frames = counts[image_conn]
    if info_conn is not None:
        counts[info_conn] = frames
    if depth_conn is not None:
        counts[depth_conn] = frames
    return MadeBag(out, frames, size[0], size[1], (last_ns - start_ns) / 1e9, counts, start_ns)
