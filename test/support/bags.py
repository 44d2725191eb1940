"""Bags for the bag tools' tests, read back and written by tools other than the project's own writer.

- `read_topics`, `topic_counts`: what a bag holds, deserialized (through the project's reader).
- `write_mcap_ros2`: MCAP as the `mcap` package's ROS 2 writer makes it (profile ros2, zstd chunks with CRCs,
  message definitions as schemas, no QoS metadata on the channels), with or without a rosbag2 metadata.yaml
  of any version 4-9 beside it, in one or several files.
- `write_sqlite_bag`: sqlite3 `.db3` files as rosbag2's own releases wrote them (db schema 2 for metadata
  version 4, schema 3 for 5, schema 4 with message definitions for 8 and 9), written with Python's sqlite3.
- `camera_messages`: a camera scene as messages of several types: raw images, JPEG and PNG CompressedImage
  (image_transport's format strings), CameraInfo, a depth image, and extra topics of types no ROS install has.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import yaml
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from cosmos_reasoner_ros.bag.files.reader import BagReader

T0 = 1_600_000_000_000_000_000  # 2020-09-13: a recording years old
WIDGET_MSG = """std_msgs/Header header
acme_msgs/Part[] parts
float64[3] pose
string label
================================================================================
MSG: acme_msgs/Part
int32 id
float64 weight
================================================================================
MSG: std_msgs/Header
builtin_interfaces/Time stamp
string frame_id
================================================================================
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec
"""
STORE = get_typestore(Stores.ROS2_KILTED)
STORE.register(get_types_from_msg(WIDGET_MSG, "acme_msgs/msg/Widget"))
_PART = "int32 id\nfloat64 weight\n"
STORE.register(get_types_from_msg(_PART, "acme_msgs/msg/Part"))
T = STORE.types


def read_topics(bag: Path) -> dict[str, list[tuple[int, Any]]]:
    """Every readable topic's (receive time, message), through the project's reader."""
    out: dict[str, list[tuple[int, Any]]] = {}
    with BagReader(bag) as reader:
        topics = [t.name for t in reader.topics.values() if t.readable]
        store, unknown = reader.typestore(topics)
        for m in reader.messages([t for t in topics if reader.topics[t].msgtype not in unknown]):
            out.setdefault(m.topic, []).append((m.log_ns, store.deserialize_cdr(m.data, m.msgtype)))
    return out


def topic_counts(bag: Path) -> dict[str, int]:
    with BagReader(bag) as reader:
        return {t.name: t.count for t in reader.topics.values()}


# ------------------------------------------------------------------------------------------- a scene


def _header(ns: int, frame_id: str = "camera_optical_frame") -> Any:
    return T["std_msgs/msg/Header"](
        stamp=T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9), frame_id=frame_id
    )


def scene(k: int, width: int = 64, height: int = 48) -> np.ndarray:
    """Frame k: a dark background with a bright square moving right."""
    rgb = np.full((height, width, 3), 30, np.uint8)
    x = (k * 3) % (width - 10)
    rgb[10:20, x : x + 10] = (250, 200, 40)
    return rgb


@dataclass(frozen=True)
class Msg:
    topic: str
    msgtype: str
    ns: int
    data: bytes


def _cdr(msg: Any) -> bytes:
    return bytes(STORE.serialize_cdr(msg, msg.__msgtype__))


def camera_messages(
    frames: int = 20,
    period_ns: int = 100_000_000,
    start_ns: int = T0,
    kinds: Sequence[str] = ("raw", "info", "depth", "jpeg", "png", "extra"),
    width: int = 64,
    height: int = 48,
) -> list[Msg]:
    """A camera recording as a robot makes one: /cam/color/image_raw (raw), .../compressed (JPEG),
    /cam/png/compressed (PNG), /cam/color/camera_info, /cam/depth/image_raw (16UC1), and topics of other
    types: a String, an acme_msgs/msg/Widget (no ROS install has it), a stereo_msgs/msg/DisparityImage."""
    out = []
    fx = width / 2 / np.tan(np.radians(30))
    for k in range(frames):
        ns = start_ns + k * period_ns
        rgb = scene(k, width, height)
        if "raw" in kinds:
            img = T["sensor_msgs/msg/Image"](
                header=_header(ns), height=height, width=width, encoding="rgb8", is_bigendian=0,
                step=width * 3, data=rgb.reshape(-1),
            )  # fmt: skip
            out.append(Msg("/cam/color/image_raw", img.__msgtype__, ns + 1, _cdr(img)))
        if "jpeg" in kinds:
            _, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            c = T["sensor_msgs/msg/CompressedImage"](
                header=_header(ns), format="rgb8; jpeg compressed bgr8", data=buf.reshape(-1)
            )
            out.append(Msg("/cam/color/image_raw/compressed", c.__msgtype__, ns + 2, _cdr(c)))
        if "png" in kinds:
            _, buf = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            c = T["sensor_msgs/msg/CompressedImage"](
                header=_header(ns), format="rgb8; png compressed bgr8", data=buf.reshape(-1)
            )
            out.append(Msg("/cam/png/compressed", c.__msgtype__, ns + 3, _cdr(c)))
        if "info" in kinds:
            info = T["sensor_msgs/msg/CameraInfo"](
                header=_header(ns), height=height, width=width, distortion_model="plumb_bob", d=np.zeros(5),
                k=np.array([fx, 0, width / 2, 0, fx, height / 2, 0, 0, 1.0]), r=np.eye(3).reshape(-1),
                p=np.array([fx, 0, width / 2, 0, 0, fx, height / 2, 0, 0, 0, 1.0, 0]),
                binning_x=0, binning_y=0,
                roi=T["sensor_msgs/msg/RegionOfInterest"](
                    x_offset=0, y_offset=0, height=0, width=0, do_rectify=False
                ),
            )  # fmt: skip
            out.append(Msg("/cam/color/camera_info", info.__msgtype__, ns + 4, _cdr(info)))
        if "depth" in kinds:
            depth = np.full((height, width), 1500, np.uint16)
            d = T["sensor_msgs/msg/Image"](
                header=_header(ns), height=height, width=width, encoding="16UC1", is_bigendian=0,
                step=width * 2, data=depth.view(np.uint8).reshape(-1),
            )  # fmt: skip
            out.append(Msg("/cam/depth/image_raw", d.__msgtype__, ns + 5, _cdr(d)))
        if "extra" in kinds:
            s = T["std_msgs/msg/String"](data=f"hello {k}")
            out.append(Msg("/chatter", s.__msgtype__, ns + 6, _cdr(s)))
            w = T["acme_msgs/msg/Widget"](
                header=_header(ns), parts=[T["acme_msgs/msg/Part"](id=k, weight=1.5)],
                pose=np.array([1.0, 2.0, 3.0]), label="w",
            )  # fmt: skip
            out.append(Msg("/acme/widget", w.__msgtype__, ns + 7, _cdr(w)))
            disp = T["stereo_msgs/msg/DisparityImage"](
                header=_header(ns),
                image=T["sensor_msgs/msg/Image"](
                    header=_header(ns), height=1, width=1, encoding="32FC1", is_bigendian=0, step=4,
                    data=np.zeros(4, np.uint8),
                ),
                f=1.0, t=0.1,
                valid_window=T["sensor_msgs/msg/RegionOfInterest"](
                    x_offset=0, y_offset=0, height=0, width=0, do_rectify=False
                ),
                min_disparity=0.0, max_disparity=1.0, delta_d=0.1,
            )  # fmt: skip
            out.append(Msg("/stereo/disparity", disp.__msgtype__, ns + 8, _cdr(disp)))
    return out


def definition(msgtype: str) -> str:
    if msgtype == "acme_msgs/msg/Widget":
        return WIDGET_MSG
    if msgtype == "foxglove_msgs/msg/CompressedVideo":
        return VIDEO_MSG
    return str(STORE.generate_msgdef(msgtype, ros_version=2)[0])


LOG = "rcl_interfaces/msg/Log"
# What rosbag2's own sqlite3 talker bag stores for /rosout (issue 38): a placeholder, not Log's definition.
PLACEHOLDER_LOG_MSG = "uint8 level\n"


def rosout_messages(count: int = 10, start_ns: int = T0, period_ns: int = 500_000_000) -> list[Msg]:
    """/rosout as `ros2 run demo_nodes_cpp talker` logs it: "Publishing: 'Hello World: N'" at INFO."""
    out = []
    for i in range(count):
        ns = start_ns + i * period_ns
        stamp = T["builtin_interfaces/msg/Time"](sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)
        log = T[LOG](
            stamp=stamp,
            level=20,
            name="talker",
            msg=f"Publishing: 'Hello World: {i}'",
            file="talker.cpp",
            function="operator()",
            line=42,
        )
        out.append(Msg("/rosout", LOG, ns, _cdr(log)))
    return out


# ------------------------------------------------------------------------------------------- writers

QOS_V8 = {  # what rosbag2 (Humble..Jazzy) stores for a reliable volatile keep_last(10) publisher
    "history": 1,
    "depth": 10,
    "reliability": 1,
    "durability": 2,
    "deadline": {"sec": 9223372036, "nsec": 854775807},
    "lifespan": {"sec": 9223372036, "nsec": 854775807},
    "liveliness": 1,
    "liveliness_lease_duration": {"sec": 9223372036, "nsec": 854775807},
    "avoid_ros_namespace_conventions": False,
}
_V9_NAMES = {
    "history": {1: "keep_last"},
    "reliability": {1: "reliable"},
    "durability": {2: "volatile"},
    "liveliness": {1: "automatic"},
}


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:
        return True


def metadata_yaml(
    version: int,
    storage: str,
    files: Sequence[tuple[str, list[Msg]]],
    qos: bool = True,
    distro: str = "jazzy",
) -> str:
    """metadata.yaml with the fields rosbag2 writes per version (4: QoS as a YAML string, 5: files, 6:
    custom_data, 7: type_description_hash, 8: ros_distro, 9: QoS as a list with names)."""
    msgs = [m for _, ms in files for m in ms]
    start, end = min(m.ns for m in msgs), max(m.ns for m in msgs)
    topics: dict[str, tuple[str, int]] = {}
    for m in msgs:
        topics[m.topic] = (m.msgtype, topics.get(m.topic, ("", 0))[1] + 1)
    q: Any = ""
    if qos and version >= 9:
        q = [{k: _V9_NAMES[k][v] if k in _V9_NAMES else v for k, v in QOS_V8.items()}]
    elif qos:
        q = yaml.safe_dump([QOS_V8], sort_keys=False).strip()
    info: dict[str, Any] = {
        "version": version,
        "storage_identifier": storage,
        "duration": {"nanoseconds": end - start},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": len(msgs),
        "topics_with_message_count": [],
        "compression_format": "",
        "compression_mode": "",
        "relative_file_paths": [name for name, _ in files],
    }
    for name, (msgtype, count) in topics.items():
        meta: dict[str, Any] = {
            "name": name,
            "type": msgtype,
            "serialization_format": "cdr",
            "offered_qos_profiles": q,
        }
        if version >= 7:
            meta["type_description_hash"] = ""
        info["topics_with_message_count"].append({"topic_metadata": meta, "message_count": count})
    if version >= 5:
        info["files"] = [
            {
                "path": name,
                "starting_time": {"nanoseconds_since_epoch": min(m.ns for m in ms)},
                "duration": {"nanoseconds": max(m.ns for m in ms) - min(m.ns for m in ms)},
                "message_count": len(ms),
            }
            for name, ms in files
        ]
    if version >= 6:
        info["custom_data"] = None
    if version >= 8:
        info["ros_distro"] = distro
    return yaml.dump({"rosbag2_bagfile_information": info}, Dumper=_NoAliases, sort_keys=False)


def _split(msgs: Sequence[Msg], parts: int) -> list[list[Msg]]:
    ordered = sorted(msgs, key=lambda m: m.ns)
    size = -(-len(ordered) // parts)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def write_mcap_ros2(
    bag: Path, msgs: Iterable[Msg], metadata_version: int | None = 9, parts: int = 1, qos: bool = True
) -> Path:
    """A bag folder of MCAP file(s) written with mcap_ros2's writer (a bare file when bag ends in .mcap)."""
    from mcap_ros2.writer import Writer

    msgs = list(msgs)
    single = bag.suffix == ".mcap"
    if not single:
        bag.mkdir(parents=True)
    files = []
    for i, chunk in enumerate(_split(msgs, parts)):
        path = bag if single else bag / f"{bag.name}_{i}.mcap"
        with path.open("wb") as fh, Writer(fh) as writer:
            schemas: dict[str, Any] = {}
            for m in chunk:
                if m.msgtype not in schemas:
                    schemas[m.msgtype] = writer.register_msgdef(m.msgtype, definition(m.msgtype))
                writer.write_message(
                    m.topic, schemas[m.msgtype], _as_dict(m), log_time=m.ns, publish_time=m.ns
                )
        files.append((path.name, chunk))
    if metadata_version is not None and not single:
        (bag / "metadata.yaml").write_text(metadata_yaml(metadata_version, "mcap", files, qos))
    return bag


def _as_dict(m: Msg) -> Any:
    """mcap_ros2's writer encodes plain values (dicts; bytes for uint8[]), not rosbags' objects."""

    def plain(value: Any) -> Any:
        if hasattr(value, "__dataclass_fields__"):
            return {k: plain(getattr(value, k)) for k in value.__dataclass_fields__ if k != "__msgtype__"}
        if isinstance(value, np.ndarray):
            return value.tobytes() if value.dtype == np.uint8 else value.tolist()
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return plain(STORE.deserialize_cdr(m.data, m.msgtype))


_DB = {  # CREATE statements of rosbag2's sqlite3 storage, by db schema version
    2: [
        "CREATE TABLE topics(id INTEGER PRIMARY KEY,name TEXT NOT NULL,type TEXT NOT NULL,"
        "serialization_format TEXT NOT NULL,offered_qos_profiles TEXT NOT NULL)"
    ],
    3: [
        "CREATE TABLE schema(schema_version INTEGER PRIMARY KEY,ros_distro TEXT NOT NULL)",
        "CREATE TABLE metadata(id INTEGER PRIMARY KEY,metadata_version INTEGER NOT NULL,"
        "metadata TEXT NOT NULL)",
        "CREATE TABLE topics(id INTEGER PRIMARY KEY,name TEXT NOT NULL,type TEXT NOT NULL,"
        "serialization_format TEXT NOT NULL,offered_qos_profiles TEXT NOT NULL)",
    ],
    4: [
        "CREATE TABLE schema(schema_version INTEGER PRIMARY KEY,ros_distro TEXT NOT NULL)",
        "CREATE TABLE metadata(id INTEGER PRIMARY KEY,metadata_version INTEGER NOT NULL,"
        "metadata TEXT NOT NULL)",
        "CREATE TABLE topics(id INTEGER PRIMARY KEY,name TEXT NOT NULL,type TEXT NOT NULL,"
        "serialization_format TEXT NOT NULL,offered_qos_profiles TEXT NOT NULL,"
        "type_description_hash TEXT NOT NULL)",
        "CREATE TABLE message_definitions(id INTEGER PRIMARY KEY,topic_type TEXT NOT NULL,"
        "encoding TEXT NOT NULL,encoded_message_definition TEXT NOT NULL,"
        "type_description_hash TEXT NOT NULL)",
    ],
}
_MESSAGES = [
    "CREATE TABLE messages(id INTEGER PRIMARY KEY,topic_id INTEGER NOT NULL,timestamp INTEGER NOT NULL, "
    "data BLOB NOT NULL)",
    "CREATE INDEX timestamp_idx ON messages (timestamp ASC)",
]
_ERA = {4: 2, 5: 3, 6: 4, 7: 4, 8: 4, 9: 4}  # metadata version -> db schema


def write_sqlite_bag(
    bag: Path,
    msgs: Iterable[Msg],
    metadata_version: int = 9,
    parts: int = 1,
    definitions: Callable[[str], str | None] | None = None,
) -> Path:
    """A rosbag2 sqlite3 bag folder as the release of that metadata version wrote it; `definitions` gives
    the stored message definitions (default: this module's; None: none stored for that type)."""
    define = definitions or definition
    msgs = list(msgs)
    bag.mkdir(parents=True)
    schema = _ERA[metadata_version]
    qos_text = yaml.safe_dump([QOS_V8], sort_keys=False).strip()
    files = []
    for i, chunk in enumerate(_split(msgs, parts)):
        name = f"{bag.name}_{i}.db3"
        db = sqlite3.connect(bag / name)
        for statement in _DB[schema] + _MESSAGES:
            db.execute(statement)
        if schema >= 3:
            db.execute("INSERT INTO schema VALUES (?, ?)", (schema, "humble" if schema == 3 else "jazzy"))
        ids: dict[str, int] = {}
        for m in chunk:
            if m.topic not in ids:
                if schema >= 4:
                    cur = db.execute(
                        "INSERT INTO topics(name,type,serialization_format,offered_qos_profiles,"
                        "type_description_hash) VALUES (?,?,?,?,?)",
                        (m.topic, m.msgtype, "cdr", qos_text, ""),
                    )
                    text = define(m.msgtype)
                    if (
                        text is not None
                        and not db.execute(
                            "SELECT 1 FROM message_definitions WHERE topic_type=?", (m.msgtype,)
                        ).fetchone()
                    ):
                        db.execute(
                            "INSERT INTO message_definitions(topic_type,encoding,encoded_message_definition,"
                            "type_description_hash) VALUES (?,?,?,?)",
                            (m.msgtype, "ros2msg", text, ""),
                        )
                else:
                    cur = db.execute(
                        "INSERT INTO topics(name,type,serialization_format,offered_qos_profiles) "
                        "VALUES (?,?,?,?)",
                        (m.topic, m.msgtype, "cdr", qos_text),
                    )
                ids[m.topic] = int(cur.lastrowid or 0)
            db.execute(
                "INSERT INTO messages(topic_id,timestamp,data) VALUES (?,?,?)", (ids[m.topic], m.ns, m.data)
            )
        db.commit()
        db.close()
        files.append((name, chunk))
    (bag / "metadata.yaml").write_text(metadata_yaml(metadata_version, "sqlite3", files))
    return bag


def damage(path: Path, size: int = 64 * 1024, seed: int = 20) -> None:
    """`size` random bytes written over the middle of a file."""
    middle = path.stat().st_size // 2
    with path.open("r+b") as fh:
        fh.seek(max(0, middle - size // 2))
        fh.write(np.random.default_rng(seed).bytes(size))


VIDEO_MSG = """builtin_interfaces/Time timestamp
string frame_id
uint8[] data
string format
================================================================================
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec
"""
STORE.register(get_types_from_msg(VIDEO_MSG, "foxglove_msgs/msg/CompressedVideo"))


def video_messages(
    frames: int = 30,
    period_ns: int = 100_000_000,
    start_ns: int = T0,
    gop: int = 10,
    topic: str = "/cam/video",
) -> list[Msg]:
    """foxglove_msgs/msg/CompressedVideo as robots record it: H.264 Annex B, one access unit per message, no
    B-frames, SPS/PPS before each keyframe (libx264 through PyAV, zero-latency tuning)."""
    import av

    codec = av.CodecContext.create("libx264", "w")
    codec.width, codec.height, codec.pix_fmt = 64, 48, "yuv420p"
    codec.time_base = Fraction(1, 10)
    codec.gop_size = gop
    codec.options = {
        "preset": "ultrafast",
        "tune": "zerolatency",
        "bf": "0",
        "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0",
    }
    out = []
    for k in range(frames):
        frame = av.VideoFrame.from_ndarray(scene(k), format="rgb24").reformat(format="yuv420p")
        frame.pts = k
        for packet in codec.encode(frame):
            ns = start_ns + int(packet.pts) * period_ns
            msg = T["foxglove_msgs/msg/CompressedVideo"](
                timestamp=T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                frame_id="camera_optical_frame",
                data=np.frombuffer(bytes(packet), np.uint8),
                format="h264",
            )
            out.append(Msg(topic, msg.__msgtype__, ns, _cdr(msg)))
    return out
