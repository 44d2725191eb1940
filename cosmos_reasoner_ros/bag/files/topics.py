"""Which topics of a recording to replay: the camera topics (colour images, raw, compressed or H.264 video),
with the CameraInfo and depth topics that go with them. Named by the user, or found by message type when the
choice is unambiguous; several candidates without a choice is an error that lists them. Everything else in the
recording (dozens of topics on a robot, of any type) is never read. No ROS import."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.reader import BagReader, TopicInfo

__all__ = [
    "CAMERA_TYPES",
    "DEPTH_ENCODINGS",
    "INFO_TYPE",
    "VIDEO_TYPE",
    "CameraTopics",
    "choose_topics",
    "namespace_of",
]

IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
VIDEO_TYPE = "foxglove_msgs/msg/CompressedVideo"
INFO_TYPE = "sensor_msgs/msg/CameraInfo"
CAMERA_TYPES = (IMAGE_TYPE, COMPRESSED_TYPE, VIDEO_TYPE)
DEPTH_ENCODINGS = ("16UC1", "32FC1", "mono16", "16SC1", "32SC1")


@dataclass(frozen=True)
class CameraTopics:
    """The topics of one replay: per camera its image topic, CameraInfo topic and depth topic ("": none)."""

    cameras: tuple[str, ...]
    infos: tuple[str, ...]
    depths: tuple[str, ...]
    types: tuple[str, ...]  # each camera topic's message type
    chosen: tuple[str, ...] = ()  # what was found rather than named, said to the user

    @property
    def topics(self) -> tuple[str, ...]:
        """Every topic to read, once."""
        return tuple(dict.fromkeys(t for t in (*self.cameras, *self.infos, *self.depths) if t))

    def kind(self, camera: int) -> str:
        """ "raw", "compressed" or "video" for the camera's topic."""
        return {IMAGE_TYPE: "raw", COMPRESSED_TYPE: "compressed", VIDEO_TYPE: "video"}[self.types[camera]]


def namespace_of(topic: str) -> str:
    """The namespace of a camera's topics (/camera/color/image_raw/compressed: /camera/color)."""
    parts = [p for p in topic.split("/") if p]
    while parts and parts[-1] in ("compressed", "compressedDepth", "theora", "h264", "ffmpeg", "zstd"):
        parts.pop()
    return "/" + "/".join(parts[:-1]) if len(parts) > 1 else "/"


def _is_depth(bag: BagReader, t: TopicInfo) -> bool:
    if t.msgtype != IMAGE_TYPE:
        return "depth" in t.name.lower() and t.msgtype == COMPRESSED_TYPE
    if "depth" in t.name.lower():
        return True
    store, unknown = bag.typestore([t.name])
    if t.msgtype in unknown:
        return False
    for m in bag.messages([t.name]):  # the first message's encoding says it
        try:
            msg: Any = store.deserialize_cdr(m.data, m.msgtype)
            return str(msg.encoding) in DEPTH_ENCODINGS
        except Exception:  # a damaged payload: the integrity check reports it
            return False
    return False


def _listed(topics: Sequence[TopicInfo]) -> str:
    return ", ".join(t.describe() for t in topics)


def _nearest(camera: str, candidates: Sequence[TopicInfo]) -> list[TopicInfo]:
    """The candidates in the camera's namespace (or the closest one above it)."""
    space = namespace_of(camera)
    while True:
        near = [
            c
            for c in candidates
            if namespace_of(c.name) == space or namespace_of(c.name).startswith(space + "/")
        ]
        if near or space == "/":
            return near
        space = space.rsplit("/", 1)[0] or "/"


def _pair(
    bag: BagReader,
    cameras: Sequence[str],
    given: Sequence[str],
    candidates: list[TopicInfo],
    what: str,
    option: str,
) -> tuple[list[str], list[str]]:
    """Per camera, the named topic (one per camera, or one for a single camera), or the one candidate in its
    namespace; (topics, what was chosen)."""
    if given:
        if len(given) != len(cameras):
            raise BagError(f"give one {option} per camera topic ({len(cameras)}), got {len(given)}")
        return list(given), []
    out, said = [], []
    for camera in cameras:
        near = _nearest(camera, candidates) if len(candidates) > 1 else candidates
        if len(near) == 1:
            out.append(near[0].name)
            said.append(f"{what} {near[0].name} for {camera}")
        elif len(near) > 1:
            raise BagError(
                f"bag {bag.path} has several {what} topics for camera {camera}: {_listed(near)}; choose one "
                f"with {option}" + (" (or --no-depth)" if what == "depth" else "")
            )
        else:
            out.append("")
    return out, said


def choose_topics(
    bag: BagReader,
    cameras: Sequence[str] = (),
    infos: Sequence[str] = (),
    depths: Sequence[str] = (),
    depth: bool = True,
) -> CameraTopics:
    """The camera topics to replay, with their CameraInfo and (when `depth`) depth topics."""
    chosen: list[str] = []
    for name in cameras:
        t = bag.topic(name)
        if t.msgtype not in CAMERA_TYPES:
            raise BagError(f"topic {name} carries {t.msgtype}, not camera images ({', '.join(CAMERA_TYPES)})")
    for name in infos:
        if (t := bag.topic(name)).msgtype != INFO_TYPE:
            raise BagError(f"topic {name} carries {t.msgtype}, not {INFO_TYPE}")
    for name in depths:
        if (t := bag.topic(name)).msgtype != IMAGE_TYPE:
            raise BagError(f"topic {name} carries {t.msgtype}, not a depth {IMAGE_TYPE}")
    images = [t for t in bag.topics.values() if t.msgtype in CAMERA_TYPES]
    depth_like = [t for t in images if _is_depth(bag, t)] if (not cameras or (depth and not depths)) else []
    if not cameras:
        colour = [t for t in images if t not in depth_like]
        if not colour:
            raise BagError(
                f"bag {bag.path} has no camera topic ({', '.join(CAMERA_TYPES)}); "
                f"it has: {bag.describe_topics()}"
            )
        # A camera topic declared without a message (a camera that never published) is no candidate while
        # another has messages.
        silent = [t for t in colour if t.count == 0] if any(t.count != 0 for t in colour) else []
        colour = [t for t in colour if t not in silent]
        if len(colour) > 1:
            raise BagError(
                f"bag {bag.path} has {len(colour)} camera topics: {_listed(colour)}; choose with "
                "--camera-topic (repeatable; scenario key camera_topics)"
            )
        cameras = [colour[0].name]
        only = "the bag's only camera topic" + (
            f" with messages ({', '.join(t.name for t in silent)} has none)" if silent else ""
        )
        chosen.append(f"camera {colour[0].name} ({colour[0].msgtype}), {only}")
    info_candidates = [t for t in bag.topics.values() if t.msgtype == INFO_TYPE]
    info_list, said = _pair(bag, cameras, infos, info_candidates, "camera info", "--info-topic")
    chosen += said
    if depth:
        depth_list, said = _pair(bag, cameras, depths, depth_like, "depth", "--depth-topic")
        for i, d in enumerate(depth_list):
            if d and not info_list[i]:
                if depths:
                    raise BagError(f"depth topic {d} needs the camera's CameraInfo topic (--info-topic)")
                depth_list[i] = ""
                said = [s for s in said if d not in s]
                chosen.append(f"depth {d} left out: no CameraInfo topic for {cameras[i]}")
        chosen += said
    else:
        depth_list = [""] * len(cameras)
    types = tuple(bag.topics[c].msgtype for c in cameras)
    return CameraTopics(tuple(cameras), tuple(info_list), tuple(depth_list), types, tuple(chosen))
